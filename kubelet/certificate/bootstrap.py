"""TLS bootstrapping (pkg/kubelet/certificate/bootstrap): from a bootstrap
kubeconfig (usually a bootstrap token) to a client certificate of the node's
own and a kubeconfig that points at it.

The private key is kept in ``<cert-dir>/kubelet-client.key.tmp`` until the
certificate is issued, and the CSR is named after a digest of the key and the
subject, so a kubelet killed while waiting finds its pending request again on
the next start instead of leaving a new one behind each time."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import logging
import os
import random
import time
from dataclasses import dataclass
from typing import Any

import yaml
from cryptography.hazmat.primitives import serialization

from kubelet.certificate.csr import (
    CLIENT_KUBELET_SIGNER,
    CSRClient,
    CSRError,
    Template,
    generate_key,
    key_pem,
    make_csr,
    request_certificate,
    usages_for,
    wait_for_certificate,
)
from kubelet.certificate.kubelet import client_template
from kubelet.certificate.manager import check_subject
from kubelet.certificate.store import (
    FileStore,
    NoCertKeyError,
    PrivateKey,
    load_pair_file,
    load_private_key,
    parse_pair,
)
from kubelet.util.atomicfile import write_atomic

log = logging.getLogger(__name__)

TMP_PRIVATE_KEY_FILE = "kubelet-client.key.tmp"
# How long one request may stay pending before the kubelet gives up on it (upstream: 1 h).
REQUEST_TIMEOUT = 3600.0


class BootstrapError(Exception):
    """Bootstrapping cannot go on (bad kubeconfig, unusable cert dir, wrong node)."""


@dataclass(frozen=True)
class ClusterInfo:
    """The cluster stanza of the bootstrap kubeconfig, copied into the new kubeconfig."""

    server: str
    ca_file: str = ""
    ca_data: str = ""  # base64, as in a kubeconfig
    insecure: bool = False


def read_cluster(path: str) -> ClusterInfo:
    """The current context's cluster of a kubeconfig; BootstrapError if unreadable."""
    try:
        with open(path) as fh:
            doc = yaml.safe_load(fh) or {}
    except (OSError, yaml.YAMLError) as err:
        raise BootstrapError(f"unable to load bootstrap kubeconfig: {err}") from err
    if not isinstance(doc, dict):
        raise BootstrapError(f"unable to load bootstrap kubeconfig {path}: not a kubeconfig")
    ctx_name = doc.get("current-context", "")
    ctx = next(
        (c.get("context") or {} for c in doc.get("contexts") or [] if c.get("name") == ctx_name), {}
    )
    cluster_name = ctx.get("cluster", "")
    clusters = doc.get("clusters") or []
    cluster = next(
        (c.get("cluster") or {} for c in clusters if c.get("name") == cluster_name), None
    )
    if cluster is None:
        if len(clusters) != 1:
            raise BootstrapError(
                f"bootstrap kubeconfig {path} has no cluster for context {ctx_name!r}"
            )
        cluster = clusters[0].get("cluster") or {}
    ca_file = str(cluster.get("certificate-authority") or "")
    if ca_file and not os.path.isabs(ca_file):
        ca_file = os.path.join(os.path.dirname(os.path.abspath(path)), ca_file)
    return ClusterInfo(
        server=str(cluster.get("server") or ""),
        ca_file=ca_file,
        ca_data="" if ca_file else str(cluster.get("certificate-authority-data") or ""),
        insecure=bool(cluster.get("insecure-skip-tls-verify")),
    )


def write_kubeconfig(cluster: ClusterInfo, kubeconfig_path: str, pem_path: str) -> None:
    """The kubelet's own kubeconfig: the bootstrap cluster, the issued pair as its user."""
    c: dict[str, Any] = {"server": cluster.server}
    if cluster.insecure:
        c["insecure-skip-tls-verify"] = True
    if cluster.ca_file:
        c["certificate-authority"] = cluster.ca_file
    elif cluster.ca_data:
        c["certificate-authority-data"] = cluster.ca_data
    doc = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "default-cluster", "cluster": c}],
        "users": [
            {
                "name": "default-auth",
                "user": {"client-certificate": pem_path, "client-key": pem_path},
            }
        ],
        "contexts": [
            {
                "name": "default-context",
                "context": {
                    "cluster": "default-cluster",
                    "user": "default-auth",
                    "namespace": "default",
                },
            }
        ],
        "current-context": "default-context",
        "preferences": {},
    }
    d = os.path.dirname(os.path.abspath(kubeconfig_path))
    os.makedirs(d, mode=0o755, exist_ok=True)
    write_atomic(kubeconfig_path, yaml.safe_dump(doc, sort_keys=False).encode(), 0o600)


