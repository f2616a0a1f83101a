"""The kubelet port's TLS does what the config says: tlsMinVersion and
tlsCipherSuites with upstream's names, every unknown name an exit-1 error,
and the client CA file reloaded when it changes."""

from __future__ import annotations

import asyncio
import os
import socket
import ssl
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from kubelet.apis.config import KubeletConfiguration
from kubelet.apis.config.v1beta1 import encode
from kubelet.server import server as s
from kubelet.server.auth import ServerAuth
from kubelet.server.tls import TLSOptions, ensure_self_signed, server_context
from kubelet.testing.pki import PKI
from kubelet.util.tlsconfig import TLSPolicy


class View(s.NoPods):
    pass


async def _serve(tmp_path: Path, policy: TLSPolicy, ca: str = "") -> tuple[Any, int, str]:
    cert, key = ensure_self_signed(str(tmp_path / "pki"), "node-a", ["127.0.0.1"])
    auth = ServerAuth(
        anonymous_enabled=not ca, authorization_mode="AlwaysAllow", x509_enabled=bool(ca)
    )
    app = s.kubelet_app(lambda: View(), lambda: encode(KubeletConfiguration()), [], auth)
    ctx = server_context(TLSOptions(cert, key, ca, policy))
    runner = await s.serve(app, "127.0.0.1", 0, ctx)
    return runner, int(runner.addresses[0][1]), cert


