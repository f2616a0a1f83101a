"""Fuzzed HTTP requests to every endpoint of a real kubelet process (standalone,
on the simulated runtime, one static pod running): random methods, paths built
from the real routes with random segments, query strings, headers and bodies,
and raw garbage request lines. Each answer is a clear one: never aiohttp's
unhandled-exception 500, no "Error handling request" in the kubelet's log, and
/healthz still answers at once afterwards (the event loop never stalls)."""

from __future__ import annotations

import http.client
import os
import socket
import ssl
import time
import urllib.parse
from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from kubelet.testing.kubelets import KubeletProcess, sleeper_pod, standalone_kubelet, write_manifest
from kubelet.testing.net import http_get as get
from kubelet.testing.net import wait_http

FUZZ = settings(
    max_examples=int(os.environ.get("FUZZ_EXAMPLES", "50")),
    deadline=None,
    suppress_health_check=list(HealthCheck),
    phases=[Phase.explicit, Phase.generate],
)

ROUTES = [
    "/healthz", "/healthz/{x}", "/pods", "/pods/", "/metrics", "/metrics/probes",
    "/metrics/resource", "/metrics/cadvisor", "/stats/summary", "/configz", "/runningpods/",
    "/containerLogs/{ns}/{pod}/{c}",
    "/exec/{ns}/{pod}/{c}", "/exec/{ns}/{pod}/{x}/{c}",
    "/attach/{ns}/{pod}/{c}", "/attach/{ns}/{pod}/{x}/{c}",
    "/portForward/{ns}/{pod}", "/portForward/{ns}/{pod}/{x}",
    "/run/{ns}/{pod}/{c}", "/run/{ns}/{pod}/{x}/{c}",
    "/{x}", "/stats/{x}", "/logs/{x}", "/debug/pprof/{x}", "/checkpoint/{ns}/{pod}/{c}",
]  # fmt: skip
QUERY_KEYS = [
    "follow", "tailLines", "limitBytes", "sinceSeconds", "sinceTime", "timestamps",
    "previous", "command", "cmd", "stdin", "stdout", "stderr", "tty", "port", "verbose",
    "exclude", "input", "output",
]  # fmt: skip
QUERY_VALUES = [
    "", "0", "1", "-1", "true", "false", "1e400", "99999999999999999999999", "nan", "ls",
    "2020-01-01T00:00:00Z", "not-a-time", "%00", "80", "65536", "a b", "\u2603",
]  # fmt: skip

segment = st.one_of(
    st.sampled_from(["default", "fuzz-node-b", "c", "nope", "", "..", "%2e%2e", "kube-system"]),
    st.text(st.characters(min_codepoint=33, max_codepoint=0x2FF), max_size=12),
)
query = st.lists(
    st.tuples(
        st.one_of(st.sampled_from(QUERY_KEYS), st.text(max_size=6)),
        st.one_of(st.sampled_from(QUERY_VALUES), st.text(max_size=10)),
    ),
    max_size=4,
)
header_name = st.sampled_from(
    ["Content-Type", "Content-Length", "Transfer-Encoding", "Connection", "Upgrade",
     "Authorization", "Accept", "X-Stream-Protocol-Version", "Sec-WebSocket-Protocol",
     "Accept-Encoding", "Range", "X-Fuzz"]
)  # fmt: skip
header_value = st.one_of(
    st.sampled_from(["", "0", "-1", "chunked", "websocket", "Bearer x", "gzip", "bytes=0-1",
                     "v4.channel.k8s.io", "SPDY/3.1", "application/json", "close"]),
    st.text(st.characters(min_codepoint=32, max_codepoint=126), max_size=20),
)  # fmt: skip


def _path(route: str, segs: list[str]) -> str:
    it = iter(segs + [""] * 4)
    out = route
    for k in ("{ns}", "{pod}", "{x}", "{c}"):
        if k in out:
            out = out.replace(k, urllib.parse.quote(next(it), safe=""))
    return out


@pytest.fixture(scope="module")
def kubelet_proc(tmp_path_factory: pytest.TempPathFactory) -> Any:
    from kubelet.testing.simruntime import start_simruntime

    tmp = tmp_path_factory.mktemp("fuzz-http")
    sim = start_simruntime()
    manifests = tmp / "m"
    manifests.mkdir()
    write_manifest(manifests, sleeper_pod("fuzz"))
    k = standalone_kubelet(tmp, sim.endpoint, manifests)
    started = False
    try:
        wait_http(f"http://127.0.0.1:{k.healthz_port}/healthz")
        started = True
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            pod = k.pods().get("fuzz-node-b", {})
            if any(
                "running" in c["state"] for c in pod.get("status", {}).get("containerStatuses", [])
            ):
                break
            time.sleep(0.2)
        yield k
    finally:
        code = k.stop()
        sim.stop()
        # When it never came up, the error above (with the log) is the one to see.
        assert code == 0 or not started, k.log_tail()


