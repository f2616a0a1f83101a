"""exec, attach, cp and port-forward with the real kubectl, through the real
kube-apiserver, to our kubelet on a private containerd (real runc containers):
the API server speaks SPDY to the kubelet, which proxies to containerd's
streaming server. Plus the kubelet port's own answers: 500 for a container that
is not running (upstream's text), 401, 403, and 200 aborted streams leaving the
kubelet's descriptors where they were. And the metrics endpoints through the
kubelet port: every one parses, and /metrics/cadvisor agrees with the
cgroup files of the real runc container."""

from __future__ import annotations

import functools
import os
import re
import socket
import ssl
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from kubelet.testing.containerd import Containerd
from kubelet.testing.controlplane import ControlPlane, Unavailable, cache_bin
from kubelet.testing.kubelets import KubeletProcess
from kubelet.testing.metrics_server import MetricsServer
from kubelet.testing.parts import part_unavailable, starting, tail_of
from kubelet.testing.wait import wait_for
from tests.integration.cluster.helpers import pod_manifest, start_node

pytestmark = [pytest.mark.cluster, pytest.mark.containerd]

NODE = "py-exec-node"


@pytest.fixture(scope="module")
def node(
    control_plane: ControlPlane, containerd: Containerd, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[KubeletProcess]:
    tmp = tmp_path_factory.mktemp("exec-kubelet")
    # Pod cgroups as on a real node, so /metrics/cadvisor has pods and containers to report.
    k = start_node(
        control_plane,
        tmp,
        containerd.endpoint,
        node_name=NODE,
        config={"cgroupsPerQOS": True},
    )
    try:
        wait_for("the Node to be Ready", k.ready, timeout=90)
        pods = [
            pod_manifest("sh", {"app": "exec"}, "sleep 100000"),
            pod_manifest(
                "web", {"app": "exec"},
                "mkdir -p /www && echo hello-from-pod > /www/index.html"
                " && exec httpd -f -p 8080 -h /www",
            ),
            pod_manifest("talk", {"app": "exec"}, "while read l; do echo got:$l; done"),
            # For `kubectl top`: 32 MiB on a tmpfs (working set) and a spin held
            # to a tenth of a core by its CFS quota.
            pod_manifest(
                "busy", {"app": "exec"},
                "head -c 33554432 /dev/zero > /dev/shm/fill; while :; do :; done",
            ),
        ]  # fmt: skip
        pods[3]["spec"]["containers"][0]["resources"] = {"limits": {"cpu": "100m"}}
        pods[2]["spec"]["containers"][0]["stdin"] = True
        for p in pods:
            p["spec"]["nodeName"] = NODE
            # No kube-controller-manager here: no kube-root-ca.crt for a token volume.
            p["spec"]["automountServiceAccountToken"] = False
        k.create(*pods)
        for name in ("sh", "web", "talk", "busy"):
            wait_for(f"pod {name} Running", functools.partial(_running, k, name), timeout=90)
        yield k
    finally:
        k.kubectl("delete", "pods", "-l", "app=exec", "--wait=false", check=False)
        k.stop()
        print(f"kubelet log: {k.log}")


def _running(k: KubeletProcess, name: str) -> bool:
    return _phase(k, name) == "Running"


def _phase(k: KubeletProcess, name: str) -> str:
    return str(k.kubectl_json("get", "pod", name, "-n", "default")["status"].get("phase"))


def kubectl(
    k: KubeletProcess, *args: str, stdin: bytes | None = None, timeout: float = 60
) -> subprocess.CompletedProcess[bytes]:
    argv = [os.path.join(cache_bin(), "kubectl"), f"--kubeconfig={k.cp.admin_kubeconfig}", *args]
    return subprocess.run(argv, input=stdin, capture_output=True, timeout=timeout)


def test_exec_output_and_exit_codes(node: KubeletProcess) -> None:
    r = kubectl(node, "exec", "sh", "--", "sh", "-c", "echo out; echo err >&2")
    assert (r.returncode, r.stdout, r.stderr) == (0, b"out\n", b"err\n")
    r = kubectl(node, "exec", "sh", "--", "sh", "-c", "exit 3")
    assert r.returncode == 3, r.stderr
    r = kubectl(node, "exec", "sh", "--", "no-such-binary")
    assert r.returncode != 0 and b"no-such-binary" in r.stderr


def test_exec_it_in_a_terminal(node: KubeletProcess, tmp_path: Path) -> None:
    """kubectl exec -it under tmux, as a person types: a tty in the container,
    keystrokes answered, the shell's exit code carried back to kubectl."""
    import shutil

    if shutil.which("tmux") is None:
        part_unavailable("tmux", "not installed (hack/parts/containerd.sh installs it)")
    sock = f"kpy-exec-{os.getpid()}"
    kctl = os.path.join(cache_bin(), "kubectl")
    done = tmp_path / "exit-code"
    script = (
        f"{kctl} --kubeconfig={node.cp.admin_kubeconfig} exec -it sh -- sh; "
        f"echo $? > {done}; sleep 60"
    )
    tmux = ["tmux", "-L", sock]
    subprocess.run([*tmux, "new-session", "-d", "-x", "120", "-y", "30", script], check=True)

    def screen() -> str:
        r = subprocess.run([*tmux, "capture-pane", "-p"], capture_output=True, text=True)
        return r.stdout

    def keys(text: str) -> None:
        subprocess.run([*tmux, "send-keys", text, "Enter"], check=True)

    try:
        wait_for("the shell prompt", lambda: "#" in screen(), timeout=30)
        keys("tty; echo sum=$((6*7))")
        wait_for("the answer", lambda: "sum=42" in screen(), timeout=15)
        assert "/dev/pts/" in screen()  # a terminal, not a pipe
        keys("exit 7")
        wait_for("kubectl to exit", done.exists, timeout=15)
        assert done.read_text().strip() == "7"
    finally:
        subprocess.run([*tmux, "kill-server"], capture_output=True)

    r = kubectl(node, "exec", "-i", "sh", "--", "sh", "-c", "cat; echo done", stdin=b"abc\n")
    assert r.stdout == b"abc\ndone\n", r.stderr
    big = os.urandom(3 * 1024 * 1024)
    r = kubectl(node, "exec", "-i", "sh", "--", "md5sum", stdin=big)
    import hashlib

    assert r.stdout.split()[0].decode() == hashlib.md5(big).hexdigest(), r.stderr


def test_cp_both_ways(node: KubeletProcess, tmp_path: Path) -> None:
    src = tmp_path / "up.bin"
    src.write_bytes(os.urandom(512 * 1024))
    r = kubectl(node, "cp", str(src), "default/sh:/tmp/up.bin")
    assert r.returncode == 0, r.stderr
    back = tmp_path / "down.bin"
    r = kubectl(node, "cp", "default/sh:/tmp/up.bin", str(back))
    assert r.returncode == 0, r.stderr
    assert back.read_bytes() == src.read_bytes()


def _forward(k: KubeletProcess, port: int) -> tuple[subprocess.Popen[str], int]:
    argv = [os.path.join(cache_bin(), "kubectl"), f"--kubeconfig={k.cp.admin_kubeconfig}",
            "port-forward", "pod/web", f":{port}"]  # fmt: skip
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    line = proc.stdout.readline()  # Forwarding from 127.0.0.1:NNNNN -> 8080
    m = re.search(r"127\.0\.0\.1:(\d+) -> ", line)
    if m is None:
        proc.kill()
        raise AssertionError(f"port-forward: {line!r} {proc.stderr.read() if proc.stderr else ''}")
    return proc, int(m.group(1))


def test_port_forward_to_httpd_in_the_pod(node: KubeletProcess) -> None:
    proc, local = _forward(node, 8080)
    try:
        for _ in range(3):  # each request is a new stream pair on the same connection
            with urllib.request.urlopen(f"http://127.0.0.1:{local}/", timeout=10) as resp:
                assert resp.read() == b"hello-from-pod\n"
    finally:
        proc.kill()
        proc.wait()


def test_port_forward_to_a_closed_port_reports_on_the_error_stream(node: KubeletProcess) -> None:
    proc, local = _forward(node, 9999)
    try:
        with pytest.raises(OSError):
            urllib.request.urlopen(f"http://127.0.0.1:{local}/", timeout=10)
        time.sleep(0.5)
    finally:
        proc.kill()
        _, err = proc.communicate()
    assert "9999" in err and ("refused" in err or "error" in err.lower()), err


def test_attach_with_stdin(node: KubeletProcess) -> None:
    argv = [os.path.join(cache_bin(), "kubectl"), f"--kubeconfig={node.cp.admin_kubeconfig}",
            "attach", "-i", "talk"]  # fmt: skip
    proc = subprocess.Popen(
        argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    assert proc.stdin is not None and proc.stdout is not None
    try:
        deadline = time.monotonic() + 30
        seen = ""
        while time.monotonic() < deadline and "got:hello" not in seen:
            proc.stdin.write("hello\n")
            proc.stdin.flush()
            seen += _read_some(proc.stdout.fileno())
        assert "got:hello" in seen
    finally:
        proc.kill()
        proc.wait()


def _read_some(fd: int) -> str:
    import select

    ready, _, _ = select.select([fd], [], [], 1.0)
    return os.read(fd, 4096).decode() if ready else ""


def test_exec_into_a_missing_container_through_kubectl(node: KubeletProcess) -> None:
    r = kubectl(node, "exec", "sh", "-c", "nope", "--", "true")
    assert r.returncode != 0
    assert b"container nope is not valid for pod sh" in r.stderr  # the API server's check


# ------------------------------------------------------------ the kubelet port directly
def _tls(cert: str | None = None, key: str | None = None) -> ssl.SSLContext:
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE  # the kubelet's self-signed serving cert
    if cert and key:
        ctx.load_cert_chain(cert, key)
    return ctx


def _raw(k: KubeletProcess, ctx: ssl.SSLContext, path: str) -> tuple[ssl.SSLSocket, bytes]:
    s = ctx.wrap_socket(socket.create_connection(("127.0.0.1", k.port), timeout=10))
    s.sendall(
        f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: Upgrade\r\n"
        "Upgrade: SPDY/3.1\r\nX-Stream-Protocol-Version: v4.channel.k8s.io\r\n"
        "Content-Length: 0\r\n\r\n".encode()
    )
    head = b""
    while b"\r\n\r\n" not in head:
        chunk = s.recv(4096)
        if not chunk:
            break
        head += chunk
    return s, head


def test_kubelet_port_answers_and_aborted_streams(node: KubeletProcess) -> None:
    admin = node.cp.pki.issue("exec-admin", "exec-admin", ["system:masters"])
    nobody = node.cp.pki.issue("exec-nobody", "exec-nobody", [])
    ok = _tls(admin.cert, admin.key)
    path = "/exec/default/sh/main?command=cat&input=1&output=1"
    s, head = _raw(node, ok, "/exec/default/sh/nope?output=1&command=true")
    assert head.startswith(b"HTTP/1.1 500"), head
    while b'container not found ("nope")' not in head:  # upstream's answer and text
        chunk = s.recv(4096)
        assert chunk, head
        head += chunk
    s.close()
    s, head = _raw(node, ok, "/exec/default/nosuchpod/main?output=1&command=true")
    assert head.startswith(b"HTTP/1.1 404")
    s.close()
    s, head = _raw(node, _tls(), path)
    assert head.startswith(b"HTTP/1.1 401"), head
    s.close()
    s, head = _raw(node, _tls(nobody.cert, nobody.key), path)
    assert head.startswith(b"HTTP/1.1 403"), head
    s.close()

    s, head = _raw(node, ok, path)  # warm-up
    assert head.startswith(b"HTTP/1.1 101"), head
    s.close()
    time.sleep(1)
    fd_dir = f"/proc/{node.proc.pid}/fd"
    before = len(os.listdir(fd_dir))
    for _ in range(200):
        s, head = _raw(node, ok, path)
        assert head.startswith(b"HTTP/1.1 101"), head
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
        s.close()  # RST mid-stream
    wait_for(
        "the kubelet's descriptors back to their count",
        lambda: len(os.listdir(fd_dir)) <= before,
        timeout=30,
    )
    # and the node still works
    r = kubectl(node, "exec", "sh", "--", "echo", "alive")
    assert r.stdout == b"alive\n"


# ------------------------------------------------------------ metrics endpoints (authn/authz as above)
def _raw_get(k: KubeletProcess, path: str) -> str:
    # Straight to the kubelet port with a client certificate: the API server's node
    # proxy refuses a node whose address is loopback ("address not allowed").
    admin = k.cp.pki.issue("metrics-reader", "metrics-reader", ["system:masters"])
    url = f"https://127.0.0.1:{k.port}{path}"
    with urllib.request.urlopen(url, context=_tls(admin.cert, admin.key), timeout=30) as resp:
        return str(resp.read().decode())


def _cgroup_file(ctrl: str, rel: str, name: str) -> str:
    with open(f"/sys/fs/cgroup/{ctrl}/{rel}/{name}") as fh:
        return fh.read()


def test_metrics_endpoints_parse_and_cadvisor_matches_the_cgroup_files(
    node: KubeletProcess,
) -> None:
    from prometheus_client.parser import text_string_to_metric_families

    for path in ("/metrics", "/metrics/resource", "/metrics/probes", "/metrics/cadvisor"):
        fams = list(text_string_to_metric_families(_raw_get(node, path)))
        assert fams, path
    if not os.path.isdir("/sys/fs/cgroup/memory"):
        pytest.skip("the comparison reads cgroup v1 files; this host is not on cgroup v1")
    pod = node.kubectl_json("get", "pod", "sh", "-n", "default")
    uid = pod["metadata"]["uid"]
    cid = pod["status"]["containerStatuses"][0]["containerID"].split("://", 1)[1]
    rel = f"kubepods/besteffort/pod{uid}/{cid}"
    pid = int(_cgroup_file("memory", rel, "cgroup.procs").split()[0])

    def eth0_rx() -> int:  # the pod's netns, read through the container's process
        with open(f"/proc/{pid}/net/dev") as fh:
            line = next(ln for ln in fh if ln.strip().startswith("eth0:"))
        return int(line.split(":", 1)[1].split()[0])

    time.sleep(1.1)  # past the stats cache of the scrapes above: a fresh collection next
    rx_before = eth0_rx()
    text = _raw_get(node, "/metrics/cadvisor")
    rx_after = eth0_rx()
    mem_file = int(_cgroup_file("memory", rel, "memory.usage_in_bytes"))
    cpu_file = int(_cgroup_file("cpuacct", rel, "cpuacct.usage"))
    shares_file = int(_cgroup_file("cpu", rel, "cpu.shares"))
    got: dict[str, float] = {}
    pod_rx: dict[str, float] = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            pod_row = s.labels.get("id") == f"/kubepods/besteffort/pod{uid}"
            if pod_row and s.name == "container_network_receive_bytes_total":
                pod_rx[s.labels["interface"]] = s.value
            if s.labels.get("pod") == "sh" and s.labels.get("container") == "main":
                assert s.labels["id"] == f"/{rel}" and s.labels["name"] == cid, s.labels
                assert s.labels["namespace"] == "default" and "busybox" in s.labels["image"]
                got[s.name] = s.value
    # a sleeping busybox: memory within 1 MiB, CPU within 50 ms of the files
    assert abs(got["container_memory_usage_bytes"] - mem_file) < 2**20, (got, mem_file)
    assert abs(got["container_cpu_usage_seconds_total"] * 1e9 - cpu_file) < 50e6, (got, cpu_file)
    assert got["container_spec_cpu_shares"] == shares_file == 2  # BestEffort
    assert 0 < got["container_memory_working_set_bytes"] <= got["container_memory_usage_bytes"]
    assert got["container_start_time_seconds"] > time.time() - 3600
    # network on the pod's row, from its netns (bridge CNI: eth0; lo left out)
    assert "lo" not in pod_rx and rx_before <= pod_rx["eth0"] <= rx_after, (
        pod_rx,
        rx_before,
        rx_after,
    )


def _quantity(text: str) -> float:
    """kubectl top's figures: "123m" cores, "45Mi" bytes."""
    units = {"m": 1e-3, "Ki": 2**10, "Mi": 2**20, "Gi": 2**30}
    for suffix, factor in units.items():
        if text.endswith(suffix):
            return float(text[: -len(suffix)]) * factor
    return float(text)


def test_kubectl_top_through_metrics_server(node: KubeletProcess) -> None:
    """metrics-server scrapes /metrics/resource; kubectl top pod and node show
    what the cgroup files and /proc/meminfo say."""
    if not node.cp.aggregation:
        part_unavailable("metrics-server", "the control plane runs without the aggregation layer")
    ms = MetricsServer(node.cp)
    with starting("metrics-server", Unavailable, log_tail=lambda: tail_of(ms.log)):
        ms.start()
    try:
        pod = node.kubectl_json("get", "pod", "busy", "-n", "default")
        rel = f"kubepods/burstable/pod{pod['metadata']['uid']}"
        cpu0, t0 = int(_cgroup_file("cpuacct", rel, "cpuacct.usage")), time.monotonic()
        out = ""

        def top_pod() -> bool:
            nonlocal out
            r = kubectl(node, "top", "pod", "busy", "--no-headers")
            out = (r.stdout + r.stderr).decode()
            return r.returncode == 0 and "busy" in out

        # Two scrapes (--metric-resolution=10s) before a CPU rate exists.
        wait_for("kubectl top pod", top_pod, timeout=60)
        cpu_rate = (
            (int(_cgroup_file("cpuacct", rel, "cpuacct.usage")) - cpu0)
            / 1e9
            / (time.monotonic() - t0)
        )
        stat = dict(
            line.split() for line in _cgroup_file("memory", rel, "memory.stat").splitlines()
        )
        usage = int(_cgroup_file("memory", rel, "memory.usage_in_bytes"))
        working_set = usage - int(stat["total_inactive_file"])
        _, cpu, mem = out.split()
        print(
            f"kubectl top pod: {cpu} {mem}; cgroup files: {cpu_rate * 1000:.0f}m {working_set / 2**20:.1f}Mi"
        )
        # The quota holds the spin near 100m; top's window and ours differ a little.
        assert abs(_quantity(cpu) - cpu_rate) < 0.04, (out, cpu_rate)
        assert 0.05 < _quantity(cpu) <= 0.12, out
        assert abs(_quantity(mem) - working_set) < 3 * 2**20, (out, working_set)
        assert _quantity(mem) >= 32 * 2**20, out

        r = kubectl(node, "top", "node", NODE, "--no-headers")
        assert r.returncode == 0, r.stderr
        _, ncpu, _, nmem, _ = r.stdout.decode().split()
        # The node's memory is the root cgroup's working set, as upstream's
        # summary (cAdvisor's "/") and eviction's memory.available read it.
        root_stat = dict(
            line.split() for line in _cgroup_file("memory", "", "memory.stat").splitlines()
        )
        used = int(_cgroup_file("memory", "", "memory.usage_in_bytes")) - int(
            root_stat["total_inactive_file"]
        )
        print(f"kubectl top node: {ncpu} {nmem}; root cgroup working set: {used / 2**20:.0f}Mi")
        # The whole machine is shared and busy: within 10% of the cgroup files.
        assert abs(_quantity(nmem) - used) < 0.1 * used, (r.stdout, used)
        assert _quantity(ncpu) > 0
    finally:
        ms.stop()
