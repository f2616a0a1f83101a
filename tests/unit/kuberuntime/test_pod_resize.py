"""In-place resize on the runtime: the decisions (which containers, in which
order, what is refused) and their execution against recording fakes."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest

from kubelet import metrics
from kubelet.allocation.state import Requirements, normalize, resources_of
from kubelet.container.runtime import (
    EXITED,
    RUNNING,
    ContainerResources,
    ContainerStatus,
    PodStatus,
)
from kubelet.cri.api import api_pb2 as pb
from kubelet.kuberuntime import labels as L
from kubelet.kuberuntime.kuberuntime_container_linux import NodeSettings
from kubelet.kuberuntime.pod_actions import Probes, compute_pod_actions
from kubelet.kuberuntime.pod_resize import (
    ContainerUpdate,
    PodResizer,
    ResizeActions,
    ResizeError,
    Resources,
    best_actuated,
    compute_resize,
    memory_decrease_errors,
    needs_restart,
    order_steps,
)
from kubelet.types import Container, Pod

MI = 1024 * 1024


def ctr(name: str, cpu: str, mem: str, **extra: Any) -> Container:
    return {  # type: ignore[return-value]
        "name": name, "image": "i",
        "resources": {"requests": {"cpu": cpu, "memory": mem}, "limits": {"cpu": cpu, "memory": mem}},
        **extra,
    }  # fmt: skip


def pod(*containers: Container, **spec: Any) -> Pod:
    return {  # type: ignore[return-value]
        "metadata": {"name": "p", "namespace": "default", "uid": "u"},
        "spec": {"containers": list(containers), **spec},
    }


def running(*names: str, state: str = RUNNING) -> PodStatus:
    return PodStatus(
        "u", "p", "default", [], [],
        [ContainerStatus(f"id-{n}", n, state) for n in names], 0,
    )  # fmt: skip


class Actuated:
    def __init__(self, **by_name: Container) -> None:
        self.by_name: dict[str, Requirements] = {
            n: normalize(c.get("resources")) for n, c in by_name.items()
        }
        self.set: list[str] = []

    def get_actuated(self, pod_uid: str, container: str) -> Requirements | None:
        return self.by_name.get(container)

    def set_actuated(self, pod: Pod, c: Container) -> None:
        self.by_name[c["name"]] = normalize(c.get("resources"))
        self.set.append(c["name"])


# ------------------------------------------------------------- decisions


def test_pod_cgroup_limits_grow_before_the_containers_and_shrink_after() -> None:
    assert order_steps(100, 200, 10, 20) == ["limit", "request", "containers"]
    assert order_steps(200, 100, 20, 10) == ["containers", "request", "limit"]
    assert order_steps(200, 100, 10, 20) == ["request", "containers", "limit"]
    assert order_steps(100, 100, 10, 10) == ["containers"]


def test_decreases_go_before_increases_for_each_resource() -> None:
    p = pod(ctr("up", "200m", "64Mi"), ctr("down", "100m", "16Mi"), ctr("same", "1", "1Gi"))
    act = Actuated(
        up=ctr("up", "100m", "32Mi"), down=ctr("down", "200m", "32Mi"), same=ctr("same", "1", "1Gi")
    )
    got = compute_resize(p, running("up", "down", "same"), act, set())
    assert [u.container["name"] for u in got.updates["memory"]] == ["down", "up"]
    assert [u.container["name"] for u in got.updates["cpu"]] == ["down", "up"]


def test_only_running_containers_and_only_changed_resources_are_resized() -> None:
    p = pod(ctr("a", "200m", "64Mi"), ctr("b", "300m", "64Mi"))
    act = Actuated(a=ctr("a", "200m", "32Mi"), b=ctr("b", "100m", "64Mi"))
    got = compute_resize(p, running("a"), act, set())
    assert set(got.updates) == {"memory"}
    assert not compute_resize(p, running("a", "b", state=EXITED), act, set())
    # Those the pod actions kill (a failed probe, say) are left to their new
    # start; nothing else is done for them.
    assert "memory" not in compute_resize(p, running("a", "b"), act, {"a"}).updates
    assert not compute_resize(p, running("a"), act, {"a"})
    # A restart for the resize still has the pod cgroup follow.
    assert compute_resize(p, running("a"), act, {"a"}, resize_restarts=True)


def test_static_pods_are_never_resized_on_the_runtime() -> None:
    p = pod(ctr("a", "200m", "64Mi"))
    p["metadata"]["annotations"] = {"kubernetes.io/config.source": "file"}
    assert not compute_resize(p, running("a"), Actuated(a=ctr("a", "1", "1Gi")), set())


def test_restart_container_policy_is_per_resource() -> None:
    policy = [{"resourceName": "memory", "restartPolicy": "RestartContainer"}]
    c = ctr("a", "200m", "64Mi", resizePolicy=policy)
    assert needs_restart(c, normalize(ctr("a", "200m", "32Mi")["resources"]))
    assert not needs_restart(c, normalize(ctr("a", "100m", "64Mi")["resources"]))  # cpu only
    assert not needs_restart(ctr("a", "200m", "64Mi"), normalize(ctr("a", "1", "1Gi")["resources"]))


def _reported(st: PodStatus, cpu_m: int, mem: int) -> PodStatus:
    """What the runtime reports each container runs with (requests as shares)."""
    for c in st.containers:
        c.resources = ContainerResources(cpu_m, cpu_m, mem)
    return st


def test_without_a_record_the_runtime_says_what_a_container_runs_with() -> None:
    """A pod from before the actuated record was kept (issue #33): what the
    runtime reports stands in for it; the memory request no runtime reports is
    taken as allocated."""
    policy = [{"resourceName": "memory", "restartPolicy": "RestartContainer"}]
    c = ctr("a", "200m", "64Mi", resizePolicy=policy)
    st = _reported(running("a"), 200, 32 * MI)
    got = best_actuated(Actuated(), pod(c), c, st.containers[0])
    assert resources_of(got) == Resources(200, 200, 32 * MI, 64 * MI)
    assert needs_restart(c, got)  # the memory limit grew: RestartContainer restarts
    rec = Actuated(a=ctr("a", "200m", "64Mi"))
    assert best_actuated(rec, pod(c), c, st.containers[0]) == rec.by_name["a"]  # the record wins
    # Neither the record nor the runtime knows: nothing to judge a restart on.
    assert best_actuated(Actuated(), pod(c), c, running("a").containers[0]) is None


def test_without_a_record_only_what_the_runtime_shows_changed_is_resized() -> None:
    p = pod(ctr("a", "200m", "64Mi"), ctr("b", "1", "1Gi"))
    st = _reported(running("a", "b"), 200, 64 * MI)
    st.containers[1].resources = ContainerResources(500, 500, 1024 * MI)
    got = compute_resize(p, st, Actuated(), set())
    assert set(got.updates) == {"cpu"} and got.updates["cpu"][0].container["name"] == "b"
    assert got.updates["cpu"][0].current == Resources(500, 500, 1024 * MI, 1024 * MI)
    # The one at its allocation is recorded as such, nothing done to it.
    assert [c["name"] for c in got.adopted] == ["a"]


def test_a_container_restarted_for_its_resize_starts_again_whatever_the_restart_policy() -> None:
    policy = [{"resourceName": "memory", "restartPolicy": "RestartContainer"}]
    c = ctr("a", "200m", "64Mi", resizePolicy=policy)
    p = pod(c, restartPolicy="Never")
    st = running("a")
    st.containers[0].hash = L.container_hash(c)
    st.sandboxes.append(_sandbox())
    probes = Probes(lambda _cid: None, lambda _c, _cid: True, lambda _p, _c, _st: True)
    a = compute_pod_actions(p, st, probes)
    assert a.containers_to_start == [0]
    assert a.containers_to_kill["id-a"][1] == "Container a resize requires restart"
    assert a.resize_restarts == {"a"} and not a.kill_pod


def _sandbox() -> Any:
    from kubelet.container.runtime import SandboxStatus

    return SandboxStatus("sb", True, 1, 0, ip="10.0.0.2")


def test_memory_limits_below_usage_are_refused_with_upstreams_messages() -> None:
    shrink = ContainerUpdate(ctr("a", "1", "32Mi"), "id-a", Resources(memory_limit=32 * MI),
                             Resources(memory_limit=64 * MI))  # fmt: skip
    grow = ContainerUpdate(ctr("b", "1", "128Mi"), "id-b", Resources(memory_limit=128 * MI),
                           Resources(memory_limit=64 * MI))  # fmt: skip
    assert memory_decrease_errors(None, None, [shrink, grow], {"a": 40 * MI}) == [
        f'attempting to set container "a" memory limit ({32 * MI}) below current usage ({40 * MI})'
    ]
    assert memory_decrease_errors(None, None, [shrink], {"a": 10 * MI}) == []
    assert memory_decrease_errors(None, None, [shrink], {"a": None}) == [
        'missing container "a" memory usage'
    ]
    # The pod's limit: added where there was none, or lowered.
    assert memory_decrease_errors((-1, 32 * MI), 50 * MI, [], {}) == [
        f"attempting to set pod memory limit ({32 * MI}) below current usage ({50 * MI})"
    ]
    assert memory_decrease_errors((16 * MI, 32 * MI), 50 * MI, [], {}) == []  # growing


# ------------------------------------------------------------- execution


class Cgroups:
    def __init__(self, current: dict[str, int], desired: dict[str, int], log: list[str]) -> None:
        self.current, self._desired, self.log = current, desired, log

    def desired(self, pod: Pod) -> dict[str, int]:
        return dict(self._desired)

    def read(self, pod: Pod) -> dict[str, int]:
        return dict(self.current)

    def update(self, pod: Pod, resources: dict[str, int]) -> None:
        self.log.append("pod " + ",".join(f"{k}={v}" for k, v in sorted(resources.items())))
        self.current.update(resources)


class Runtime:
    def __init__(
        self, log: list[str], usage: int = 0, fail: bool = False,
        sandbox_error: Exception | None = None,
    ) -> None:  # fmt: skip
        self.log, self.usage, self.fail = log, usage, fail
        self.sandbox_error = sandbox_error
        self.sandbox_calls: list[
            tuple[str, pb.LinuxContainerResources, pb.LinuxContainerResources]
        ] = []

    async def update_pod_sandbox_resources(
        self, sid: str, overhead: pb.LinuxContainerResources, r: pb.LinuxContainerResources
    ) -> None:
        self.sandbox_calls.append((sid, overhead, r))
        if self.sandbox_error is not None:
            raise self.sandbox_error
        self.log.append(
            f"sandbox {sid} shares={r.cpu_shares} quota={r.cpu_quota} period={r.cpu_period} "
            f"mem={r.memory_limit_in_bytes}"
        )

    async def update_container_resources(self, cid: str, r: pb.LinuxContainerResources) -> None:
        if self.fail:
            from kubelet.cri import errors

            raise errors.CRIError("update_container", "boom")
        self.log.append(f"{cid} quota={r.cpu_quota} mem={r.memory_limit_in_bytes}")

    async def container_stats(self, cid: str) -> pb.ContainerStats:
        st = pb.ContainerStats()
        st.memory.usage_bytes.value = self.usage
        return st


def resize(
    p: Pod, act: Actuated, cg: Cgroups, rt: Runtime, status: PodStatus | None = None,
    sandbox: str = "", resizer: PodResizer | None = None,
) -> ResizeActions:  # fmt: skip
    actions = compute_resize(
        p, status or running(*(c["name"] for c in p["spec"]["containers"])), act, set()
    )
    resizer = resizer or PodResizer(rt, NodeSettings(), cg, act)  # type: ignore[arg-type]
    asyncio.run(resizer.resize(p, actions, sandbox))
    return actions


def test_growing_sets_the_pod_cgroup_first_memory_before_cpu() -> None:
    log: list[str] = []
    p = pod(ctr("a", "300m", "96Mi"))
    act = Actuated(a=ctr("a", "200m", "64Mi"))
    cg = Cgroups(
        {"memory_limit": 64 * MI, "cpu_quota": 20000, "cpu_period": 100000, "cpu_shares": 204},
        {"memory_limit": 96 * MI, "cpu_quota": 30000, "cpu_period": 100000, "cpu_shares": 307},
        log,
    )
    resize(p, act, cg, Runtime(log))
    assert log == [
        f"pod memory_limit={96 * MI}",
        f"id-a quota=20000 mem={96 * MI}",  # memory first, cpu as it was
        "pod cpu_period=100000,cpu_quota=30000",
        "pod cpu_shares=307",
        f"id-a quota=30000 mem={96 * MI}",
    ]
    assert act.set == ["a"]  # actuated once both resources are done


def test_shrinking_sets_the_pod_cgroup_last() -> None:
    log: list[str] = []
    p = pod(ctr("a", "100m", "32Mi"))
    act = Actuated(a=ctr("a", "200m", "64Mi"))
    cg = Cgroups(
        {"memory_limit": 64 * MI, "cpu_quota": 20000, "cpu_period": 100000, "cpu_shares": 204,
         "memory_usage": MI},
        {"memory_limit": 32 * MI, "cpu_quota": 10000, "cpu_period": 100000, "cpu_shares": 102},
        log,
    )  # fmt: skip
    resize(p, act, cg, Runtime(log, usage=MI))
    assert log == [
        f"id-a quota=20000 mem={32 * MI}",
        f"pod memory_limit={32 * MI}",
        f"id-a quota=10000 mem={32 * MI}",
        "pod cpu_shares=102",
        "pod cpu_period=100000,cpu_quota=10000",
    ]


def test_a_memory_limit_below_usage_changes_nothing() -> None:
    log: list[str] = []
    p = pod(ctr("a", "200m", "32Mi"))
    act = Actuated(a=ctr("a", "200m", "64Mi"))
    cg = Cgroups(
        {"memory_limit": 64 * MI, "cpu_quota": 20000, "cpu_period": 100000, "cpu_shares": 204,
         "memory_usage": 40 * MI},
        {"memory_limit": 32 * MI, "cpu_quota": 20000, "cpu_period": 100000, "cpu_shares": 204},
        log,
    )  # fmt: skip
    with pytest.raises(ResizeError, match=r"^cannot decrease memory limits: \[attempting"):
        resize(p, act, cg, Runtime(log, usage=40 * MI))
    assert log == [] and act.set == []


def test_a_runtime_failure_is_the_resize_error_and_nothing_is_recorded_as_actuated() -> None:
    log: list[str] = []
    p = pod(ctr("a", "300m", "64Mi"))
    act = Actuated(a=ctr("a", "200m", "64Mi"))
    cg = Cgroups({"cpu_quota": 20000, "cpu_period": 100000, "cpu_shares": 204},
                 {"cpu_quota": 30000, "cpu_period": 100000, "cpu_shares": 307}, log)  # fmt: skip
    with pytest.raises(ResizeError, match='container "a" updateContainerResources failed'):
        resize(p, act, cg, Runtime(log, fail=True))
    assert act.set == []


# ------------------------------------------- UpdatePodSandboxResources


def grow_cgroups(log: list[str]) -> Cgroups:
    return Cgroups(
        {"memory_limit": 64 * MI, "cpu_quota": 20000, "cpu_period": 100000, "cpu_shares": 204,
         "memory_usage": MI},
        {"memory_limit": 96 * MI, "cpu_quota": 30000, "cpu_period": 100000, "cpu_shares": 307},
        log,
    )  # fmt: skip


def test_the_runtime_is_told_the_pod_cgroup_after_each_change_of_it() -> None:
    log: list[str] = []
    p = pod(ctr("a", "300m", "96Mi"))
    act = Actuated(a=ctr("a", "200m", "64Mi"))
    rt = Runtime(log)
    resize(p, act, grow_cgroups(log), rt, sandbox="sb-1")
    # After each pod cgroup write, with what the cgroup holds by then (as
    # upstream's currentPodResources); the containers' updates come between.
    assert log == [
        f"pod memory_limit={96 * MI}",
        f"sandbox sb-1 shares=204 quota=20000 period=100000 mem={96 * MI}",
        f"id-a quota=20000 mem={96 * MI}",
        "pod cpu_period=100000,cpu_quota=30000",
        f"sandbox sb-1 shares=204 quota=30000 period=100000 mem={96 * MI}",
        "pod cpu_shares=307",
        f"sandbox sb-1 shares=307 quota=30000 period=100000 mem={96 * MI}",
        f"id-a quota=30000 mem={96 * MI}",
    ]
    # No overhead: an empty overhead message, as upstream sends.
    assert all(o == pb.LinuxContainerResources() for _, o, _ in rt.sandbox_calls)


def test_the_overhead_goes_apart_from_the_pod_resources() -> None:
    log: list[str] = []
    p = pod(ctr("a", "300m", "96Mi"), overhead={"cpu": "100m", "memory": "16Mi"})
    act = Actuated(a=ctr("a", "200m", "64Mi"))
    cg = Cgroups(
        {"memory_limit": 80 * MI, "cpu_quota": 30000, "cpu_period": 100000, "cpu_shares": 307},
        {"memory_limit": 112 * MI, "cpu_quota": 40000, "cpu_period": 100000, "cpu_shares": 409},
        log,
    )
    rt = Runtime(log)
    resize(p, act, cg, rt, sandbox="sb-1")
    sid, overhead, last = rt.sandbox_calls[-1]
    assert sid == "sb-1"
    assert (overhead.cpu_shares, overhead.cpu_quota, overhead.cpu_period) == (102, 10000, 100000)
    assert overhead.memory_limit_in_bytes == 16 * MI
    # The pod cgroup (containers + overhead) less the overhead.
    assert last.memory_limit_in_bytes == 96 * MI
    assert (last.cpu_quota, last.cpu_period) == (30000, 100000)
    assert last.cpu_shares == 307  # 409 shares ~ 400m; less 100m: 300m


def test_a_runtime_without_the_call_is_a_log_line_not_a_failure(
    caplog: pytest.LogCaptureFixture,
) -> None:
    from kubelet.cri import errors

    unimplemented = errors.UnimplementedError("update_podsandbox_resources", "unknown method")
    act = Actuated(a=ctr("a", "200m", "64Mi"))
    resizer = PodResizer(Runtime([], sandbox_error=unimplemented), NodeSettings(),
                         grow_cgroups([]), act)  # type: ignore[arg-type]  # fmt: skip
    with caplog.at_level(logging.DEBUG, logger="kubelet.kuberuntime.pod_resize"):
        resize(pod(ctr("a", "300m", "96Mi")), act, grow_cgroups([]), Runtime([]),
               sandbox="sb-1", resizer=resizer)  # fmt: skip
    assert act.set == ["a"]  # the resize went through
    said = [r for r in caplog.records if "UpdatePodSandboxResources" in r.getMessage()]
    assert said and said[0].levelno == logging.INFO
    assert all(r.levelno == logging.DEBUG for r in said[1:])  # said once, then quietly
    assert len(said) == 3  # once per pod cgroup change


def test_a_failing_call_is_logged_as_an_error_and_the_resize_goes_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    from kubelet.cri import errors

    log: list[str] = []
    act = Actuated(a=ctr("a", "200m", "64Mi"))
    rt = Runtime(log, sandbox_error=errors.UnavailableError("update_podsandbox_resources", "down"))
    with caplog.at_level(logging.ERROR, logger="kubelet.kuberuntime.pod_resize"):
        resize(pod(ctr("a", "300m", "96Mi")), act, grow_cgroups(log), rt, sandbox="sb-1")
    assert act.set == ["a"]
    assert f"id-a quota=30000 mem={96 * MI}" in log
    assert any("Failed to notify runtime for UpdatePodSandboxResources" in r.getMessage()
               for r in caplog.records)  # fmt: skip


def test_no_pod_cgroup_change_no_call() -> None:
    # Only the container's memory request changes: nothing of the pod cgroup moves.
    log: list[str] = []
    c = ctr("a", "200m", "64Mi")
    c["resources"]["requests"]["memory"] = "32Mi"  # type: ignore[index]
    act = Actuated(a=ctr("a", "200m", "64Mi"))
    cur = {"memory_limit": 64 * MI, "cpu_quota": 20000, "cpu_period": 100000, "cpu_shares": 204}
    rt = Runtime(log)
    resize(pod(c), act, Cgroups(dict(cur), dict(cur), log), rt, sandbox="sb-1")
    assert rt.sandbox_calls == []
    assert act.set == ["a"]


# --------------------------------------- kubelet_pod_resize_duration_milliseconds


def durations(success: str) -> float:
    return (
        metrics.REGISTRY.get_sample_value(
            "kubelet_pod_resize_duration_milliseconds_count", {"success": success}
        )
        or 0.0
    )


def test_every_resize_is_timed_by_its_outcome() -> None:
    ok, failed = durations("true"), durations("false")
    act = Actuated(a=ctr("a", "200m", "64Mi"))
    resize(pod(ctr("a", "300m", "96Mi")), act, grow_cgroups([]), Runtime([]))
    assert (durations("true"), durations("false")) == (ok + 1, failed)
    act = Actuated(a=ctr("a", "200m", "64Mi"))
    with pytest.raises(ResizeError):
        resize(pod(ctr("a", "300m", "96Mi")), act, grow_cgroups([]), Runtime([], fail=True))
    assert (durations("true"), durations("false")) == (ok + 1, failed + 1)
    # upstream's buckets, in milliseconds
    buckets = {
        s.labels["le"]
        for m in metrics.REGISTRY.collect()
        if m.name == "kubelet_pod_resize_duration_milliseconds"
        for s in m.samples
        if s.name.endswith("_bucket")
    }
    assert buckets == {str(float(b)) for b in (10, 50, 100, 500, 1000, 2000, 5000, 10000, 20000,
                       30000, 60000, 120000, 300000, 600000)} | {"+Inf"}  # fmt: skip
