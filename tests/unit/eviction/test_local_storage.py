"""Local ephemeral storage eviction (localStorageEviction upstream): the limits a
pod is held to, in upstream's order and with its messages, the pods the manager
evicts and spares, and how a pod's usage is measured."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from kubelet.apis.config import KubeletConfiguration
from kubelet.container.runtime import RUNNING, ContainerStatus, PodStatus, SandboxStatus
from kubelet.cri.api import api_pb2 as pb
from kubelet.cri.errors import UnavailableError
from kubelet.eviction.eviction_manager import (
    EvictionManager,
    EvictionSources,
    Observation,
)
from kubelet.eviction.local_storage import has_limits, pod_ephemeral_limit, violation
from kubelet.stats.ephemeral import EphemeralStorageStats, PodStorage

MiB = 2**20
GiB = 2**30


def container(name: str, limit: str | None = None, **extra: Any) -> dict[str, Any]:
    res = {"limits": {"ephemeral-storage": limit}} if limit else {}
    return {"name": name, "image": "busybox", "resources": res, **extra}


def pod(
    name: str = "p",
    containers: list[dict[str, Any]] | None = None,
    volumes: list[dict[str, Any]] | None = None,
    **spec: Any,
) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": "ns", "uid": f"uid-{name}"},
        "spec": {"containers": containers or [container("c")], "volumes": volumes or [], **spec},
    }


def usage(
    volumes: dict[str, int] | None = None, containers: dict[str, int] | None = None, total: int = 0
) -> PodStorage:
    return PodStorage(volumes or {}, containers or {}, total)


# ----------------------------------------------------------------- limits


@pytest.mark.parametrize(
    ("containers", "init", "overhead", "want"),
    [
        ([container("a", "5Mi")], [], None, "5Mi"),
        ([container("a", "5Mi"), container("b", "5Mi")], [], None, "10Mi"),
        # The first operand's format, canonical as Quantity.String prints it.
        ([container("a", "5Mi"), container("b", "100M")], [], None, "105242880"),
        ([container("a", "100M"), container("b", "1500M")], [], None, "1600M"),
        ([container("a", "1024Ki")], [], None, "1Mi"),
        ([container("a")], [], None, None),
        # An init container bigger than the containers sets the floor...
        ([container("a", "1Mi")], [container("i", "1Gi")], None, "1Gi"),
        # ...with the sidecars started before it; sidecars also add to the sum.
        (
            [container("a", "1Mi")],
            [container("s", "2Mi", restartPolicy="Always"), container("i", "2Mi")],
            None,
            "4Mi",
        ),
        ([container("a", "1Mi")], [container("s", "2Mi", restartPolicy="Always")], None, "3Mi"),
        ([container("a", "1Mi")], [], "1Mi", "2Mi"),
        ([container("a", "0")], [], "1Mi", "0"),  # overhead only on a non-zero limit
    ],
)
def test_pod_limit_is_podlimits(
    containers: list[dict[str, Any]], init: list[dict[str, Any]], overhead: str | None,
    want: str | None,
) -> None:  # fmt: skip
    p = pod(containers=containers, initContainers=init)
    if overhead:
        p["spec"]["overhead"] = {"ephemeral-storage": overhead}
    got = pod_ephemeral_limit(p)
    assert (None if got is None else str(got)) == want


def test_which_pods_have_limits() -> None:
    assert not has_limits(pod())
    assert not has_limits(pod(volumes=[{"name": "v", "emptyDir": {}}]))
    assert has_limits(pod(volumes=[{"name": "v", "emptyDir": {"sizeLimit": "1Mi"}}]))
    assert has_limits(pod(containers=[container("c", "1Mi")]))
    assert has_limits(pod(initContainers=[container("i", "1Mi")]))


def test_an_emptydir_over_its_size_limit_with_upstreams_message() -> None:
    p = pod(volumes=[{"name": "scratch", "emptyDir": {"sizeLimit": "1Mi"}}])
    assert violation(p, usage({"scratch": MiB})) is None  # at the limit is fine
    assert violation(p, usage({})) is None  # not measured yet
    assert violation(p, usage({"scratch": MiB + 1})) == (
        'Usage of EmptyDir volume "scratch" exceeds the limit "1Mi". '
    )
    # Memory-backed ones too (upstream checks every emptyDir's measured bytes).
    m = pod(volumes=[{"name": "shm", "emptyDir": {"medium": "Memory", "sizeLimit": "1Ki"}}])
    assert violation(m, usage({"shm": 2048})) is not None


def test_the_pod_total_against_its_containers_limits() -> None:
    p = pod(containers=[container("a", "5Mi"), container("b", "5Mi")])
    assert violation(p, usage(containers={"a": 4 * MiB, "b": MiB}, total=10 * MiB)) is None
    assert violation(p, usage(containers={"a": 4 * MiB, "b": MiB}, total=10 * MiB + 1)) == (
        "Pod ephemeral local storage usage exceeds the total limit of containers 10Mi. "
    )


def test_a_container_over_its_own_limit() -> None:
    p = pod(containers=[container("a", "5Mi"), container("b", "20Mi")])
    u = usage(containers={"a": 6 * MiB, "b": 0}, total=6 * MiB)
    assert violation(p, u) == 'Container a exceeded its local ephemeral storage limit "5Mi". '


def test_upstreams_order_emptydir_then_total_then_container() -> None:
    p = pod(
        containers=[container("a", "1Mi")],
        volumes=[{"name": "v", "emptyDir": {"sizeLimit": "1Mi"}}],
    )
    every = usage({"v": 2 * MiB}, {"a": 2 * MiB}, 4 * MiB)
    assert violation(p, every).startswith("Usage of EmptyDir")  # type: ignore[union-attr]
    assert violation(p, usage({"v": 0}, {"a": 2 * MiB}, 2 * MiB)).startswith("Pod ")  # type: ignore[union-attr]


# ---------------------------------------------------------------- manager


class Harness:
    def __init__(self, **cfg: Any) -> None:
        self.config = KubeletConfiguration()
        for k, v in cfg.items():
            setattr(self.config, k, v)
        self.pods: list[dict[str, Any]] = []
        self.storage: dict[str, PodStorage] = {}
        self.asked: list[list[str]] = []
        self.evictions: list[tuple[str, int, str, str]] = []

        async def evict(p: dict[str, Any], grace: int, reason: str, message: str) -> None:
            self.evictions.append((p["metadata"]["name"], grace, reason, message))

        async def measure(pods: list[dict[str, Any]]) -> dict[str, PodStorage]:
            self.asked.append([p["metadata"]["name"] for p in pods])
            return {p["metadata"]["uid"]: self.storage[p["metadata"]["uid"]] for p in pods
                    if p["metadata"]["uid"] in self.storage}  # fmt: skip

        sources = EvictionSources(
            lambda: list(self.pods),
            lambda: {"memory.available": Observation(4 * GiB, 8 * GiB)}, dict, measure,
        )  # fmt: skip
        self.m = EvictionManager(self.config, "/", sources, evict)


async def test_every_pod_over_a_limit_is_evicted_in_one_pass_with_a_1s_grace() -> None:
    h = Harness()
    over_c = pod("over-c", [container("c", "5Mi")])
    over_v = pod("over-v", volumes=[{"name": "v", "emptyDir": {"sizeLimit": "1Mi"}}])
    fine = pod("fine", [container("c", "5Mi")])
    free = pod("free")  # no limit: never measured
    h.pods = [over_c, over_v, fine, free]
    h.storage = {
        "uid-over-c": usage(containers={"c": 6 * MiB}, total=6 * MiB),
        "uid-over-v": usage({"v": 2 * MiB}),
        "uid-fine": usage(containers={"c": MiB}, total=MiB),
    }
    assert await h.m.synchronize() is over_c
    assert h.asked == [["over-c", "over-v", "fine"]]
    # A one-container pod over its limit is over its total first (upstream's order).
    assert h.evictions == [
        ("over-c", 1, "Evicted",
         "Pod ephemeral local storage usage exceeds the total limit of containers 5Mi. "),
        ("over-v", 1, "Evicted", 'Usage of EmptyDir volume "v" exceeds the limit "1Mi". '),
    ]  # fmt: skip
    # Evicted pods still terminating are neither measured nor evicted again.
    assert await h.m.synchronize() is None
    assert h.asked[-1] == ["fine"] and len(h.evictions) == 2


async def test_critical_pods_are_never_evicted_for_local_storage() -> None:
    h = Harness()
    static = pod("static", [container("c", "1Mi")])
    static["metadata"]["annotations"] = {"kubernetes.io/config.source": "file"}
    critical = pod("critical", [container("c", "1Mi")], priority=2_000_001_000)
    h.pods = [static, critical]
    h.storage = {u: usage(containers={"c": GiB}, total=GiB) for u in ("uid-static", "uid-critical")}
    assert await h.m.synchronize() is None
    assert h.evictions == [] and h.asked == []


async def test_local_storage_capacity_isolation_false_turns_it_off() -> None:
    h = Harness(local_storage_capacity_isolation=False)
    h.pods = [pod("over", [container("c", "1Mi")])]
    h.storage = {"uid-over": usage(containers={"c": GiB}, total=GiB)}
    assert await h.m.synchronize() is None
    assert h.evictions == [] and h.asked == []


# -------------------------------------------------------------- measuring


class StatsRuntime:
    """list_container_stats of a runtime: writable layer bytes by container ID
    (and a tenth as many inodes)."""

    def __init__(self, layers: dict[str, int], fail: bool = False) -> None:
        self.layers = layers
        self.fail = fail
        self.filters: list[pb.ContainerStatsFilter | None] = []

    async def list_container_stats(
        self, filter: pb.ContainerStatsFilter | None = None
    ) -> list[pb.ContainerStats]:
        self.filters.append(filter)
        if self.fail:
            raise UnavailableError("ListContainerStats", "runtime down")
        return [
            pb.ContainerStats(
                attributes=pb.ContainerAttributes(id=cid),
                writable_layer=pb.FilesystemUsage(
                    used_bytes=pb.UInt64Value(value=n), inodes_used=pb.UInt64Value(value=n // 10)
                ),
            )
            for cid, n in self.layers.items()
        ]


def _write(path: Path, size: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as fh:
        fh.write(os.urandom(size))  # real blocks, not a sparse file


async def test_measure_sums_layers_logs_local_volumes_and_etc_hosts(tmp_path: Path) -> None:
    p = pod(
        "m",
        [container("a", "5Mi"), container("b")],
        volumes=[
            {"name": "disk", "emptyDir": {}},
            {"name": "mem", "emptyDir": {"medium": "Memory"}},
            {"name": "cfg", "configMap": {"name": "x"}},
            {"name": "tok", "projected": {"sources": []}},
        ],
    )
    logs = tmp_path / "logs" / "ns_m_uid-m"
    _write(logs / "a" / "0.log", 8192)
    _write(logs / "b" / "0.log", 4096)
    _write(logs / "stray.log", 4096)  # a file right in the pod's log dir counts too
    (logs / "a" / "link.log").symlink_to(tmp_path / "elsewhere")  # never followed
    _write(tmp_path / "elsewhere", 1 << 20)
    _write(tmp_path / "pods" / "uid-m" / "etc-hosts", 4096)
    status = PodStatus(
        "uid-m",
        sandboxes=[SandboxStatus("sb", True, 1, 0)],
        containers=[ContainerStatus("ida", "a", RUNNING), ContainerStatus("idb", "b", RUNNING)],
    )
    rt = StatsRuntime({"ida": 1000, "idb": 2000, "old": 10**9})  # "old" is not running
    volumes = {"disk": 3 * MiB, "mem": 5 * MiB, "cfg": 4096, "tok": 4096}
    inodes = {"disk": 7, "mem": 9, "cfg": 3, "tok": 2}
    stats = EphemeralStorageStats(
        rt, str(tmp_path / "logs"), str(tmp_path / "pods"),  # type: ignore[arg-type]
        lambda _u: status, lambda _u: volumes, volume_inodes=lambda _u: inodes,
    )  # fmt: skip
    got = (await stats.measure([p]))["uid-m"]
    assert rt.filters == [pb.ContainerStatsFilter(pod_sandbox_id="sb")]
    assert got.containers == {"a": 1000 + 8192, "b": 2000 + 4096}
    assert got.volumes == volumes
    # Memory-backed and projected volumes are not the pod's local storage.
    assert got.total == 1000 + 8192 + 2000 + 4096 + 3 * MiB + 4096 + 4096 + 4096
    # Inodes the same way: the layers', one per log file and log directory (the
    # link is not a file), the local volumes', the pod's log dir, stray.log, etc-hosts.
    assert got.inodes.containers == {"a": 100 + 2, "b": 200 + 2}
    assert got.inodes.volumes == inodes
    assert got.inodes.total == 102 + 202 + 7 + 3 + 2 + 1


async def test_a_runtime_that_cannot_answer_leaves_the_pod_unmeasured(tmp_path: Path) -> None:
    status = PodStatus(
        "uid-p", sandboxes=[SandboxStatus("sb", True, 1, 0)],
        containers=[ContainerStatus("id", "c", RUNNING)],
    )  # fmt: skip
    stats = EphemeralStorageStats(
        StatsRuntime({}, fail=True), str(tmp_path), str(tmp_path),  # type: ignore[arg-type]
        lambda _u: status, lambda _u: {},
    )  # fmt: skip
    assert await stats.measure([pod()]) == {}
