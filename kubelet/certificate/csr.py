"""Certificate signing requests through certificates.k8s.io/v1 (client-go
util/certificate/csr): make one, submit it (reusing an existing request of the
same name when it is for the same key), and watch it until it is issued."""

from __future__ import annotations

import asyncio
import base64
import logging
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import aiohttp
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import NameOID

from kubelet.certificate.store import PrivateKey
from kubelet.client.rest import APIError

log = logging.getLogger(__name__)

CSR_PATH = "/apis/certificates.k8s.io/v1/certificatesigningrequests"
CLIENT_KUBELET_SIGNER = "kubernetes.io/kube-apiserver-client-kubelet"
KUBELET_SERVING_SIGNER = "kubernetes.io/kubelet-serving"


class CSRClient(Protocol):
    """What this module needs of an API client (kubelet.client.rest.APIClient)."""

    async def create(self, path: str, obj: Mapping[str, Any], **kw: Any) -> Any: ...

    async def get(self, path: str, **kw: Any) -> Any: ...

    def watch(
        self, path: str, params: dict[str, str], timeout: float | None = None
    ) -> AsyncIterator[tuple[str, dict[str, Any]]]: ...


class CSRError(Exception):
    """The request cannot give a certificate (denied, failed, deleted, incompatible)."""


@dataclass(frozen=True)
class Template:
    """What a certificate is requested for (an x509.CertificateRequest template)."""

    common_name: str
    organizations: tuple[str, ...] = ()
    dns_names: tuple[str, ...] = ()
    ip_addresses: tuple[str, ...] = ()


def generate_key() -> ec.EllipticCurvePrivateKey:
    # ECDSA P-256, as upstream's key generation for kubelet certificates.
    return ec.generate_private_key(ec.SECP256R1())


def key_pem(key: PrivateKey) -> bytes:
    fmt = (
        serialization.PrivateFormat.TraditionalOpenSSL
        if isinstance(key, ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey)
        else serialization.PrivateFormat.PKCS8
    )
    return key.private_bytes(serialization.Encoding.PEM, fmt, serialization.NoEncryption())


def make_csr(key: PrivateKey, t: Template) -> bytes:
    import ipaddress

    attrs = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, o) for o in t.organizations]
    attrs.append(x509.NameAttribute(NameOID.COMMON_NAME, t.common_name))
    b = x509.CertificateSigningRequestBuilder().subject_name(x509.Name(attrs))
    alt: list[x509.GeneralName] = [x509.DNSName(d) for d in t.dns_names]
    alt += [x509.IPAddress(ipaddress.ip_address(ip)) for ip in t.ip_addresses]
    if alt:
        b = b.add_extension(x509.SubjectAlternativeName(alt), critical=False)
    algo = (
        None
        if not isinstance(key, ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey)
        else (hashes.SHA256())
    )
    return b.sign(key, algo).public_bytes(serialization.Encoding.PEM)


def usages_for(key: PrivateKey, auth: str) -> list[str]:
    """Key usages to ask for: key encipherment only makes sense for RSA keys."""
    out = ["digital signature"]
    if isinstance(key, rsa.RSAPrivateKey):
        out.append("key encipherment")
    out.append(auth)
    return out


async def request_certificate(
    client: CSRClient,
    csr_pem: bytes,
    name: str,
    signer: str,
    usages: list[str],
    key: PrivateKey,
    expiration_seconds: int | None = None,
) -> tuple[str, str]:
    """Create the CSR; returns (name, uid). With a fixed `name` that exists
    already (a restart after a crash), reuse it when it is for this key."""
    from kubelet.client.rest import APIError

    meta: dict[str, Any] = {"name": name} if name else {"generateName": "csr-"}
    spec: dict[str, Any] = {
        "request": base64.b64encode(csr_pem).decode(),
        "signerName": signer,
        "usages": usages,
    }
    if expiration_seconds is not None:
        spec["expirationSeconds"] = expiration_seconds
    body = {
        "apiVersion": "certificates.k8s.io/v1",
        "kind": "CertificateSigningRequest",
        "metadata": meta,
        "spec": spec,
    }
    try:
        made = await client.create(CSR_PATH, body)
    except APIError as err:
        if not (err.already_exists and name):
            raise
        log.info("A certificate signing request %s for this node exists already, reusing it", name)
        made = await client.get(f"{CSR_PATH}/{name}")
        ensure_compatible(made, csr_pem, signer, key)
    m = made.get("metadata") or {}
    return str(m.get("name", "")), str(m.get("uid", ""))


