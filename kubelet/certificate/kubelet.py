"""The kubelet's two certificate managers (pkg/kubelet/certificate/kubelet.go):
its client certificate (signer kube-apiserver-client-kubelet) and, with
serverTLSBootstrap, its serving certificate (signer kubelet-serving)."""

from __future__ import annotations

import ipaddress
import math
from collections.abc import Callable, Iterable
from typing import Any

from kubelet.certificate.csr import (
    CLIENT_KUBELET_SIGNER,
    KUBELET_SERVING_SIGNER,
    CSRClient,
    Template,
)
from kubelet.certificate.manager import Manager
from kubelet.certificate.store import FileStore, KeyPair
from kubelet.util.clock import REAL_CLOCK, Clock

NODE_ORG = "system:nodes"


def node_common_name(node_name: str) -> str:
    return f"system:node:{node_name}"


def client_template(node_name: str) -> Template:
    return Template(node_common_name(node_name), (NODE_ORG,))


def addresses_to_hostnames_and_ips(
    addresses: Iterable[dict[str, Any]],
) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The serving certificate's DNS names and IPs from node addresses, sorted."""
    dns: set[str] = set()
    ips: set[str] = set()
    for a in addresses:
        value, kind = str(a.get("address") or ""), a.get("type")
        if not value:
            continue
        ip = _ip(value)
        if kind == "Hostname":
            (ips if ip else dns).add(ip or value)
        elif kind in ("InternalIP", "ExternalIP"):
            if ip:
                ips.add(ip)
        elif kind in ("InternalDNS", "ExternalDNS"):
            dns.add(value)
    return tuple(sorted(dns)), tuple(sorted(ips))


def _ip(value: str) -> str:
    try:
        return str(ipaddress.ip_address(value))
    except ValueError:
        return ""


def serving_template_fn(
    node_name: str, get_addresses: Callable[[], list[dict[str, Any]]]
) -> Callable[[], Template | None]:
    def template() -> Template | None:
        dns, ips = addresses_to_hostnames_and_ips(get_addresses())
        # Upstream asks for a serving certificate only once the node has an IP.
        if not ips:
            return None
        return Template(node_common_name(node_name), (NODE_ORG,), dns, ips)

    return template


def new_client_manager(
    cert_dir: str,
    node_name: str,
    cert_file: str,
    key_file: str,
    client_fn: Callable[[KeyPair | None], CSRClient | None],
    clock: Clock = REAL_CLOCK,
) -> Manager:
    from kubelet.certificate import metrics

    tmpl = client_template(node_name)
    m = Manager(
        "kubernetes.io/kube-apiserver-client-kubelet",
        FileStore("kubelet-client", cert_dir, cert_file, key_file),
        lambda: tmpl,
        CLIENT_KUBELET_SIGNER,
        "client auth",
        client_fn,
        clock=clock,
        renew_errors=metrics.CERT_CLIENT_RENEW_ERRORS,
    )
    metrics.CERT_CLIENT_TTL.set_function(lambda: _ttl(m, clock))
    return m


def new_server_manager(
    client: CSRClient | None,
    cert_dir: str,
    node_name: str,
    get_addresses: Callable[[], list[dict[str, Any]]],
    tls_cert_file: str = "",
    tls_key_file: str = "",
    clock: Clock = REAL_CLOCK,
) -> Manager:
    from kubelet.certificate import metrics

    m = Manager(
        "kubernetes.io/kubelet-serving",
        FileStore("kubelet-server", cert_dir, tls_cert_file, tls_key_file),
        serving_template_fn(node_name, get_addresses),
        KUBELET_SERVING_SIGNER,
        "server auth",
        lambda _current: client,
        dynamic_template=True,
        clock=clock,
        renew_errors=metrics.CERT_SERVER_RENEW_ERRORS,
        rotation_age=metrics.CERT_SERVER_ROTATION_SECONDS,
    )
    metrics.CERT_SERVER_TTL.set_function(lambda: _ttl(m, clock))
    return m


def _ttl(m: Manager, clock: Clock) -> float:
    p = m.current()
    return float(math.trunc(p.not_after - clock.time())) if p is not None else math.inf