def _ctx() -> ssl.SSLContext:
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    return ctx


def _healthz_prompt(k: KubeletProcess) -> None:
    t = time.monotonic()
    code, _ = get(f"http://127.0.0.1:{k.healthz_port}/healthz", timeout=5)
    assert code == 200
    assert time.monotonic() - t < 2.0, "healthz took seconds: the event loop stalled"


def _check_answer(status: int, body: bytes) -> None:
    assert b"Server got itself in trouble" not in body, body[:300]
    assert b"Traceback" not in body, body[:300]
    if status >= 500:
        # Upstream's 5xx here say what failed (a missing container, a command's exit).
        assert body.strip(), f"an empty {status}"


@FUZZ
@given(
    secure=st.booleans(),
    method=st.sampled_from(["GET", "POST", "PUT", "DELETE", "HEAD", "OPTIONS", "PATCH", "FUZZ"]),
    route=st.sampled_from(ROUTES),
    segs=st.lists(segment, max_size=4),
    q=query,
    headers=st.lists(st.tuples(header_name, header_value), max_size=4),
    body=st.binary(max_size=64),
)
def test_fuzzed_requests(
    kubelet_proc: KubeletProcess,
    secure: bool,
    method: str,
    route: str,
    segs: list[str],
    q: list[tuple[str, str]],
    headers: list[tuple[str, str]],
    body: bytes,
) -> None:
    k = kubelet_proc
    path = _path(route, segs)
    if q:
        path += "?" + urllib.parse.urlencode(q)
    conn: http.client.HTTPConnection = (
        http.client.HTTPSConnection("127.0.0.1", k.port, timeout=3, context=_ctx())
        if secure
        else http.client.HTTPConnection("127.0.0.1", k.read_only_port, timeout=3)
    )
    try:
        conn.putrequest(method, path, skip_accept_encoding=True)
        for name, value in headers:
            if name.lower() in ("content-length", "transfer-encoding"):
                continue  # framing is fuzzed by the raw test
            conn.putheader(name, value)
        conn.putheader("Content-Length", str(len(body)))
        conn.endheaders(body)
        try:
            resp = conn.getresponse()
            # A log follow or an upgrade may stream: a bounded read is enough.
            data = resp.read(4096) if method != "HEAD" else b""
            _check_answer(resp.status, data)
        except (TimeoutError, http.client.RemoteDisconnected, ConnectionResetError):
            pass  # a stream held open (follow=true) or refused; healthz tells the rest
    finally:
        conn.close()
    _healthz_prompt(k)


RAW = st.one_of(
    st.binary(max_size=200),
    st.builds(
        lambda m, p, v, h, b: m + b" " + p + b" " + v + b"\r\n" + h + b"\r\n" + b,
        st.sampled_from([b"GET", b"POST", b"G\x00T", b"", b"CONNECT"]),
        st.sampled_from([b"/pods", b"/healthz", b"*", b"//", b"/exec/a/b/c?command=ls", b"\xff"]),
        st.sampled_from([b"HTTP/1.1", b"HTTP/1.0", b"HTTP/9.9", b"", b"HTTP/1.1 x"]),
        st.sampled_from(
            [b"", b"Host: x\r\n", b"Content-Length: -1\r\n", b"Content-Length: 99999999999\r\n",
             b"Transfer-Encoding: chunked\r\n", b"Transfer-Encoding: chunked\r\nContent-Length: 3\r\n",
             b"X: " + b"a" * 9000 + b"\r\n", b"Bad Header\r\n", b"\r\n\r\n"]
        ),
        st.sampled_from([b"", b"zz\r\n", b"0\r\n\r\n", b"abc"]),
    ),
)  # fmt: skip


@FUZZ
@given(data=RAW)
def test_raw_request_bytes(kubelet_proc: KubeletProcess, data: bytes) -> None:
    k = kubelet_proc
    with socket.create_connection(("127.0.0.1", k.read_only_port), timeout=1) as s:
        try:
            s.sendall(data)
            s.shutdown(socket.SHUT_WR)
            got = b""
            while len(got) < 65536:
                chunk = s.recv(65536)
                if not chunk:
                    break
                got += chunk
        except (TimeoutError, ConnectionResetError, BrokenPipeError):
            got = b""
    if got:
        head, _, rest = got.partition(b"\r\n\r\n")
        status = int(head.split(b" ", 2)[1]) if head.startswith(b"HTTP/") else 0
        _check_answer(status, rest)
    _healthz_prompt(k)


def test_no_unhandled_exception_in_the_log(kubelet_proc: KubeletProcess) -> None:
    # Last in this module: the fuzz tests above ran against the same process.
    text = kubelet_proc.log.read_text(errors="replace")
    assert "Error handling request" not in text, text[-3000:]
    assert "Traceback" not in text, text[-3000:]
