"""The node core on a real containerd with runc (the subset that ran: see names)."""

from __future__ import annotations

import json

import pytest

from kubelet.cri.api import api_pb2 as pb
from kubelet.testing.images import BUSYBOX_REF

pytestmark = pytest.mark.containerd


async def test_static_busybox_pod_runs_for_real(containerd_node) -> None:  # type: ignore[no-untyped-def]
    node = containerd_node
    node.write(
        "real",
        [
            {
                "name": "c",
                "image": BUSYBOX_REF,
                "command": ["sh", "-c", "echo hello from a real pod; sleep infinity"],
            }
        ],
    )
    await node.wait(
        lambda: node.phase("real") == "Running", timeout=60, what="Running on containerd"
    )
    st = node.pod("real")["status"]
    assert st["podIP"].startswith("10.244.")
    cid = node.container("real", "c")["containerID"]
    assert cid.startswith("containerd://")
    info = (await node.rt.container_status(cid.split("://")[1], verbose=True)).info
    pid = json.loads(info["info"])["pid"]
    with open(f"/proc/{pid}/cmdline", "rb") as fh:
        assert b"sleep" in fh.read()  # the process exists on this host
    uid = node.pod("real")["metadata"]["uid"]
    log = node.manifests.parent / "logs" / f"default_real-node-a_{uid}" / "c" / "0.log"
    await node.wait(lambda: "hello from a real pod" in log.read_text(), timeout=10, what="log line")
    assert " stdout F hello from a real pod" in log.read_text()


async def test_failing_container_restarts_and_never_policy_fails(containerd_node) -> None:  # type: ignore[no-untyped-def]
    node = containerd_node
    node.write("flaky", [{"name": "c", "image": BUSYBOX_REF, "command": ["sh", "-c", "exit 4"]}])
    node.write(
        "once",
        [{"name": "c", "image": BUSYBOX_REF, "command": ["sh", "-c", "exit 5"]}],
        restartPolicy="Never",
    )
    await node.wait(
        lambda: node.container("flaky", "c")["restartCount"] >= 2, timeout=60, what="restarts"
    )
    assert node.container("flaky", "c")["lastState"]["terminated"]["exitCode"] == 4
    await node.wait(lambda: node.phase("once") == "Failed", timeout=60, what="Failed")
    term = node.container("once", "c")["state"]["terminated"]
    assert (term["exitCode"], term["reason"]) == (5, "Error")


async def test_removed_manifest_stops_and_removes_the_pod(containerd_node) -> None:  # type: ignore[no-untyped-def]
    node = containerd_node
    path = node.write(
        "gone", [{"name": "c", "image": BUSYBOX_REF, "command": ["sleep", "infinity"]}]
    )
    await node.wait(lambda: node.phase("gone") == "Running", timeout=60, what="Running")
    uid = node.pod("gone")["metadata"]["uid"]
    path.unlink()
    sel = pb.PodSandboxFilter(label_selector={"io.kubernetes.pod.uid": uid})

    async def removed() -> bool:
        return not await node.rt.list_pod_sandbox(sel)

    import asyncio

    for _ in range(300):
        if await removed():
            break
        await asyncio.sleep(0.1)
    assert await removed()
    assert not await node.rt.list_containers(
        pb.ContainerFilter(label_selector={"io.kubernetes.pod.uid": uid})
    )


async def test_pod_cgroups_are_made_before_and_removed_after(containerd_qos_node) -> None:  # type: ignore[no-untyped-def]
    import asyncio
    import os

    node = containerd_qos_node
    path = node.write(
        "cg",
        [
            {
                "name": "c",
                "image": BUSYBOX_REF,
                "command": ["sleep", "infinity"],
                "resources": {"requests": {"cpu": "250m", "memory": "32Mi"}},
            }
        ],
    )
    await node.wait(lambda: node.phase("cg") == "Running", timeout=60, what="Running")
    uid = node.pod("cg")["metadata"]["uid"]
    mem = f"/sys/fs/cgroup/memory/kubepods/burstable/pod{uid}"
    cpu = f"/sys/fs/cgroup/cpu/kubepods/burstable/pod{uid}"
    assert os.path.isdir(mem) and os.path.isdir(cpu)
    with open(f"{cpu}/cpu.shares") as fh:
        assert fh.read().strip() == "256"  # 250m of CPU requested
    # the runtime put the containers inside the pod's cgroup
    assert [d for d in os.listdir(mem) if os.path.isdir(os.path.join(mem, d))]
    # ...and the kubelet's stats (Cython parsers over the pod cgroups) see it run.
    k = node.kubelet
    summary = k.stats.summary()
    (ps,) = [p for p in summary["pods"] if p["podRef"]["uid"] == uid]
    with open(f"{mem}/memory.usage_in_bytes") as fh:
        usage = int(fh.read())
    assert ps["memory"]["usageBytes"] > 0 and abs(ps["memory"]["usageBytes"] - usage) < 2**24
    assert ps["cpu"]["usageCoreNanoSeconds"] > 0
    assert summary["node"]["memory"]["workingSetBytes"] > 0
    from prometheus_client import generate_latest

    text = generate_latest(k.resource_registry).decode()
    assert (
        f'pod_memory_working_set_bytes{{namespace="default",pod="{ps["podRef"]["name"]}"}}' in text
    )
    path.unlink()
    # The pod's 30 s grace (sleep as PID 1 ignores SIGTERM), then the cgroup:
    # generous for a busy CI machine.
    for _ in range(900):
        if not os.path.exists(mem) and not os.path.exists(cpu):
            break
        await asyncio.sleep(0.1)
    assert not os.path.exists(mem) and not os.path.exists(cpu)


