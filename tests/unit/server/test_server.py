"""The kubelet's HTTP servers: healthz, configz, pods, authn/authz, TLS."""

from __future__ import annotations

import datetime
import ssl
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from prometheus_client import CollectorRegistry, Counter

from kubelet.apis.config import KubeletConfiguration
from kubelet.apis.config.v1beta1 import encode
from kubelet.server import server as s
from kubelet.server.auth import ServerAuth
from kubelet.server.tls import TLSOptions, ensure_self_signed, server_context


class View:
    def __init__(self) -> None:
        self.failing: str | None = None

    def get_pods(self) -> list[dict[str, Any]]:
        return [{"metadata": {"name": "a", "namespace": "default"}, "status": {"phase": "Running"}}]

    def healthz_checks(self) -> dict[str, s.HealthCheck]:
        return {"syncloop": lambda: self.failing}


def port_of(runner: Any) -> int:
    return int(runner.addresses[0][1])


async def test_healthz_reports_failing_checks() -> None:
    view = View()
    runner = await s.serve(s.healthz_app(lambda: view), "127.0.0.1", 0)
    try:
        url = f"http://127.0.0.1:{port_of(runner)}"
        async with aiohttp.ClientSession() as http:
            async with http.get(url + "/healthz") as r:
                assert (r.status, await r.text()) == (200, "ok")
            view.failing = "sync loop stalled for 3m"
            async with http.get(url + "/healthz") as r:
                body = await r.text()
                assert r.status == 500
                assert "[-]syncloop failed" in body and "healthz check failed" in body
            async with http.get(url + "/healthz/syncloop") as r:
                assert r.status == 500
            async with http.get(url + "/healthz/nope") as r:
                assert r.status == 404
    finally:
        await runner.cleanup()


def make_client_cert(tmp: Path) -> tuple[str, str, str]:
    """A CA and a client cert it signed, CN=system:node:n1 O=system:nodes."""
    now = datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "test-ca")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(1)
        .not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder()
        .subject_name(
            x509.Name(
                [
                    x509.NameAttribute(NameOID.ORGANIZATION_NAME, "system:nodes"),
                    x509.NameAttribute(NameOID.COMMON_NAME, "system:node:n1"),
                ]
            )
        )
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(2)
        .not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .sign(ca_key, hashes.SHA256())
    )
    paths = (str(tmp / "ca.crt"), str(tmp / "client.crt"), str(tmp / "client.key"))
    Path(paths[0]).write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    Path(paths[1]).write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    Path(paths[2]).write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return paths


@pytest.mark.parametrize("anonymous", [True, False])
async def test_kubelet_port_tls_authn_and_configz(tmp_path: Path, anonymous: bool) -> None:
    cfg = KubeletConfiguration()
    cfg.max_pods = 70
    ca, client_cert, client_key = make_client_cert(tmp_path)
    cert, key = ensure_self_signed(str(tmp_path / "pki"), "node-a", ["127.0.0.1"])
    # a second call reuses the pair instead of minting a new one
    assert ensure_self_signed(str(tmp_path / "pki"), "node-a", []) == (cert, key)
    auth = ServerAuth(
        anonymous_enabled=anonymous, authorization_mode="AlwaysAllow", x509_enabled=True
    )
    reg = CollectorRegistry()
    Counter("kubelet_test_total", "test counter", registry=reg).inc()
    app = s.kubelet_app(lambda: View(), lambda: encode(cfg), [reg], auth)
    runner = await s.serve(app, "127.0.0.1", 0, server_context(TLSOptions(cert, key, ca)))
    try:
        base = f"https://127.0.0.1:{port_of(runner)}"
        trust = ssl.create_default_context(cafile=cert)
        with_cert = ssl.create_default_context(cafile=cert)
        with_cert.load_cert_chain(client_cert, client_key)
        async with aiohttp.ClientSession() as http:
            async with http.get(base + "/configz", ssl=trust) as r:
                if anonymous:
                    assert r.status == 200
                    doc = await r.json()
                    assert doc["kubeletconfig"]["maxPods"] == 70
                    assert doc["kubeletconfig"]["syncFrequency"] == "1m0s"
                else:
                    assert r.status == 401
            async with http.get(base + "/pods", ssl=with_cert) as r:
                assert r.status == 200
                doc = await r.json()
                assert doc["kind"] == "PodList" and doc["items"][0]["metadata"]["name"] == "a"
            async with http.get(base + "/metrics", ssl=with_cert) as r:
                assert "kubelet_test_total 1.0" in await r.text()
    finally:
        await runner.cleanup()


async def test_webhook_authorization_denies_without_api_client() -> None:
    auth = ServerAuth(anonymous_enabled=True, authorization_mode="Webhook")
    app = s.read_only_app(lambda: View(), [])
    ro = await s.serve(app, "127.0.0.1", 0)
    kapp = s.kubelet_app(lambda: View(), dict, [], auth)
    k = await s.serve(kapp, "127.0.0.1", 0)
    try:
        async with aiohttp.ClientSession() as http:
            async with http.get(f"http://127.0.0.1:{port_of(k)}/pods") as r:
                assert r.status == 403
            # the read-only port has no authorization and no /configz
            async with http.get(f"http://127.0.0.1:{port_of(ro)}/pods") as r:
                assert r.status == 200
            async with http.get(f"http://127.0.0.1:{port_of(ro)}/configz") as r:
                assert r.status == 404
    finally:
        await ro.cleanup()
        await k.cleanup()