def ensure_compatible(
    existing: dict[str, Any], csr_pem: bytes, signer: str, key: PrivateKey
) -> None:
    spec = existing.get("spec") or {}
    try:
        old = x509.load_pem_x509_csr(base64.b64decode(spec.get("request", "")))
    except ValueError as err:
        raise CSRError(f"existing csr {name_of(existing)} cannot be parsed: {err}") from err
    new = x509.load_pem_x509_csr(csr_pem)
    if old.subject != new.subject:
        raise CSRError(
            f"existing csr {name_of(existing)} is for {old.subject.rfc4514_string()},"
            f" not {new.subject.rfc4514_string()}"
        )
    if spec.get("signerName") and spec["signerName"] != signer:
        raise CSRError(f"existing csr {name_of(existing)} is for signer {spec['signerName']}")
    pub = serialization.PublicFormat.SubjectPublicKeyInfo
    der = serialization.Encoding.DER
    if old.public_key().public_bytes(der, pub) != key.public_key().public_bytes(der, pub):
        raise CSRError(f"existing csr {name_of(existing)} is for another private key")


def name_of(obj: dict[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("name", ""))


def _issued(csr: dict[str, Any], uid: str) -> bytes | None:
    """The certificate once approved and issued; None while waiting; CSRError if it never will be."""
    name = name_of(csr)
    if uid and (csr.get("metadata") or {}).get("uid") != uid:
        raise CSRError(f"csr {name!r} changed UIDs")
    status = csr.get("status") or {}
    approved = False
    for c in status.get("conditions") or []:
        kind = c.get("type")
        if kind == "Denied":
            raise CSRError(
                f"certificate signing request {name} is denied, reason: {c.get('reason', '')},"
                f" message: {c.get('message', '')}"
            )
        if kind == "Failed":
            raise CSRError(
                f"certificate signing request {name} failed, reason: {c.get('reason', '')},"
                f" message: {c.get('message', '')}"
            )
        approved = approved or kind == "Approved"
    if approved and status.get("certificate"):
        return base64.b64decode(status["certificate"])
    return None


def describe_pending(csr: dict[str, Any]) -> str:
    conds = {c.get("type") for c in (csr.get("status") or {}).get("conditions") or []}
    if "Approved" in conds:
        return "approved, waiting to be issued by the signer"
    return "waiting for approval (by the csrapproving controller or an operator)"


async def wait_for_certificate(
    client: CSRClient, name: str, uid: str, log_every: float = 60.0
) -> bytes:
    """Watch the CSR until it is issued; raise CSRError if it is denied, failed or
    deleted. Logs why it is still waiting every `log_every` seconds. The caller
    bounds the wait (asyncio.timeout)."""
    loop = asyncio.get_running_loop()
    next_log = loop.time() + log_every
    selector = f"metadata.name={name}"
    while True:
        listed = await client.get(CSR_PATH, params={"fieldSelector": selector})
        items = listed.get("items") or []
        if not items:
            raise CSRError(f"csr {name!r} was deleted")
        cert = _issued(items[0], uid)
        if cert is not None:
            return cert
        state = describe_pending(items[0])
        rv = str((listed.get("metadata") or {}).get("resourceVersion", ""))
        params = {"fieldSelector": selector, "resourceVersion": rv, "allowWatchBookmarks": "true"}
        try:
            async for kind, obj in client.watch(CSR_PATH, params, timeout=max(log_every, 1.0)):
                if kind == "DELETED":
                    raise CSRError(f"csr {name!r} was deleted")
                if kind not in ("ADDED", "MODIFIED"):
                    continue
                cert = _issued(obj, uid)
                if cert is not None:
                    return cert
                state = describe_pending(obj)
        except (TimeoutError, OSError) as err:
            log.debug("Watch of csr %s ended: %s", name, err)
        except (aiohttp.ClientError, APIError, ValueError) as err:  # the watch broke: re-list
            log.info("Watch of certificate signing request %s broke: %s; retrying", name, err)
            await asyncio.sleep(1)
        if loop.time() >= next_log:
            log.info("Certificate signing request %s is still pending: %s", name, state)
            next_log = loop.time() + log_every