async def test_removed_pod_gets_sigterm_then_sigkill_after_its_grace(containerd_node) -> None:  # type: ignore[no-untyped-def]
    import asyncio
    import time

    node = containerd_node
    # A shell that ignores SIGTERM: only the SIGKILL after the grace period stops it.
    path = node.write(
        "stubborn",
        [
            {
                "name": "c",
                "image": BUSYBOX_REF,
                "command": ["sh", "-c", "trap '' TERM; while true; do sleep 1; done"],
            }
        ],
        terminationGracePeriodSeconds=3,
    )
    polite = node.write(
        "polite",
        [
            {
                "name": "c",
                "image": BUSYBOX_REF,
                "command": ["sh", "-c", "trap 'exit 0' TERM; while true; do sleep 1; done"],
            }
        ],
        terminationGracePeriodSeconds=30,
    )
    await node.wait(
        lambda: node.phase("stubborn") == "Running" and node.phase("polite") == "Running",
        timeout=60,
    )
    ids = {n: node.container(n, "c")["containerID"].split("://")[1] for n in ("stubborn", "polite")}
    stopped: dict[str, float] = {}
    t0 = time.monotonic()
    path.unlink()
    polite.unlink()
    while time.monotonic() - t0 < 20 and len(stopped) < 2:
        for n, cid in ids.items():
            if n in stopped:
                continue
            try:
                st = (await node.rt.container_status(cid)).status
                gone = st.state == pb.CONTAINER_EXITED
            except Exception:
                gone = True  # already removed
            if gone:
                stopped[n] = time.monotonic() - t0
        await asyncio.sleep(0.1)
    assert stopped["polite"] < 3  # honoured SIGTERM right away
    assert 2.5 <= stopped["stubborn"] < 10  # killed once its 3 s grace ran out


async def test_image_pulls_from_a_real_registry(containerd_node, registry) -> None:  # type: ignore[no-untyped-def]
    node = containerd_node
    image = f"{registry.host}/kubelet-py/busybox:1.36"
    before = registry.pulls("kubelet-py/busybox")
    node.write(
        "pulled",
        [
            {
                "name": "c",
                "image": image,
                "imagePullPolicy": "Always",
                "command": ["sleep", "infinity"],
            }
        ],
    )
    await node.wait(
        lambda: node.phase("pulled") == "Running", timeout=60, what="Running from the registry"
    )
    assert registry.pulls("kubelet-py/busybox") > before  # the registry served the manifest
    missing = f"{registry.host}/kubelet-py/nope:1"
    node.write("nope", [{"name": "c", "image": missing, "command": ["true"]}])
    messages: dict[str, str] = {}

    def both() -> bool:
        w = node.container("nope", "c")["state"].get("waiting", {})
        if w.get("reason") in ("ErrImagePull", "ImagePullBackOff"):
            messages[w["reason"]] = w.get("message", "")
        return len(messages) == 2

    # The back-off alternates with retries: each retry shows ErrImagePull again.
    await node.wait(both, timeout=60, what="ErrImagePull and ImagePullBackOff")
    # Upstream's texts: the runtime's error, and the back-off naming the last one.
    assert missing in messages["ErrImagePull"] and "not found" in messages["ErrImagePull"]
    assert messages["ImagePullBackOff"].startswith(
        f'Back-off pulling image "{missing}": ErrImagePull: '
    )


async def test_host_network_pod(containerd_node) -> None:  # type: ignore[no-untyped-def]
    import os

    node = containerd_node
    node.write(
        "hostnet",
        [{"name": "c", "image": BUSYBOX_REF, "command": ["sleep", "infinity"]}],
        hostNetwork=True,
    )
    await node.wait(
        lambda: node.phase("hostnet") == "Running", timeout=60, what="host-network pod Running"
    )
    st = node.pod("hostnet")["status"]
    assert st["podIP"] == "192.0.2.10"  # the node's address, as upstream reports it
    cid = node.container("hostnet", "c")["containerID"].split("://")[1]
    info = (await node.rt.container_status(cid, verbose=True)).info
    pid = json.loads(info["info"])["pid"]
    assert os.readlink(f"/proc/{pid}/ns/net") == os.readlink("/proc/self/ns/net")
