"""Fault drills: each one brings a node to a steady state on real parts, injects
one fault, and lists every way the outcome differs from what upstream's kubelet
would show. Tests run them at small sizes (tests/integration/drills/); the long
versions are `python -m benches.drills <drill> --pods N`.

A drill returns a Report whose `problems` is empty when the node came through.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benches.drills.harness import (
    CuttableProxy,
    create_namespace,
    create_pods,
    diff,
    drill_kubelet,
    mark_emptydirs,
    pod,
    running,
    runtime_view,
    status_view,
    volume_view,
)
from kubelet.testing.containerd import Containerd
from kubelet.testing.controlplane import ControlPlane
from kubelet.testing.kubelets import KubeletProcess
from kubelet.testing.wait import wait_for


@dataclass
class Report:
    drill: str
    pods: int
    problems: list[str] = field(default_factory=list)
    figures: dict[str, Any] = field(default_factory=dict)

    def check(self, ok: bool, problem: str) -> None:
        if not ok:
            self.problems.append(problem)


def steady_node(
    cp: ControlPlane,
    workdir: Path,
    endpoint: str,
    node: str,
    n: int,
    command: str,
    timeout: float,
    config: dict[str, Any] | None = None,
    extra_args: tuple[str, ...] = (),
    api_server: str | None = None,
    max_pods: int | None = None,
) -> tuple[KubeletProcess, str]:
    """A Ready node with `n` pods Running (an emptyDir and a configMap each)."""
    ns = node
    k = drill_kubelet(
        cp,
        workdir,
        endpoint,
        node,
        max_pods=max_pods or n + 20,
        config=config,
        extra_args=extra_args,
        api_server=api_server,
    ).start()
    wait_for("the node to be Ready", k.ready, timeout=90)
    create_namespace(cp, ns, workdir)
    create_pods(cp, [pod(f"p{i:04d}", ns, node, command) for i in range(n)], workdir)
    wait_for(f"{n} pods Running", lambda: running(k.api_pods(ns)) == n, timeout=timeout, every=1)
    return k, ns


def kill9(
    cp: ControlPlane, workdir: Path, endpoint: str, node: str, n: int, timeout: float = 120
) -> Report:
    """kill -9 of the kubelet under `n` running pods, then a new kubelet on the same
    root dir: every container, sandbox, status and volume stays as it was."""
    r = Report("kill9", n)
    # On containerd the container writes the marker into its emptyDir itself.
    command = 'echo "$HOSTNAME $(date +%s%N)" > /data/marker; exec sleep 100000'
    k, ns = steady_node(cp, workdir, endpoint, node, n, command, timeout)
    try:
        pods = k.api_pods(ns)
        mark_emptydirs(k.root, pods)  # the simulated runtime runs no command
        time.sleep(3)  # a few relists and status syncs: the steady state
        pods = k.api_pods(ns)
        st0, rt0, vol0 = status_view(pods), runtime_view(endpoint, ns), volume_view(k.root, pods)
        r.check(
            all(v["marker"] and v["configmap_data"] for v in vol0.values()),
            f"volumes not set up before the kill: {list(vol0.items())[:2]}",
        )
        t0 = time.monotonic()
        k.kill9()
        k.start()
        wait_for("the new kubelet serving", k.serving, timeout=90)
        wait_for("the node Ready", k.ready, timeout=90)
        # Through the new process's own view: every pod synced (running pods gauge).
        wait_for(
            "the new kubelet to see every pod running",
            lambda: f"kubelet_running_pods {float(n)}" in k.metrics(),
            timeout=timeout,
            every=1,
        )
        r.figures["readopted_s"] = round(time.monotonic() - t0, 1)
        time.sleep(5)  # relists, housekeeping, status reconcile: anything to undo would be done
        pods = k.api_pods(ns)
        st1, rt1, vol1 = status_view(pods), runtime_view(endpoint, ns), volume_view(k.root, pods)
        r.check(st1 == st0, f"API statuses changed: {diff(st0, st1)}")
        r.check(
            rt1.running_ids() == rt0.running_ids(),
            f"running containers changed: {len(rt0.running_ids() - rt1.running_ids())} gone, "
            f"{len(rt1.running_ids() - rt0.running_ids())} new",
        )
        r.check(set(rt1.sandboxes) == set(rt0.sandboxes), "sandboxes created or removed")
        dup = {u: c for u, c in rt1.ready_sandboxes_per_pod().items() if c != 1}
        r.check(not dup, f"pods with more than one ready sandbox: {dup}")
        r.check(vol1 == vol0, f"volumes set up again: {diff(vol0, vol1)}")
        restarts = sum(
            c[2] for p in st1.values() for c in p["containers"]
        )  # restartCount of every container
        r.check(restarts == 0, f"{restarts} container restarts")
        r.figures["restarts"] = restarts
        r.figures["sandboxes"] = len(rt1.sandboxes)
    finally:
        cleanup(k, ns)
    return r


def cleanup(k: KubeletProcess, ns: str) -> None:
    """Delete the pods through the API while the kubelet runs, then stop it."""
    try:
        if k.alive():
            k.kubectl("delete", "namespace", ns, "--wait=false", check=False)
            wait_for("the pods to be gone", lambda: not k.api_pods(ns), timeout=120, every=1)
    except AssertionError:
        pass
    finally:
        k.stop()
        k.kubectl("delete", "node", k.node, "--wait=false", check=False)


def runtime_restarted_empty(
    cp: ControlPlane,
    workdir: Path,
    endpoint: str,
    restart_runtime: Callable[[], None],
    node: str,
    n: int,
    timeout: float = 120,
) -> Report:
    """The runtime comes back with nothing (the simulated runtime restarted, as a
    node reboot would leave containerd): every pod gets one new sandbox and its
    containers start again with the restart count upstream shows, one past the
    last log file on disk (calcRestartCountByLogDir); the kubelet never exits."""
    r = Report("runtime-restarted-empty", n)
    k, ns = steady_node(cp, workdir, endpoint, node, n, "exec sleep 100000", timeout)
    try:
        st0, rt0 = status_view(k.api_pods(ns)), runtime_view(endpoint, ns)
        t0 = time.monotonic()
        restart_runtime()

        def recreated() -> bool:
            st = status_view(k.api_pods(ns))
            return (
                all(
                    p["phase"] == "Running"
                    and p["containers"]
                    and all(
                        c[1] != old for c, old in zip(p["containers"], _ids(st0[name]), strict=True)
                    )
                    and all("running" in c[3] for c in p["containers"])
                    for name, p in st.items()
                )
                and len(st) == n
            )

        wait_for("every pod running again in new containers", recreated, timeout=timeout, every=1)
        r.figures["recreated_s"] = round(time.monotonic() - t0, 1)
        time.sleep(3)
        st1, rt1 = status_view(k.api_pods(ns)), runtime_view(endpoint, ns)
        r.check(k.alive(), "the kubelet exited")
        r.check(not set(rt1.sandboxes) & set(rt0.sandboxes), "an old sandbox survived")
        per_pod = rt1.ready_sandboxes_per_pod()
        r.check(
            len(per_pod) == n and set(per_pod.values()) == {1},
            f"ready sandboxes per pod: {sorted(set(per_pod.values()))} over {len(per_pod)} pods",
        )
        counts = sorted({c[2] for p in st1.values() for c in p["containers"]})
        r.figures["restart_counts"] = counts
        r.check(counts == [1], f"restartCount after the wipe: {counts}, upstream shows [1]")
        attempts = sorted({a for _, _, a, _ in rt1.containers.values()})
        r.check(attempts == [1], f"container attempts in the runtime: {attempts}, want [1]")
    finally:
        cleanup(k, ns)
    return r


def _ids(view: dict[str, Any]) -> list[str]:
    return [c[1] for c in view["containers"]]


def corrupt_state(cp: ControlPlane, workdir: Path, endpoint: str, node: str, n: int) -> Report:
    """kill -9, then the kubelet's files on disk torn as a crash or a bad disk
    would leave them: the self-signed serving certificate truncated, the lock
    file full of garbage, each pod's etc-hosts truncated, one configMap volume's
    `..data` link gone. The new kubelet logs what it found, serves, keeps every
    container, and sets the volume up again."""
    r = Report("corrupt-state", n)
    lock = workdir / "kubelet.lock"
    k, ns = steady_node(
        cp,
        workdir,
        endpoint,
        node,
        n,
        "exec sleep 100000",
        120,
        extra_args=("--lock-file", str(lock)),
    )
    try:
        pods = k.api_pods(ns)
        st0 = status_view(pods)
        k.kill9()
        crt = workdir / "pki" / "kubelet.crt"
        r.check(crt.exists(), "no self-signed certificate was written")
        crt.write_bytes(crt.read_bytes()[:60])
        lock.write_bytes(b"\x00garbage\xff" * 100)
        for p in pods.values():
            hosts = k.root / "pods" / p["metadata"]["uid"] / "etc-hosts"
            if hosts.exists():
                hosts.write_bytes(hosts.read_bytes()[:10])
        victim = next(iter(pods.values()))
        cm = k.root / "pods" / victim["metadata"]["uid"] / "volumes" / "kubernetes.io~configmap"
        (cm / "config" / "..data").unlink()
        k.start()
        wait_for("the new kubelet serving", k.serving, timeout=90)
        wait_for("the node Ready", k.ready, timeout=90)
        log = k.log.read_text(errors="replace")
        r.check(
            "Self-signed serving certificate" in log and "unusable" in log,
            "no log line about the torn serving certificate",
        )
        r.check(k.starts == 1 + 1 and k.alive(), "the kubelet did not stay up")
        r.check(_serves_tls(k.port), "the kubelet port does not serve TLS")
        wait_for(
            "the configMap volume set up again",
            lambda: (cm / "config" / "mode").read_text() == "drill",
            timeout=150,
            every=2,
        )
        time.sleep(3)
        st1 = status_view(k.api_pods(ns))
        r.check(st1 == st0, f"API statuses changed: {diff(st0, st1)}")
        r.check(k.alive(), "the kubelet exited")
    finally:
        cleanup(k, ns)
    return r


def _serves_tls(port: int) -> bool:
    import socket
    import ssl

    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock, ctx.wrap_socket(sock):
        return True


def restart_containerd(ctd: Containerd, down_s: float, during: Callable[[], None]) -> None:
    """Stop containerd (its shims and containers keep running), call `during`
    until `down_s` has passed, start it again on the same state."""
    assert ctd.proc is not None
    ctd.proc.send_signal(signal.SIGTERM)
    ctd.proc.wait(30)
    deadline = time.monotonic() + down_s
    while time.monotonic() < deadline:
        during()
        time.sleep(1)
    assert ctd.bins is not None  # the binaries start() found: the same flavour again
    log = open(os.path.join(ctd.directory, "containerd.log"), "ab")
    ctd.proc = subprocess.Popen(
        [ctd.bins.containerd, "--config", os.path.join(ctd.directory, "config.toml")],
        stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    log.close()
    wait_for("containerd back", lambda: ctd.ctr("version", check=False).returncode == 0, 60)


def runtime_stopped(
    cp: ControlPlane, workdir: Path, ctd: Containerd, node: str, n: int, down_s: float
) -> Report:
    """containerd stopped for `down_s` with pods running under their shims, then
    started again: no pod recreated, the node NotReady ("container runtime is
    down") once the runtime has failed its checks for 30 s, Ready again after,
    with NodeNotReady / NodeReady events and log lines saying so."""
    r = Report("runtime-stopped", n)
    k, ns = steady_node(cp, workdir, ctd.endpoint, node, n, "exec sleep 100000", 180)
    try:
        st0, rt0 = status_view(k.api_pods(ns)), runtime_view(ctd.endpoint, ns)
        seen: list[str] = []

        def watch_ready() -> None:
            ready = k.node_conditions().get("Ready", {})
            if ready.get("status") != "True":
                seen.append(str(ready.get("message", "")))

        t0 = time.monotonic()
        restart_containerd(ctd, down_s, watch_ready)
        r.figures["not_ready_samples"] = len(seen)
        r.figures["not_ready_message"] = seen[0] if seen else None
        r.check(k.alive(), "the kubelet exited while the runtime was down")
        if down_s > 35:
            r.check(
                any("container runtime is down" in m for m in seen),
                f"Ready never said the runtime is down: {seen[:3]}",
            )
        wait_for("the node Ready again", k.ready, timeout=90)
        r.figures["ready_again_s"] = round(time.monotonic() - t0 - down_s, 1)
        wait_for("every pod running", lambda: running(k.api_pods(ns)) == n, timeout=60)
        time.sleep(3)
        st1, rt1 = status_view(k.api_pods(ns)), runtime_view(ctd.endpoint, ns)
        r.check(st1 == st0, f"API statuses changed: {diff(st0, st1)}")
        r.check(rt1.running_ids() == rt0.running_ids(), "running containers changed")
        r.check(set(rt1.sandboxes) == set(rt0.sandboxes), "sandboxes created or removed")
        log = k.logs()
        r.check("Container runtime sanity check failed" in log, "no log line for the outage")
        if seen:
            evs = [
                e for e in k.events("default") if e.get("involvedObject", {}).get("name") == node
            ]
            last = {e["reason"]: e.get("lastTimestamp") or "" for e in evs}
            r.figures["node_events"] = sorted(last)
            # A repeated event is the first one counted again (lastTimestamp moves).
            r.check(
                "NodeNotReady" in last and last.get("NodeReady", "") >= last["NodeNotReady"],
                f"no NodeNotReady then NodeReady event: {last}",
            )
    finally:
        cleanup(k, ns)
    return r


def api_outage(
    cp: ControlPlane,
    workdir: Path,
    endpoint: str,
    node: str,
    n: int,
    outage_s: float,
    cut_every: float = 3.0,
    timeout: float = 180,
) -> Report:
    """The API server gone for `outage_s` under `n` pods, and the kubelet's
    connections to it (watches included) cut every `cut_every` seconds from
    start to end. Meanwhile pods finish (restartPolicy Never, exiting during
    the outage) and are deleted (just before it). Afterwards every status in the
    API matches the runtime: none lost, none stale. `cp` must be this drill's
    own control plane (its API server is stopped)."""
    import threading
    from urllib.parse import urlparse

    r = Report("api-outage", n)
    url = urlparse(cp.url)
    proxy = CuttableProxy(url.hostname or "127.0.0.1", url.port or 443).start()
    stop_cutting = threading.Event()

    def cutter() -> None:
        while not stop_cutting.wait(cut_every):
            proxy.cut()

    threading.Thread(target=cutter, name="cutter", daemon=True).start()
    n_done = max(1, n // 5)  # finish during the outage
    n_gone = max(1, n // 5)  # deleted just before it
    n_keep = n - n_done - n_gone
    k, ns = steady_node(
        cp, workdir, endpoint, node, n_keep + n_gone, "exec sleep 100000", timeout,
        api_server=f"https://127.0.0.1:{proxy.port}", max_pods=n + 20,
    )  # fmt: skip
    try:
        finishers = [pod(f"done-{i:04d}", ns, node, f"sleep {10 + outage_s / 2:.0f}; exit 0")
                     for i in range(n_done)]  # fmt: skip
        for p in finishers:
            p["spec"]["restartPolicy"] = "Never"
        create_pods(cp, finishers, workdir)
        wait_for("the finishers running", lambda: running(k.api_pods(ns)) == n, timeout=timeout)
        before = status_view(k.api_pods(ns))
        gone = [g for g in sorted(before) if not g.startswith("done-")][:n_gone]
        cp.kubectl("delete", "pod", "-n", ns, "--wait=false", *gone)
        time.sleep(1)
        t_out = time.monotonic()
        cp.stop_apiserver()
        time.sleep(outage_s)
        r.check(k.alive(), "the kubelet exited during the outage")
        cp.start_apiserver()
        t_back = time.monotonic()
        r.figures["outage_s"] = round(t_back - t_out, 1)

        def converged() -> list[str]:
            pods = k.api_pods(ns)
            rt = runtime_view(endpoint)
            return _mismatches(pods, rt, set(gone), before)

        last: list[str] = []
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            last = converged()
            if not last:
                break
            time.sleep(2)
        r.figures["converged_s"] = round(time.monotonic() - t_back, 1)  # after the API is back
        r.check(not last, f"API and runtime disagree: {last[:5]} ({len(last)} in all)")
        create_pods(cp, [pod("after-0000", ns, node, "exec sleep 100000")], workdir)
        wait_for(
            "a pod created after the outage to run",
            lambda: running({"a": k.api_pods(ns).get("after-0000", {})}) == 1,
            timeout=60,
        )
        r.figures["cuts"] = proxy.cuts
    finally:
        stop_cutting.set()
        cleanup(k, ns)
        proxy.stop()
    return r


def _mismatches(
    pods: dict[str, dict[str, Any]], rt: Any, gone: set[str], before: dict[str, Any]
) -> list[str]:
    out = []
    for name in gone:
        if name in pods:
            out.append(f"{name}: deleted before the outage, still in the API")
    ready = rt.ready_sandboxes_per_pod()
    by_id = {cid: c for cid, c in rt.containers.items()}
    for name, p in pods.items():
        st = p.get("status", {})
        uid = p["metadata"]["uid"]
        if name.startswith("done-"):
            cs = (st.get("containerStatuses") or [{}])[0]
            term = cs.get("state", {}).get("terminated")
            if st.get("phase") != "Succeeded" or not term or term.get("exitCode") != 0:
                out.append(f"{name}: phase {st.get('phase')}, state {cs.get('state')}")
                continue
            cid = (cs.get("containerID") or "").split("://")[-1]
            if cid not in by_id or by_id[cid][3] != pb_exited():
                out.append(f"{name}: API says exited {cid[:12]}, runtime {by_id.get(cid)}")
            continue
        if ready.get(uid) != 1:
            out.append(f"{name}: {ready.get(uid, 0)} ready sandboxes")
        for cs in st.get("containerStatuses") or []:
            cid = (cs.get("containerID") or "").split("://")[-1]
            c = by_id.get(cid)
            if c is None or c[3] != pb_running() or "running" not in cs.get("state", {}):
                out.append(f"{name}: API {cs.get('state')} {cid[:12]}, runtime {c}")
            elif cs.get("restartCount") != c[2]:
                out.append(f"{name}: restartCount {cs.get('restartCount')} != attempt {c[2]}")
        if name in before and before[name] != status_view({name: p})[name]:
            out.append(f"{name}: changed across the outage: {diff(before, status_view({name: p}))}")
    return out


def pb_running() -> int:
    from kubelet.cri.api import api_pb2 as pb

    return int(pb.CONTAINER_RUNNING)


def pb_exited() -> int:
    from kubelet.cri.api import api_pb2 as pb

    return int(pb.CONTAINER_EXITED)


def disk_full(
    cp: ControlPlane, workdir: Path, endpoint: str, node: str, size_mib: int = 64
) -> Report:
    """The root dir on a small tmpfs that a pod's emptyDir and then a filler file
    fill to the last byte: the kubelet keeps serving, reports DiskPressure,
    evicts the pod that filled its emptyDir (not another), the pressure clears
    once the space is back, and no state file is left torn or half-written."""
    r = Report("disk-full", 3)
    root = workdir / "root"
    root.mkdir(parents=True, exist_ok=True)
    mnt = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size_mib}m", "tmpfs", str(root)],
                         capture_output=True, text=True)  # fmt: skip
    if mnt.returncode != 0:
        r.problems.append(f"cannot mount a tmpfs here: {mnt.stderr.strip()}")
        return r
    config = {
        "evictionHard": {"nodefs.available": "30%", "memory.available": "1Mi"},
        "evictionPressureTransitionPeriod": "5s",
    }
    k, ns = steady_node(cp, workdir, endpoint, node, 3, "exec sleep 100000", 120, config)
    filler = root / "filler"
    try:
        pods = k.api_pods(ns)
        hog = pods["p0000"]
        ed = root / "pods" / hog["metadata"]["uid"] / "volumes" / "kubernetes.io~empty-dir" / "data"
        (ed / "blob").write_bytes(b"\0" * (size_mib * 2**20 * 45 // 100))

        # Volume usage is measured once a minute (upstream: volumeStatsAggPeriod);
        # /stats/summary cannot tell when, as it lists no pod without its own
        # cgroup (cgroupsPerQOS off here): one period and a little more.
        time.sleep(70)
        with open(filler, "wb") as fh:  # to the last byte
            try:
                while True:
                    fh.write(b"\0" * 2**20)
                    fh.flush()
            except OSError as err:
                r.figures["filler_error"] = err.strerror
        wait_for(
            "DiskPressure",
            lambda: k.node_conditions().get("DiskPressure", {}).get("status") == "True",
            timeout=90,
        )
        r.check(k.serving(), "the kubelet stopped serving on a full disk")
        wait_for(
            "a pod evicted",
            lambda: any(
                p.get("status", {}).get("reason") == "Evicted" for p in k.api_pods(ns).values()
            ),
            timeout=90,
        )
        evicted = sorted(
            n for n, p in k.api_pods(ns).items() if p.get("status", {}).get("reason") == "Evicted"
        )
        r.figures["evicted"] = evicted
        r.check(evicted == ["p0000"], f"evicted {evicted}, want only the hog p0000")
        filler.unlink()
        wait_for(
            "DiskPressure gone",
            lambda: k.node_conditions().get("DiskPressure", {}).get("status") == "False",
            timeout=90,
        )
        r.check(k.alive() and k.serving(), "the kubelet did not come through")
        # Nothing torn: no temp file left beside a state file, no empty etc-hosts.
        leftovers = [str(p) for p in root.rglob(".*.*") if p.is_file() and "volumes" not in p.parts]
        r.check(not leftovers, f"temp files left behind: {leftovers[:5]}")
        empty = [str(p) for p in root.glob("pods/*/etc-hosts") if p.stat().st_size == 0]
        r.check(not empty, f"empty etc-hosts: {empty}")
    finally:
        filler.unlink(missing_ok=True)
        cleanup(k, ns)
        subprocess.run(["umount", "-l", str(root)], capture_output=True)
    return r
