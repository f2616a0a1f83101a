"""Graceful node shutdown at scale: N static pods in three priority groups on
the simulated runtime, the real `kubelet` command, a private D-Bus system bus
with the logind stand-in; logind is asked to power off and the time from its
PrepareForShutdown signal to every container and sandbox stopped (read from
the runtime every 20 ms) and to the inhibitor lock's release is set against
the configured budget (the sum of the group budgets) and against the least the
pods' own grace periods need.

    python -m benches.node_shutdown [--pods 1000] [--budget 30] [--kubelets ours upstream]
        [--json FILE]

Two scenarios: containers that exit on SIGTERM at once (the kubelet's own
cost), and containers that ignore it and are killed after their 2 s grace
period (the least: 3 groups x 2 s). Each with our kubelet and upstream's (the
Go kubelet built from the pinned module, same configuration), alternating
which goes first. The record has the command, commit,
date and machine (cores, load average at the start: the machine is shared).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

from benches import records
from benches.density.cluster import upstream_kubelet
from benches.procmetrics import proc_cpu_s
from kubelet.cri.api import api_pb2 as pb
from kubelet.cri.errors import CRIError
from kubelet.cri.remote import RemoteRuntimeService
from kubelet.testing import login1
from kubelet.testing.dbus import SystemBus
from kubelet.testing.net import free_port

REPO = Path(__file__).resolve().parents[1]
GROUPS = ((0, 0.6), (1000, 0.3), (2_000_000_000, 0.1))  # priority, share of the pods
STUBBORN_GRACE = 2


def manifests(directory: Path, n: int, stubborn: bool) -> None:
    directory.mkdir()
    i = 0
    for prio, share in GROUPS:
        for _ in range(round(n * share)):
            cmd = ["sh", "-c", "trap '' TERM; sleep 3600"] if stubborn else ["sleep", "infinity"]
            pod = {
                "apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": f"p{i:05d}", "namespace": "bench"},
                "spec": {
                    "priority": prio,
                    "terminationGracePeriodSeconds": STUBBORN_GRACE if stubborn else 30,
                    "containers": [{"name": "c", "image": "busybox:1.36", "command": cmd}],
                },
            }  # fmt: skip
            (directory / f"p{i:05d}.json").write_text(json.dumps(pod))
            i += 1


async def counts(endpoint: str) -> tuple[int, int]:
    """(running containers, ready sandboxes) as the runtime sees them."""
    rt = RemoteRuntimeService(endpoint, 30)
    try:
        running = pb.ContainerFilter(state=pb.ContainerStateValue(state=pb.CONTAINER_RUNNING))
        ready = pb.PodSandboxFilter(state=pb.PodSandboxStateValue(state=pb.SANDBOX_READY))
        return len(await rt.list_containers(running)), len(await rt.list_pod_sandbox(ready))
    finally:
        await rt.close()


async def watch_stop(endpoint: str, address: str, limit: float) -> dict[str, Any]:
    """PowerOff, then sample the runtime until nothing runs and logind is done."""
    rt = RemoteRuntimeService(endpoint, 30)
    running = pb.ContainerFilter(state=pb.ContainerStateValue(state=pb.CONTAINER_RUNNING))
    ready = pb.PodSandboxFilter(state=pb.PodSandboxStateValue(state=pb.SANDBOX_READY))
    out: dict[str, Any] = {}
    try:
        await login1.call(address, "PowerOff", login1.MANAGER, "b", [False])
        t0 = time.monotonic()
        while time.monotonic() - t0 < limit:
            now = time.monotonic() - t0
            if "containers_stopped_s" not in out and not await rt.list_containers(running):
                out["containers_stopped_s"] = round(now, 2)
            if "sandboxes_stopped_s" not in out and not await rt.list_pod_sandbox(ready):
                out["sandboxes_stopped_s"] = round(now, 2)
            start, end, timed_out = await login1.call(address, "LastShutdown")
            if end and "lock_released_s" not in out:
                out["lock_released_s"] = round(end - start, 2)
                out["logind_gave_up_waiting"] = bool(timed_out)
            if len(out) == 4:
                break
            await asyncio.sleep(0.02)
    finally:
        await rt.close()
    return out


def _running(endpoint: str) -> int:
    try:
        return asyncio.run(counts(endpoint))[0]
    except CRIError:  # the runtime busy starting pods: ask again
        return 0


def kubelet_argv(kubelet: str, tmp: Path, sock: Path, n: int, budget: int) -> list[str]:
    """Ours or upstream's, standalone, the same configuration for both."""
    cfg = yaml.safe_load((REPO / "hack/demo/kubelet-config.yaml").read_text())
    cfg.update({
        "staticPodPath": str(tmp / "m"), "fileCheckFrequency": "1s", "maxPods": n + 10,
        "port": free_port(), "readOnlyPort": free_port(), "healthzPort": free_port(),
        "podLogsDir": str(tmp / "logs"), "containerRuntimeEndpoint": f"unix://{sock}",
        "shutdownGracePeriodByPodPriority": [
            {"priority": p, "shutdownGracePeriodSeconds": budget} for p, _ in GROUPS
        ],
    })  # fmt: skip
    if kubelet == "ours":
        cfg["plegRelistPeriod"] = "100ms"  # ours only (upstream: fixed 1 s)
    (tmp / "config.yaml").write_text(yaml.safe_dump(cfg))
    common = ["--config", str(tmp / "config.yaml"), "--root-dir", str(tmp / "root"),
              "--cert-dir", str(tmp / "pki"), "--hostname-override", "shutdown-bench", "--v=1"]  # fmt: skip
    if kubelet == "ours":
        return [sys.executable, "-m", "kubelet", *common]
    binary = upstream_kubelet()
    if binary is None:
        raise RuntimeError("upstream kubelet not built (hack/build-control-plane.sh kubelet)")
    return [binary, *common]


