"""Graceful node shutdown for real: our kubelet on a private containerd,
registered with the real API server, a private D-Bus system bus (Debian's
dbus-daemon) and the logind stand-in on it.

50 pods in three PriorityClasses; logind is asked to power off. The kubelet
raised InhibitDelayMaxSec through its drop-in and holds a delay lock; on
PrepareForShutdown it turns NotReady ("node is shutting down"), refuses new
pods, stops the groups lowest priority first, each one within its budget and
after the one before it (by the runtime's own exit times). Every pod ends with
the DisruptionTarget condition, never terminal while Ready on the way
(watched): Failed / Terminated with upstream's message when it had to be
killed, Succeeded without a reason when it quit on SIGTERM with 0 (upstream
since 1.27, kubernetes issue 118310). Then the lock is
released (logind did not have to give up waiting), and a cancelled shutdown
brings the node back Ready with a new lock."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kubelet.cri.api import api_pb2 as pb
from kubelet.cri.remote import RemoteRuntimeService
from kubelet.kuberuntime import labels
from kubelet.nodeshutdown.storage import STATE_FILE, parse_go_time
from kubelet.testing import login1
from kubelet.testing.containerd import Containerd
from kubelet.testing.controlplane import ControlPlane, cache_bin
from kubelet.testing.kubelets import KUBELET_COMMAND, KubeletProcess
from kubelet.testing.wait import wait_for
from tests.fixtures.dbus import Logind
from tests.integration.cluster.helpers import start_node

pytestmark = [pytest.mark.cluster, pytest.mark.containerd]

NODE = "py-shutdown-node"
# Seconds per group: an upper bound, far above what stopping takes, so that a
# group ends because its pods stopped (which the order below relies on).
BUDGET = 60
GROUPS = (("lc-low", 1000, 20), ("lc-mid", 100_000, 20), ("lc-high", 1_000_000, 10))
MESSAGE = "Pod was terminated in response to imminent node shutdown."
QUITS_ON_TERM = "trap 'exit 0' TERM; sleep 3600 & wait"
IGNORES_TERM = "trap '' TERM; sleep 3600 & wait; sleep 3600"
STUBBORN_GRACE = 10


def priority_class(name: str, value: int) -> dict[str, Any]:
    return {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
            "metadata": {"name": name}, "value": value}  # fmt: skip


def pod(name: str, cls: str, script: str, grace: int) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "labels": {"app": "shutdown"}},
        "spec": {
            "nodeName": NODE,
            "priorityClassName": cls,
            "terminationGracePeriodSeconds": grace,
            # No volume the kubelet mounts: it runs in a mount namespace of its own.
            "automountServiceAccountToken": False,
            "containers": [
                {"name": "main", "image": "busybox:1.36", "command": ["sh", "-c", script]}
            ],
        },
    }


def shutdown_pods(prefix: str = "sd") -> list[dict[str, Any]]:
    out = []
    for cls, _value, count in GROUPS:
        for i in range(count):
            # Two of each group ignore SIGTERM: killed after their own 10 s.
            stubborn = i < 2
            out.append(pod(f"{prefix}-{cls}-{i:02d}", cls, IGNORES_TERM if stubborn else QUITS_ON_TERM,
                           STUBBORN_GRACE if stubborn else 30))  # fmt: skip
    return out


class Watch:
    """`kubectl get pods -w` in a thread: every pod status seen, in order."""

    def __init__(self, k: KubeletProcess) -> None:
        self.events: list[dict[str, Any]] = []
        self.proc = subprocess.Popen(
            [os.path.join(cache_bin(), "kubectl"), f"--kubeconfig={k.cp.admin_kubeconfig}",
             "get", "pods", "-n", "default", "-l", "app=shutdown", "-w",
             "--output-watch-events", "-o", "json"],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
        )  # fmt: skip
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        dec, buf = json.JSONDecoder(), ""
        for line in self.proc.stdout:
            buf += line
            try:
                obj, end = dec.raw_decode(buf.lstrip())
            except ValueError:
                continue
            buf = buf.lstrip()[end:]
            self.events.append(obj["object"])

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(10)


@pytest.fixture
def node(
    control_plane: ControlPlane, containerd: Containerd, logind: Logind, tmp_path: Path
) -> Iterator[KubeletProcess]:
    apply_objs = [priority_class(n, v) for n, v, _ in GROUPS]
    (tmp_path / "kubelet").mkdir()
    k = start_node(
        control_plane,
        tmp_path / "kubelet",
        containerd.endpoint,
        NODE,
        config={
            # Not under the shared kubepods tree: other kubelets on this machine
            # take pod cgroups there that they do not know for orphans.
            "cgroupsPerQOS": False,
            # A cluster DNS, as real nodes have: without it every pod adds a
            # MissingClusterDNS event on the node, and the event spam filter
            # (25 per object) would drop the node's Shutdown event.
            "clusterDNS": ["10.0.0.10"],
            "shutdownGracePeriodByPodPriority": [
                {"priority": v, "shutdownGracePeriodSeconds": BUDGET} for _, v, _ in GROUPS
            ],
        },
        flags=["--v", "1"],
        env=logind.bus.env(),
        command=login1.in_private_etc_systemd(logind.conf_dir, [*KUBELET_COMMAND]),
    )
    try:
        k.apply(*apply_objs)
        wait_for("the Node to be Ready", lambda: _ready(k), timeout=120)
        # Only the test's pods: the harness's static pod ignores SIGTERM for 30 s.
        (k.manifests / "static-web.yaml").unlink()
        wait_for(
            "the static pod gone", lambda: not _runtime_pods(containerd.endpoint, "static-web")
        )
        yield k
    finally:
        k.cp.kubectl("delete", "pods", "-l", "app=shutdown", "--wait=false", check=False)
        k.cp.kubectl("delete", "pod", "late-comer", "--wait=false", check=False)
        k.cp.kubectl("delete", "priorityclass", *(n for n, _, _ in GROUPS), check=False)
        k.stop()
        print(f"kubelet log: {k.log}")


def _ready(k: KubeletProcess) -> bool:
    return _ready_condition(k).get("status") == "True"


def _ready_condition(k: KubeletProcess) -> dict[str, Any]:
    if k.proc.poll() is not None:
        raise RuntimeError(f"kubelet exited {k.proc.returncode}: {k.log.read_text()[-3000:]}")
    n = k.kubectl_json("get", "node", NODE)
    return next(c for c in n["status"]["conditions"] if c["type"] == "Ready")


def _all_running(k: KubeletProcess, want: int) -> bool:
    items = k.kubectl_json("get", "pods", "-n", "default", "-l", "app=shutdown")["items"]
    ready = [p for p in items if any(c["type"] == "Ready" and c["status"] == "True"
                                     for c in p["status"].get("conditions", []))]  # fmt: skip
    return len(ready) == want


async def _exit_times(endpoint: str) -> dict[str, int]:
    """finished_at (ns) of each test pod's container, from the runtime."""
    rt = RemoteRuntimeService(endpoint, 30)
    try:
        out = {}
        for c in await rt.list_containers():
            pod_name = c.labels.get(labels.POD_NAME, "")
            if pod_name.startswith("sd-"):
                st = await rt.container_status(c.id)
                out[pod_name] = int(st.status.finished_at)
        return out
    finally:
        await rt.close()


