"""Node start-up durations (upstream's node start-up latency tracker): each
phase once, only for a Node this kubelet created, read as gauges."""

from __future__ import annotations

import time
from pathlib import Path

from kubelet.apis.config import KubeletConfiguration
from kubelet.kubelet_node_status import NodeStatusManager
from kubelet.metrics import REGISTRY
from kubelet.nodestatus.setters import NodeInputs
from kubelet.util.node_startup_latency import (
    NodeStartupLatencyTracker,
    boot_time,
    process_start_time,
)
from tests.unit.volume.fixtures import MACHINE, FakeAPI

PHASES = ("pre_kubelet", "pre_registration", "registration", "post_registration")


def read() -> dict[str, float | None]:
    out = {
        p: REGISTRY.get_sample_value(f"kubelet_node_startup_{p}_duration_seconds") for p in PHASES
    }
    out["total"] = REGISTRY.get_sample_value("kubelet_node_startup_duration_seconds")
    return out


class Clock:
    def __init__(self, t: float) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def test_each_phase_is_set_once_from_the_first_moment() -> None:
    clock = Clock(1010.0)
    tr = NodeStartupLatencyTracker(boot=1000.0, kubelet_start=1004.0, now=clock)
    tr.node_ready()  # not registered yet: nothing
    tr.registered_new_node()  # no attempt yet: nothing
    assert tr.registered_new is None and tr.ready is None
    tr.attempt_register()
    clock.t = 1012.0
    tr.attempt_register()  # a retry: the first attempt counts
    clock.t = 1013.5
    tr.registered_new_node()
    clock.t = 1020.0
    tr.node_ready()
    clock.t = 1030.0
    tr.registered_new_node()  # the Node deleted and created again: not timed again
    tr.node_ready()
    assert read() == {
        "pre_kubelet": 4.0, "pre_registration": 6.0, "registration": 3.5,
        "post_registration": 6.5, "total": 20.0,
    }  # fmt: skip


def test_an_adopted_node_is_not_timed() -> None:
    before = read()
    tr = NodeStartupLatencyTracker(boot=0.0, kubelet_start=1.0, now=Clock(99.0))
    tr.attempt_register()
    tr.node_ready()  # the Node existed: registered_new_node was never called
    assert read() == before and tr.ready is None


def test_without_a_boot_time_only_the_kubelets_phases_are_set() -> None:
    clock = Clock(50.0)
    tr = NodeStartupLatencyTracker(boot=None, kubelet_start=40.0, now=clock)
    before = read()
    tr.attempt_register()
    clock.t = 51.0
    tr.registered_new_node()
    clock.t = 53.0
    tr.node_ready()
    after = read()
    assert (after["pre_registration"], after["registration"]) == (10.0, 1.0)
    assert after["post_registration"] == 2.0
    assert after["pre_kubelet"] == before["pre_kubelet"] and after["total"] == before["total"]


def test_boot_and_process_start_come_from_proc(tmp_path: Path) -> None:
    boot = boot_time()
    assert boot is not None and boot < time.time()
    start = process_start_time(boot)
    assert start is not None and boot <= start <= time.time()
    bad = tmp_path / "stat"
    bad.write_text("cpu 1 2 3\n")
    assert boot_time(str(bad)) is None
    assert process_start_time(None) is None
    assert process_start_time(boot, str(bad)) is None


async def test_registration_and_the_first_ready_patch_are_timed() -> None:
    cfg = KubeletConfiguration()
    inp = NodeInputs(name="n", config=cfg, machine=MACHINE, kubelet_version="v1.34.4")
    clock = Clock(500.0)
    tr = NodeStartupLatencyTracker(boot=100.0, kubelet_start=400.0, now=clock)
    mgr = NodeStatusManager(FakeAPI(), inp, startup=tr)  # type: ignore[arg-type]
    await mgr.register()
    assert tr.first_attempt == 500.0 and tr.registered_new == 500.0
    clock.t = 503.0
    mgr.last_report = 0.0  # a report is due: the status is patched
    assert await mgr.sync_once()
    assert tr.ready == 503.0
    assert read()["post_registration"] == 3.0 and read()["total"] == 403.0