def client_config_still_valid(kubeconfig_path: str, now: float | None = None) -> bool:
    """Whether the kubeconfig exists and its client certificate is readable and unexpired."""
    if not os.path.exists(kubeconfig_path):
        return False
    from kubelet.client.kubeconfig import load_kubeconfig

    try:
        conn = load_kubeconfig(kubeconfig_path)
    except ValueError as err:
        log.error(
            "unable to read existing bootstrap client config from %s: %s", kubeconfig_path, err
        )
        return False
    if not conn.cert_file:
        log.error("existing client config %s has no client certificate", kubeconfig_path)
        return False
    try:
        pair = load_pair_file(conn.cert_file, conn.key_file)
    except (OSError, ValueError) as err:
        log.error(
            "unable to load TLS certificates from existing client config %s: %s",
            kubeconfig_path,
            err,
        )
        return False
    t = time.time() if now is None else now
    if t > pair.not_after:
        log.error(
            "part of the existing bootstrap client certificate in %s is expired: %s",
            kubeconfig_path,
            pair.leaf.not_valid_after_utc.isoformat(),
        )
        return False
    return True


def client_certificate_subject(kubeconfig_path: str) -> str:
    """The CN of the kubeconfig's client certificate ('' when it has none)."""
    from kubelet.client.kubeconfig import load_kubeconfig

    try:
        conn = load_kubeconfig(kubeconfig_path)
        if not conn.cert_file:
            return ""
        return load_pair_file(conn.cert_file, conn.key_file).common_name
    except (OSError, ValueError):
        return ""


def check_cert_dir(cert_dir: str) -> None:
    """Make the cert dir or fail with why it cannot be used."""
    try:
        os.makedirs(cert_dir, mode=0o755, exist_ok=True)
    except OSError as err:
        raise BootstrapError(f"cannot use --cert-dir {cert_dir}: {err}") from err
    if not os.access(cert_dir, os.R_OK | os.W_OK | os.X_OK):
        raise BootstrapError(f"cannot use --cert-dir {cert_dir}: not readable and writable")


def load_or_generate_key_file(path: str) -> bytes:
    """The pending key, or a new one written 0600 before any request is made with it."""
    try:
        with open(path, "rb") as fh:
            data = fh.read()
        load_private_key(data)
        log.info("Reusing the private key of a pending request, %s", path)
        return data
    except FileNotFoundError:
        pass
    except ValueError as err:
        log.warning("Discarding unreadable private key %s: %s", path, err)
    data = key_pem(generate_key())
    write_atomic(path, data, 0o600)
    return data