def _handshake(port: int, max_version: ssl.TLSVersion, ciphers: str) -> str:
    """The version negotiated, or the handshake error."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    ctx.maximum_version = max_version
    ctx.set_ciphers(ciphers)
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=5) as raw:
            with ctx.wrap_socket(raw) as tls:
                return f"{tls.version()} {tls.cipher()[0]}"
    except (ssl.SSLError, OSError) as err:
        return f"refused: {err}"


async def test_tls13_minimum_refuses_a_tls12_cbc_handshake(tmp_path: Path) -> None:
    runner, port, _ = await _serve(tmp_path, TLSPolicy("VersionTLS13"))
    try:
        cbc = await asyncio.to_thread(
            _handshake, port, ssl.TLSVersion.TLSv1_2, "ECDHE-ECDSA-AES128-SHA"
        )
        assert cbc.startswith("refused"), cbc
        assert (
            await asyncio.to_thread(_handshake, port, ssl.TLSVersion.TLSv1_3, "DEFAULT")
        ).startswith("TLSv1.3")
    finally:
        await runner.cleanup()


async def test_only_the_listed_tls12_suites_are_offered(tmp_path: Path) -> None:
    listed = "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256"
    # A TLS 1.3 name in the list changes nothing for 1.3: Go ignores it, and so do we.
    runner, port, _ = await _serve(tmp_path, TLSPolicy("", (listed, "TLS_AES_128_GCM_SHA256")))
    try:
        tls12 = ssl.TLSVersion.TLSv1_2
        other = await asyncio.to_thread(_handshake, port, tls12, "ECDHE-ECDSA-AES256-GCM-SHA384")
        assert other.startswith("refused"), other
        cbc = await asyncio.to_thread(_handshake, port, tls12, "ECDHE-ECDSA-AES128-SHA")
        assert cbc.startswith("refused"), cbc
        ok = await asyncio.to_thread(_handshake, port, tls12, "ECDHE-ECDSA-AES128-GCM-SHA256")
        assert ok == "TLSv1.2 ECDHE-ECDSA-AES128-GCM-SHA256"
        v13 = await asyncio.to_thread(_handshake, port, ssl.TLSVersion.TLSv1_3, "DEFAULT")
        assert v13.startswith("TLSv1.3")
    finally:
        await runner.cleanup()


def test_unknown_tls_names_exit_1_naming_every_one(tmp_path: Path) -> None:
    cfg = tmp_path / "config.yaml"
    cfg.write_text(
        "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n"
        "tlsCipherSuites: [TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256, TLS_NOT_A_SUITE]\n"
    )
    bad = subprocess.run(
        [sys.executable, "-m", "kubelet", "--config", str(cfg), "--tls-min-version=VersionTLS14",
         "--tls-cipher-suites=TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,TLS_RSA_WITH_RC4_128_MD5"],
        capture_output=True, text=True,
    )  # fmt: skip
    assert bad.returncode == 1
    # The flag wins over the file's list: its unknown name is the one reported.
    assert 'unknown tls version "VersionTLS14"' in bad.stderr
    assert "Cipher suite TLS_RSA_WITH_RC4_128_MD5 not supported or doesn't exist" in bad.stderr
    assert bad.stderr.count("Error: ") == 2, bad.stderr


def _rotate(ca_file: Path, pki: PKI) -> None:
    tmp = ca_file.with_suffix(".new")
    tmp.write_bytes(Path(pki.ca.cert).read_bytes())
    os.replace(tmp, ca_file)


async def _status(port: int, server_cert: str, client: Any) -> int | str:
    ctx = ssl.create_default_context(cafile=server_cert)
    ctx.load_cert_chain(client.cert, client.key)
    try:
        async with aiohttp.ClientSession() as http:
            async with http.get(f"https://127.0.0.1:{port}/pods", ssl=ctx) as r:
                return r.status
    except aiohttp.ClientError as err:
        return f"refused: {err}"


async def test_client_ca_file_is_reloaded_when_it_changes(tmp_path: Path) -> None:
    old, new = PKI(str(tmp_path / "old")), PKI(str(tmp_path / "new"))
    old_client = old.issue("c1", "system:node:a", ["system:nodes"])
    new_client = new.issue("c2", "system:node:b", ["system:nodes"])
    ca_file = tmp_path / "client-ca.crt"
    ca_file.write_bytes(Path(old.ca.cert).read_bytes())
    runner, port, cert = await _serve(tmp_path, TLSPolicy(), str(ca_file))
    try:
        assert await _status(port, cert, old_client) == 200
        assert str(await _status(port, cert, new_client)).startswith("refused")
        _rotate(ca_file, new)
        assert await _status(port, cert, new_client) == 200
        assert str(await _status(port, cert, old_client)).startswith("refused")
        # A file that no longer parses keeps the last good bundle.
        ca_file.write_text("not a certificate\n")
        assert await _status(port, cert, new_client) == 200
    finally:
        await runner.cleanup()


@pytest.mark.parametrize("suite", ["TLS_RSA_WITH_3DES_EDE_CBC_SHA"])
def test_suites_this_openssl_lacks_are_named_not_silently_dropped(suite: str) -> None:
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    notes = TLSPolicy("", (suite, "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256")).apply(ctx)
    assert any(suite in msg for _level, msg in notes)
    assert any("Use of insecure cipher detected" in msg for _level, msg in notes)
    offered = {c["name"] for c in ctx.get_ciphers() if c["protocol"] != "TLSv1.3"}
    assert offered == {"ECDHE-RSA-AES128-GCM-SHA256"}


async def _served_der(port: int) -> bytes:
    ctx = ssl.create_default_context()
    ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE
    _, writer = await asyncio.open_connection("127.0.0.1", port, ssl=ctx)
    try:
        return bytes(writer.get_extra_info("ssl_object").getpeercert(binary_form=True))
    finally:
        writer.close()


def _der(cert_file: str) -> bytes:
    return ssl.PEM_cert_to_DER_cert(Path(cert_file).read_text())


def _install(src: tuple[str, str], cert: Path, key: Path) -> None:
    for frm, to in zip(src, (cert, key), strict=True):
        tmp = to.with_suffix(".new")
        tmp.write_bytes(Path(frm).read_bytes())
        os.replace(tmp, to)


@pytest.mark.parametrize("reload", [True, False])
async def test_a_serving_pair_rewritten_on_disk_serves_the_next_handshake(
    tmp_path: Path, reload: bool
) -> None:
    """ReloadKubeletServerCertificateFile (beta, on): the pair from files is
    watched; a broken rewrite keeps the last good pair. Off: the first stays."""
    first = ensure_self_signed(str(tmp_path / "a"), "node-a", ["127.0.0.1"])
    second = ensure_self_signed(str(tmp_path / "b"), "node-b", ["127.0.0.1"])
    cert, key = tmp_path / "tls.crt", tmp_path / "tls.key"
    _install(first, cert, key)
    app = s.kubelet_app(lambda: View(), lambda: encode(KubeletConfiguration()), [],
                        ServerAuth(anonymous_enabled=True, authorization_mode="AlwaysAllow"))  # fmt: skip
    ctx = server_context(TLSOptions(str(cert), str(key)), reload=reload)
    runner = await s.serve(app, "127.0.0.1", 0, ctx)
    port = int(runner.addresses[0][1])
    try:
        assert await _served_der(port) == _der(first[0])
        _install(second, cert, key)
        want = second if reload else first
        assert await _served_der(port) == _der(want[0])
        # A certificate that no longer matches its key: the last good pair serves.
        _install((first[0], second[1]), cert, key)
        assert await _served_der(port) == _der(want[0])
        cert.write_text("not a certificate\n")
        assert await _served_der(port) == _der(want[0])
    finally:
        await runner.cleanup()


async def test_handshakes_run_off_the_loop_and_a_peer_gone_mid_step_is_harmless(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A handshake's crypto runs on the site's pool, never on the loop the
    relist waits on (each server step made 30 ms slower, as a loaded machine
    makes it); a client that leaves mid-handshake breaks nothing."""
    loop_thread = threading.get_ident()
    on_loop: list[bool] = []
    real = ssl.SSLObject.do_handshake

    def slow(self: ssl.SSLObject) -> None:
        if self.server_side:
            on_loop.append(threading.get_ident() == loop_thread)
            time.sleep(0.03)  # the GIL is free meanwhile, as in OpenSSL's crypto
        real(self)

    monkeypatch.setattr(ssl.SSLObject, "do_handshake", slow)
    runner, port, _ = await _serve(tmp_path, TLSPolicy(""))
    try:
        # A ClientHello, then gone before the server's step returns.
        raw = socket.create_connection(("127.0.0.1", port))
        client = ssl.create_default_context()
        hello = client.wrap_bio(ssl.MemoryBIO(), out := ssl.MemoryBIO())
        with pytest.raises(ssl.SSLWantReadError):
            hello.do_handshake()
        raw.sendall(out.read())
        raw.close()
        done = await asyncio.gather(
            *(
                asyncio.to_thread(_handshake, port, ssl.TLSVersion.TLSv1_3, "DEFAULT")
                for _ in range(8)
            )
        )
        assert all(v.startswith("TLSv1.3") for v in done), done
    finally:
        await runner.cleanup()
    assert on_loop and not any(on_loop)  # no step blocked the loop
