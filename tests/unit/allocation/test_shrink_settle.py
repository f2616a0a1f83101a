"""A shrink frees nothing until the runtime has done it: admission counts the
larger of the old and the new size (upstream's fit counts the larger of spec
and status resources), and once the resize is actuated (ResizeCompleted) the
pod counts at its new size and the deferred resizes are retried with
retry_trigger pod_resized, as upstream's HandlePodReconcile does."""

from __future__ import annotations

from pathlib import Path

from kubelet import metrics
from kubelet.container.runtime import RUNNING, ContainerStatus, PodStatus
from kubelet.pod_sync import KubeletPodSyncer
from kubelet.podmanager import PodManager
from kubelet.types import Pod
from kubelet.util.workqueue import ReferenceWorkQueue
from tests.unit.allocation.fixtures import NODE, admit, manager, pod


def accepted(trigger: str) -> float:
    return (
        metrics.REGISTRY.get_sample_value(
            "kubelet_pod_deferred_accepted_resizes_total", {"retry_trigger": trigger}
        )
        or 0.0
    )


def test_a_shrink_counts_at_the_old_size_until_settled() -> None:
    m, a = manager(cpu_m=1000)
    admit(m, a, pod("a", cpu="600m"))
    admit(m, a, pod("b", cpu="300m"))
    assert m.handle_resize(pod("a", cpu="200m", gen=2))
    assert a.used.cpu_m == 900  # a still runs with 600m
    assert not m.handle_resize(pod("b", cpu="700m", gen=2))
    assert m.conditions.is_reason("b", "Deferred")
    assert m.settle(pod("a", cpu="200m"))
    assert a.used.cpu_m == 500
    # A grow counts its new size at once; settling it frees nothing.
    assert m.handle_resize(pod("a", cpu="400m", gen=3))
    assert a.used.cpu_m == 700
    assert not m.settle(pod("a", cpu="400m"))
    assert not m.settle(pod("gone"))


def test_the_actuated_shrink_retries_the_deferred_resizes(tmp_path: Path) -> None:
    m, a = manager(cpu_m=1000)
    admit(m, a, pod("a", cpu="600m"))
    admit(m, a, pod("b", cpu="300m"))
    pods = PodManager()
    queue = ReferenceWorkQueue(clock=lambda: 0.0)
    syncer = KubeletPodSyncer(
        str(tmp_path), [], None, None, None, pods, None, queue, a, None,  # type: ignore[arg-type]
        allocation=m,
    )  # fmt: skip
    shrunk, wish = pod("a", cpu="200m", gen=2), pod("b", cpu="700m", gen=2)
    pods.add_or_update(shrunk)
    pods.add_or_update(wish)
    assert m.handle_resize(shrunk)
    assert not m.handle_resize(wish)
    before = accepted("pod_resized")
    running = PodStatus("a", "a", "default", [], [], [ContainerStatus("id-c", "c", RUNNING)], 0)
    # Not actuated yet: nothing is freed, nothing retried.
    syncer._check_resize(shrunk, running)
    assert queue.get_work(1.0) == [] and m.pending == ["b"]
    m.set_actuated(shrunk, shrunk["spec"]["containers"][0])
    syncer._check_resize(shrunk, running)
    assert queue.get_work(1.0) == ["b"]
    assert m.pending == []
    assert [c["type"] for c in m.conditions.of("b")] == ["PodResizeInProgress"]
    assert accepted("pod_resized") == before + 1
    assert a.used.cpu_m == 900  # 200m + b's 700m


def test_after_a_restart_a_shrink_not_yet_done_is_admitted_at_its_old_size(
    tmp_path: Path,
) -> None:
    m, a = manager(cpu_m=1000, tmp=tmp_path)
    admit(m, a, pod("a", cpu="600m", mem="128Mi"))
    m.set_actuated(pod("a"), pod("a", cpu="600m", mem="128Mi")["spec"]["containers"][0])
    assert m.handle_resize(pod("a", cpu="200m", mem="256Mi", gen=2))
    # The kubelet restarts before the runtime shrank the cpu.
    m2, a2 = manager(cpu_m=1000, tmp=tmp_path)
    wish = pod("a", cpu="200m", mem="256Mi", gen=2)
    counted = m2.admitted_size(wish)["spec"]["containers"][0]["resources"]["requests"]
    assert counted == {"cpu": "600m", "memory": "256Mi"}  # the larger of each
    assert m2.allocated_pod(wish)["spec"]["containers"][0]["resources"]["requests"] == {
        "cpu": "200m", "memory": "256Mi",
    }  # fmt: skip
    # As the kubelet's pod addition: admitted at that size, allocated as checkpointed.
    assert a2.admit("a", m2.admitted_size(wish), NODE) is None
    assert a2.used.cpu_m == 600
    assert m2.settle(wish)
    assert a2.used.cpu_m == 200
    # Nothing actuated larger: the allocation as it is.
    assert m2.admitted_size(pod("b")) == pod("b")


def _two(x: str, y: str, gen: int) -> Pod:
    p = pod("t", gen=gen)
    p["spec"]["containers"] = [
        {"name": n, "image": "i", "resources": {"requests": {"cpu": cpu, "memory": "64Mi"}}}
        for n, cpu in (("x", x), ("y", y))
    ]
    return p


def test_one_rule_says_what_a_resized_pod_holds() -> None:
    """The admission code keeps the totals; the allocation manager alone says
    what size a pod holds: per container the larger of what it runs with and
    its allocation (upstream's fit with status resources), during a resize as
    after a restart. One container's shrink does not hide another's growth."""
    m, a = manager(cpu_m=2000)
    old, new = _two("400m", "100m", 1), _two("100m", "400m", 2)
    admit(m, a, old)
    for c in old["spec"]["containers"]:
        m.set_actuated(old, c)
    assert m.handle_resize(new)
    held = m.admitted_size(new)
    assert (
        a.used.cpu_m
        == 800
        == sum(
            int(c["resources"]["requests"]["cpu"].removesuffix("m"))
            for c in held["spec"]["containers"]
        )
    )  # x still runs at 400m, y counts its 400m at once
    for c in new["spec"]["containers"]:
        m.set_actuated(new, c)
    assert m.settle(new) and a.used.cpu_m == 500