def _runtime_pods(endpoint: str, prefix: str) -> list[str]:
    async def names() -> list[str]:
        rt = RemoteRuntimeService(endpoint, 30)
        try:
            return [s.metadata.name for s in await rt.list_pod_sandbox()
                    if s.metadata.name.startswith(prefix) and s.state == pb.SANDBOX_READY]  # fmt: skip
        finally:
            await rt.close()

    return asyncio.run(names())


def _kubelet_inhibitors(address: str) -> list[Any]:
    (rows,) = asyncio.run(login1.call(address, "ListInhibitors", login1.MANAGER))
    return [r for r in rows if r[1] == "kubelet" and r[3] == "delay"]


def test_fifty_pods_in_three_priority_groups_stop_in_order_within_budget(
    node: KubeletProcess, logind: Logind, containerd: Containerd
) -> None:
    k, address = node, logind.bus.address
    # The kubelet raised logind's delay to the sum of the budgets and holds a lock.
    drop_in = Path(logind.conf_dir, "logind.conf.d", "99-kubelet.conf").read_text()
    assert f"InhibitDelayMaxSec={BUDGET * len(GROUPS)}" in drop_in
    wait_for("the kubelet's delay lock", lambda: len(_kubelet_inhibitors(address)) == 1)
    pods = shutdown_pods()
    k.apply(*pods)
    wait_for("50 pods Running and Ready", lambda: _all_running(k, len(pods)), timeout=600, every=2)

    watch = Watch(k)
    try:
        asyncio.run(login1.call(address, "PowerOff", login1.MANAGER, "b", [False]))
        wait_for("the node NotReady", lambda: _ready_condition(k)["status"] == "False")
        cond = _ready_condition(k)
        assert (cond["reason"], cond["message"]) == ("KubeletNotReady", "node is shutting down")
        late = pod("late-comer", "lc-high", QUITS_ON_TERM, 1)
        late["metadata"]["labels"] = {"app": "late"}
        k.apply(late)
        wait_for("logind to go on with the shutdown",
                 lambda: asyncio.run(login1.call(address, "LastShutdown"))[1] > 0,
                 timeout=BUDGET * len(GROUPS) + 30)  # fmt: skip
        start, released, timed_out = asyncio.run(login1.call(address, "LastShutdown"))
        # The kubelet let go before InhibitDelayMaxSec ran out.
        assert not timed_out
        wait_for("every pod's final status", lambda: _all_shut_down(k, len(pods)), timeout=60)
    finally:
        watch.stop()

    # Never terminal while still Ready (upstream issue 108594), on any update.
    for obj in watch.events:
        st = obj.get("status") or {}
        conds = {c["type"]: c["status"] for c in st.get("conditions", [])}
        terminal = st.get("phase") in ("Failed", "Succeeded")
        assert not (terminal and conds.get("Ready") == "True"), obj
        # DisruptionTarget comes with the terminal phase, not before.
        assert terminal or "DisruptionTarget" not in conds, obj

    # Groups in order, by the runtime's exit times: a group is signalled only
    # once the one below it is stopped, sandboxes included.
    exits = asyncio.run(_exit_times(containerd.endpoint))
    assert len(exits) == len(pods)
    for cls, _value, _count in GROUPS:
        mine = [t for name, t in exits.items() if name.startswith(f"sd-{cls}-")]
        below = [t for name, t in exits.items()
                 if any(name.startswith(f"sd-{c}-") for c in _lower(cls))]  # fmt: skip
        assert min(mine) > max(below, default=0), f"{cls} stopped before a lower group"
        assert max(mine) - min(mine) <= BUDGET * 1e9, f"{cls} took longer than its budget"
    assert start * 1e9 < min(exits.values()) and max(exits.values()) <= released * 1e9
    # And by the kubelet's own account (-v=1): every group done within its budget.
    text = k.log.read_text()
    assert text.count("Done waiting for all pods in group to terminate") == len(GROUPS)
    assert "pod killing time out" not in text

    late_status = k.kubectl_json("get", "pod", "late-comer", "-n", "default")["status"]
    assert (late_status["phase"], late_status["reason"]) == ("Failed", "NodeShutdown")
    assert (
        late_status["message"] == "Pod was rejected: Pod was rejected as the node is shutting down."
    )
    assert _kubelet_inhibitors(address) == []
    state = json.loads(Path(k.dir, "root", STATE_FILE).read_text())
    assert start <= parse_go_time(state["startTime"]) <= parse_go_time(state["endTime"])
    events = k.kubectl_json("get", "events", "-n", "default", "--field-selector",
                            f"involvedObject.name={NODE}")["items"]  # fmt: skip
    seen = [(e["reason"], e["message"]) for e in events]
    assert ("Shutdown", "Shutdown manager detected shutdown event") in seen, seen

    # A cancelled shutdown: the node comes back and holds a new lock.
    asyncio.run(login1.call(address, "EmitPrepareForShutdown", sig="b", body=[False]))
    wait_for("the node Ready again", lambda: _ready(k), timeout=60)
    wait_for("a new delay lock", lambda: len(_kubelet_inhibitors(address)) == 1)


