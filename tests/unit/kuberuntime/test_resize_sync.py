"""A resize through the runtime manager's sync, on the fake runtime: the pod
cgroup, then UpdatePodSandboxResources with the pod's own sandbox and the
cgroup's values, then the container, as upstream v1.34's doPodResizeAction.
A runtime answering UNIMPLEMENTED (containerd 1.6) does not fail the sync."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

from kubelet.allocation.state import Requirements, normalize
from kubelet.config.common import apply_defaults
from kubelet.cri import errors
from kubelet.cri.fake import FakeImageService, FakeRuntimeService
from kubelet.kuberuntime.kuberuntime_manager import RuntimeManager
from kubelet.testing.helpers import standalone_runtime_helper
from kubelet.types import Container, Pod, uid

MI = 1024 * 1024


class Actuated:
    def __init__(self) -> None:
        self.by: dict[tuple[str, str], Requirements] = {}

    def get_actuated(self, pod_uid: str, container: str) -> Requirements | None:
        return self.by.get((pod_uid, container))

    def set_actuated(self, pod: Pod, c: Container) -> None:
        self.by[uid(pod), c["name"]] = normalize(c.get("resources"))


class PodCgroup:
    """One pod's cgroup, as the kubelet's PodContainerManager would set it."""

    def __init__(self) -> None:
        self.values: dict[str, int] = {}
        self.writes: list[dict[str, int]] = []

    def desired(self, pod: Pod) -> dict[str, int]:
        lim = pod["spec"]["containers"][0]["resources"]["limits"]  # type: ignore[typeddict-item]
        cpu_m = int(lim["cpu"].rstrip("m"))
        return {
            "cpu_shares": cpu_m * 1024 // 1000,
            "cpu_quota": cpu_m * 100,
            "cpu_period": 100000,
            "memory_limit": int(lim["memory"].rstrip("Mi")) * MI,
        }

    def read(self, pod: Pod) -> dict[str, int]:
        return dict(self.values)

    def update(self, pod: Pod, resources: dict[str, int]) -> None:
        self.writes.append(dict(resources))
        self.values.update(resources)


def guaranteed(cpu: str, mem: str) -> Pod:
    res = {"requests": {"cpu": cpu, "memory": mem}, "limits": {"cpu": cpu, "memory": mem}}
    return apply_defaults(  # type: ignore[return-value]
        {"apiVersion": "v1", "kind": "Pod",
         "metadata": {"name": "p", "namespace": "default", "uid": "u-1"},
         "spec": {"containers": [{"name": "c", "image": "busybox:1.36", "resources": res}]}},
        "/m/p.yaml", "api", "n1",
    )  # fmt: skip


async def started(tmp: Path, rt: FakeRuntimeService) -> tuple[RuntimeManager, PodCgroup, Pod]:
    act, cg = Actuated(), PodCgroup()
    m = RuntimeManager(rt, FakeImageService(["busybox:1.36"]),
                       standalone_runtime_helper(str(tmp)), str(tmp),
                       actuation=act, pod_cgroups=cg)  # type: ignore[arg-type]  # fmt: skip
    p = guaranteed("200m", "64Mi")
    assert (await m.sync_pod(p, await m.get_pod_status(uid(p)))).ok
    cg.values = cg.desired(p)  # the cgroup as made for the pod
    assert act.get_actuated("u-1", "c") is not None
    return m, cg, p


def grown(p: Pod) -> Pod:
    q: Any = copy.deepcopy(p)
    q["spec"]["containers"][0]["resources"] = {
        "requests": {"cpu": "300m", "memory": "96Mi"},
        "limits": {"cpu": "300m", "memory": "96Mi"},
    }
    return q  # type: ignore[no-any-return]


async def test_a_resize_tells_the_runtime_the_pod_cgroup_of_the_pods_sandbox(
    tmp_path: Path,
) -> None:
    rt = FakeRuntimeService()
    m, cg, p = await started(tmp_path, rt)
    [sid] = list(rt.sandboxes)
    res = await m.sync_pod(grown(p), await m.get_pod_status(uid(p)))
    assert res.ok and res.resized and not res.resize_error
    calls = rt.called("update_pod_sandbox_resources")
    assert [c[0] for c in calls] == [sid] * len(cg.writes) and len(calls) == 3
    _, overhead, last = calls[-1]
    assert overhead.ByteSize() == 0  # no spec.overhead
    assert (last.cpu_shares, last.cpu_quota, last.cpu_period) == (307, 30000, 100000)
    assert last.memory_limit_in_bytes == 96 * MI
    # The memory phase's call comes after the memory limit grew, before cpu did.
    first = calls[0][2]
    assert (first.memory_limit_in_bytes, first.cpu_quota) == (96 * MI, 20000)
    # The container was updated in place too.
    [(_cid, linux)] = rt.called("update_container_resources")[-1:]
    assert linux.cpu_quota == 30000


async def test_unimplemented_is_no_failure_of_the_resize(tmp_path: Path) -> None:
    rt = FakeRuntimeService()
    m, cg, p = await started(tmp_path, rt)
    gone = errors.UnimplementedError("UpdatePodSandboxResources", "unknown method")
    rt.inject_error("update_pod_sandbox_resources", gone, times=3)
    res = await m.sync_pod(grown(p), await m.get_pod_status(uid(p)))
    assert res.ok and res.resized and not res.resize_error
    assert len(rt.called("update_pod_sandbox_resources")) == 3
    assert cg.values["cpu_quota"] == 30000