def digested_name(key: PrivateKey, t: Template, usages: list[str]) -> str:
    """A CSR name fixed by the key, the subject and the usages: the same request
    after a restart gets the same name."""
    h = hashlib.new("sha512_256")

    def put(data: bytes) -> None:
        # '|' is outside the base64url alphabet: fields cannot run into each other.
        h.update(base64.urlsafe_b64encode(data).rstrip(b"="))
        h.update(b"|")

    put(
        key.public_key().public_bytes(
            serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )
    put(t.common_name.encode())
    for o in t.organizations:
        put(o.encode())
    for u in usages:
        put(u.encode())
    return "node-csr-" + base64.urlsafe_b64encode(h.digest()).rstrip(b"=").decode()


async def request_node_certificate(
    client: CSRClient, key_data: bytes, node_name: str, timeout: float = REQUEST_TIMEOUT
) -> bytes:
    key = load_private_key(key_data)
    t = client_template(node_name)
    usages = usages_for(key, "client auth")
    csr_pem = make_csr(key, t)
    name, uid = await request_certificate(
        client, csr_pem, digested_name(key, t, usages), CLIENT_KUBELET_SIGNER, usages, key
    )
    log.info("Waiting for client certificate to be issued (certificate signing request %s)", name)
    async with asyncio.timeout(timeout):
        return await wait_for_certificate(client, name, uid)


async def wait_for_server(client: CSRClient, deadline: float = 60.0) -> bool:
    """Poll the API server about every 2 s until it answers or `deadline` passes
    (upstream polls /healthz; /version answers the same unauthenticated
    clients, in JSON)."""
    loop = asyncio.get_running_loop()
    end = loop.time() + deadline
    while loop.time() < end:
        try:
            await client.get("/version", timeout=1.0)
            return True
        except Exception as err:  # not answering, whatever the reason: poll again
            log.info("Failed to connect to apiserver: %s", err)
        await asyncio.sleep(2.0 * (1 + 0.2 * random.random()))
    log.info("Error waiting for apiserver to come up: timed out waiting to connect to apiserver")
    return False


async def load_client_cert(
    kubeconfig_path: str,
    bootstrap_path: str,
    cert_dir: str,
    node_name: str,
    client: CSRClient | None = None,
    server_wait: float = 60.0,
) -> None:
    """Bootstrap unless `kubeconfig_path` holds a valid client certificate; on
    return the kubeconfig points at ``<cert_dir>/kubelet-client-current.pem``.

    A request that is denied, failed or timed out is logged and followed by a
    new one with a new key; an unreachable API server is retried with back-off."""
    if client_config_still_valid(kubeconfig_path):
        cn = client_certificate_subject(kubeconfig_path)
        want = client_template(node_name).common_name
        if cn.startswith("system:node:") and cn != want:
            raise BootstrapError(
                f"the client certificate in {kubeconfig_path} is for {cn!r}, but this kubelet is "
                f"{want!r}: remove it (and {cert_dir}/kubelet-client-current.pem) to bootstrap "
                "again, or fix --hostname-override"
            )
        log.info("Kubeconfig %s exists and is valid, skipping bootstrap", kubeconfig_path)
        return
    log.info("Using bootstrap kubeconfig %s to get a client certificate", bootstrap_path)
    cluster = read_cluster(bootstrap_path)
    check_cert_dir(cert_dir)
    own_client = None
    if client is None:
        from kubelet.client.kubeconfig import load_kubeconfig
        from kubelet.client.rest import APIClient
        from kubelet.version import user_agent

        try:
            conn = load_kubeconfig(bootstrap_path)
        except ValueError as err:
            raise BootstrapError(f"unable to load bootstrap kubeconfig: {err}") from err
        own_client = APIClient(conn, 5, 10, timeout=30, user_agent=user_agent())
        client = own_client
    try:
        await _bootstrap(client, cluster, kubeconfig_path, cert_dir, node_name, server_wait)
    finally:
        if own_client is not None:
            await own_client.close()


async def _bootstrap(
    client: CSRClient,
    cluster: ClusterInfo,
    kubeconfig_path: str,
    cert_dir: str,
    node_name: str,
    server_wait: float,
) -> None:
    store = FileStore("kubelet-client", cert_dir)
    key_data: bytes | None = None
    try:
        # An expired pair's key is reused, as upstream does.
        key_data = store.current().key_pem
    except (NoCertKeyError, ValueError, OSError):
        key_data = None
    tmp_key = os.path.join(cert_dir, TMP_PRIVATE_KEY_FILE)
    if key_data is None:
        key_data = load_or_generate_key_file(tmp_key)
    await wait_for_server(client, server_wait)
    delay = 2.0
    while True:
        try:
            cert_pem = await request_node_certificate(client, key_data, node_name)
            check_subject(
                parse_pair(cert_pem, key_data, "the issued certificate"), client_template(node_name)
            )
            break
        except asyncio.CancelledError:
            raise
        except CSRError as err:
            # Denied or failed: this key's request will never be issued; start over.
            log.error("Client certificate request failed: %s; retrying with a new key", err)
            _remove(tmp_key)
            key_data = load_or_generate_key_file(tmp_key)
        except TimeoutError:
            log.error(
                "Client certificate request was not issued within %.0fs; "
                "is the csrapproving controller running and bootstrapping allowed by RBAC?",
                REQUEST_TIMEOUT,
            )
        except ValueError as err:  # the issued certificate is not for this node
            raise BootstrapError(str(err)) from err
        except Exception as err:  # the request loop retries with back-off
            log.error("Unable to request a client certificate: %s (retrying in %.0fs)", err, delay)
        await asyncio.sleep(delay * (1 + 0.1 * random.random()))
        delay = min(delay * 2, 32.0)
    loop = asyncio.get_running_loop()
    pair = await loop.run_in_executor(None, store.update, cert_pem, key_data)
    _remove(tmp_key)
    write_kubeconfig(cluster, kubeconfig_path, store.current_path())
    log.info(
        "Client certificate issued for %s, valid until %s; wrote %s",
        pair.common_name,
        pair.leaf.not_valid_after_utc.isoformat(),
        kubeconfig_path,
    )


def _remove(path: str) -> None:
    try:
        os.remove(path)
    except FileNotFoundError:
        pass
