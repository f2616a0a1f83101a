"""The stand-in for csi-driver-host-path's hostpathplugin that the DRA e2e
suite's proxy pod runs (hack/parts/csi/cmd/hostpathplugin): a client of the
unix endpoint is paired with a connection made in advance to the proxy
endpoint, bytes flow both ways, an end on one side reaches the other, and the
socket is gone when the process is told to stop."""

from __future__ import annotations

import socket
import subprocess
import tempfile
import time
from pathlib import Path

from kubelet.testing import csi as parts
from kubelet.testing.net import free_port
from kubelet.testing.parts import starting


def _connect_unix(path: Path, timeout: float = 5.0) -> socket.socket:
    deadline = time.monotonic() + timeout
    while True:
        s = socket.socket(socket.AF_UNIX)
        try:
            s.connect(str(path))
            return s
        except OSError:
            s.close()
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def test_the_proxy_pairs_clients_with_connections_made_in_advance() -> None:
    with starting("CSI test parts", parts.Unavailable):
        binary = parts.binary("hostpathplugin")
    tmp = Path(tempfile.mkdtemp(prefix="kpyhpp-", dir="/tmp"))
    sock = tmp / "dra.sock"
    sock.write_text("left by an earlier run")  # replaced, as upstream's does
    port = free_port()
    proc = subprocess.Popen(
        [binary, "--v=5", f"--endpoint={sock}", f"--proxy-endpoint=tcp://127.0.0.1:{port}"]
    )
    try:
        client = _connect_unix(sock)
        # The e2e side's port-forward connections: one per client, in order.
        first = socket.create_connection(("127.0.0.1", port), timeout=5)
        second = socket.create_connection(("127.0.0.1", port), timeout=5)
        client.sendall(b"NodePrepareResources")
        assert first.recv(64) == b"NodePrepareResources"
        first.sendall(b"ok")
        assert client.recv(64) == b"ok"
        other = _connect_unix(sock)
        other.sendall(b"second client")
        second.settimeout(5)
        assert second.recv(64) == b"second client"
        client.close()
        first.settimeout(5)
        assert first.recv(64) == b""  # the client's end reached the far side
    finally:
        proc.terminate()
        assert proc.wait(10) == 0
    assert not sock.exists()


def test_without_a_proxy_endpoint_it_refuses_to_run() -> None:
    with starting("CSI test parts", parts.Unavailable):
        binary = parts.binary("hostpathplugin")
    r = subprocess.run([binary, "--endpoint=/tmp/x.sock"], capture_output=True, text=True)
    assert r.returncode == 2 and "only the proxy mode" in r.stderr
