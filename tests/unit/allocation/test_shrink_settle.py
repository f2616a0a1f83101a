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
from kubelet.util.workqueue import ReferenceWorkQueue
from tests.unit.allocation.fixtures import admit, manager, pod


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
    assert a.settle("a", pod("a", cpu="200m"))
    assert a.used.cpu_m == 500
    # A grow counts its new size at once; settling it frees nothing.
    assert m.handle_resize(pod("a", cpu="400m", gen=3))
    assert a.used.cpu_m == 700
    assert not a.settle("a", pod("a", cpu="400m"))
    assert not a.settle("gone", pod("gone"))


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