def _lower(cls: str) -> list[str]:
    names = [n for n, _, _ in GROUPS]
    return names[: names.index(cls)]


def _all_shut_down(k: KubeletProcess, want: int) -> bool:
    items = k.kubectl_json("get", "pods", "-n", "default", "-l", "app=shutdown")["items"]
    return sum(_shut_down(p) for p in items) == want


def _shut_down(p: dict[str, Any]) -> bool:
    """Its final status: the stubborn ones (killed, 137) Failed with the
    shutdown's reason, those that quit on SIGTERM with 0 Succeeded."""
    st = p["status"]
    conds = {c["type"]: c for c in st.get("conditions", [])}
    disruption = conds.get("DisruptionTarget") or {}
    states = [c.get("state") or {} for c in st.get("containerStatuses", [])]
    codes = [s["terminated"]["exitCode"] for s in states if "terminated" in s]
    if len(codes) != len(states) or not codes:
        return False
    killed = p["spec"]["terminationGracePeriodSeconds"] == STUBBORN_GRACE
    want = ("Failed", "Terminated", MESSAGE, 137) if killed else ("Succeeded", None, None, 0)
    return (
        (st.get("phase"), st.get("reason"), st.get("message"), codes[0]) == want
        and (disruption.get("status"), disruption.get("reason"), disruption.get("message"))
        == ("True", "TerminationByKubelet", MESSAGE)
        and conds.get("ContainersReady", {}).get("status") == "False"
        and conds.get("Ready", {}).get("status") == "False"
    )