def run(kubelet: str, n: int, budget: int, stubborn: bool) -> dict[str, Any]:
    tmp = Path(tempfile.mkdtemp(prefix=f"shutdown-bench-{kubelet}-{n}-"))
    bus = SystemBus(tempfile.mkdtemp(prefix="kpy-dbus-")).start()
    logind = login1.Login1Process(bus.env(), str(tmp / "etc"), str(tmp / "login1.log"))
    sock = tmp / "sim.sock"
    sim = subprocess.Popen([sys.executable, "-m", "kubelet.simruntime", "--listen", f"unix://{sock}"],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    while not sock.exists():
        time.sleep(0.05)
    manifests(tmp / "m", n, stubborn)
    argv = kubelet_argv(kubelet, tmp, sock, n, budget)
    k = subprocess.Popen(login1.in_private_etc_systemd(str(tmp / "etc"), argv), env=bus.env(),
                         stdout=open(tmp / "kubelet.log", "wb"), stderr=subprocess.STDOUT)  # fmt: skip
    try:
        t0 = time.monotonic()
        while _running(f"unix://{sock}") < n:
            if time.monotonic() - t0 > 900 or k.poll() is not None:
                raise RuntimeError(
                    f"pods did not start: {(tmp / 'kubelet.log').read_text()[-2000:]}"
                )
            time.sleep(1)
        started = time.monotonic() - t0
        time.sleep(5)  # start-up work settles
        load = [round(x, 2) for x in os.getloadavg()]
        cpu0 = proc_cpu_s(k.pid)
        result = asyncio.run(
            watch_stop(f"unix://{sock}", bus.address, 3.0 * budget * len(GROUPS) + 60)
        )
        log = (tmp / "kubelet.log").read_text()
        return {
            "kubelet": kubelet,
            "pods": n,
            "scenario": f"containers ignore SIGTERM, grace {STUBBORN_GRACE}s"
            if stubborn
            else "containers exit on SIGTERM",
            "groups": [
                {"priority": p, "pods": round(n * s), "budget_s": budget} for p, s in GROUPS
            ],
            "budget_s": budget * len(GROUPS),
            "least_needed_s": STUBBORN_GRACE * len(GROUPS) if stubborn else 0,
            "all_running_s": round(started, 1),
            "loadavg_at_signal": load,
            **result,
            "kubelet_cpu_s_during_shutdown": round(proc_cpu_s(k.pid) - cpu0, 2),
            # Both kubelets log these (ours at -v=1 too, with upstream's words).
            "group_timeouts": log.count("pod killing time out"),
            "kill_timeouts": log.count("timeout waiting to kill pod"),
            "log": str(tmp / "kubelet.log"),
        }
    finally:
        k.terminate()
        k.wait(60)
        sim.terminate()
        sim.wait(30)
        logind.stop()
        bus.stop()
        shutil.rmtree(bus.directory, ignore_errors=True)


def main() -> int:
    ap = argparse.ArgumentParser(prog="python -m benches.node_shutdown")
    ap.add_argument("--pods", type=int, default=1000)
    ap.add_argument("--budget", type=int, default=30, help="seconds per priority group")
    ap.add_argument("--kubelets", nargs="+", default=["ours", "upstream"],
                    choices=["ours", "upstream"])  # fmt: skip
    args = ap.parse_args()
    started = records.begin(module="benches.node_shutdown")
    figures: dict[str, Any] = {"runs": []}
    for stubborn in (False, True):
        pair = {}
        # Alternate which kubelet goes first: the machine is shared.
        order = args.kubelets if not stubborn else list(reversed(args.kubelets))
        for kubelet in order:
            r = run(kubelet, args.pods, args.budget, stubborn)
            print(json.dumps(r), flush=True)
            figures["runs"].append(r)
            pair[kubelet] = r
        if {"ours", "upstream"} <= set(pair) and pair["upstream"].get("containers_stopped_s"):
            figures.setdefault("ratios", []).append({
                "scenario": pair["ours"]["scenario"],
                "containers_stopped_ours_over_upstream": round(
                    pair["ours"]["containers_stopped_s"] / pair["upstream"]["containers_stopped_s"], 2
                ),
            })  # fmt: skip
    note = "kubelets alternate which goes first; loadavg_start says how shared the machine was"
    records.write(started, f"node_shutdown-{args.pods}", figures, note=note)
    return 0


if __name__ == "__main__":
    sys.exit(main())
