"""The real `kubelet` command's API port does what its config says (issue 27):
enableDebuggingHandlers: false turns the debugging endpoints off as upstream
does, and tlsMinVersion: VersionTLS13 refuses a TLS 1.2 handshake."""

from __future__ import annotations

import socket
import ssl
import urllib.request
from pathlib import Path

import yaml

from tests.integration.core.test_command import KubeletProc, wait_http

DEBUG_PATHS = [
    ("POST", "/run/default/p/c"),
    ("GET", "/exec/default/p/c?command=ls&output=1"),
    ("POST", "/exec/default/p/uid/c?command=ls&output=1"),
    ("GET", "/attach/default/p/c?output=1"),
    ("GET", "/portForward/default/p"),
    ("GET", "/containerLogs/default/p/c"),
    ("GET", "/runningpods/"),
    ("GET", "/logs/"),
    ("GET", "/debug/pprof/profile"),
]


def request(method: str, url: str) -> tuple[int, bytes]:
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    req = urllib.request.Request(url, method=method, data=b"" if method == "POST" else None)
    try:
        with urllib.request.urlopen(req, timeout=10, context=ctx) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def handshake(port: int, version: ssl.TLSVersion) -> str:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    ctx.minimum_version = ctx.maximum_version = version
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=5) as raw:
            with ctx.wrap_socket(raw) as tls:
                return str(tls.version())
    except (ssl.SSLError, OSError) as err:
        return f"refused: {err}"


def test_debugging_handlers_off_and_tls13_minimum(simruntime, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    manifests = tmp_path / "m"
    manifests.mkdir()
    cfg = tmp_path / "secure.yaml"
    cfg.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "kubelet.config.k8s.io/v1beta1",
                "kind": "KubeletConfiguration",
                "address": "127.0.0.1",
                "cgroupsPerQOS": False,
                "enforceNodeAllocatable": [],
                "enableDebuggingHandlers": False,
                "tlsMinVersion": "VersionTLS13",
            }
        )
    )
    k = KubeletProc(tmp_path, simruntime, manifests, "--config", str(cfg))
    try:
        base = f"https://127.0.0.1:{k.port}"
        wait_http(f"http://127.0.0.1:{k.healthz}/healthz")
        wait_http(base + "/healthz")
        for path in ("/pods", "/metrics", "/metrics/probes", "/stats/summary"):
            assert request("GET", base + path)[0] == 200, path
        for method, path in DEBUG_PATHS:
            assert request(method, base + path) == (405, b"Debug endpoints are disabled.\n"), path
        # Registered only with the debugging handlers, as upstream: not there at all.
        assert request("GET", base + "/configz")[0] == 404
        assert request("PUT", base + "/debug/flags/v")[0] == 404
        assert handshake(k.port, ssl.TLSVersion.TLSv1_2).startswith("refused")
        assert handshake(k.port, ssl.TLSVersion.TLSv1_3) == "TLSv1.3"
    finally:
        assert k.stop() == 0
