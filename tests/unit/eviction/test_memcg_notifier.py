"""The memcg notifier's level and which thresholds get one (pure parts);
the kernel side is tests/integration/core/test_memcg_notifier.py."""

from __future__ import annotations

import logging

import pytest

from kubelet.eviction import signals as sig
from kubelet.eviction.memcg_notifier import memcg_level, memory_notifiers
from kubelet.eviction.signals import Observation
from kubelet.eviction.thresholds import Threshold

GiB, MiB = 2**30, 2**20


def test_level_is_capacity_less_threshold_plus_inactive_file() -> None:
    obs = Observation(available=3 * GiB, capacity=8 * GiB, reclaimable=512 * MiB)
    # Met when the working set passes 8Gi - 100Mi; usage counts inactive file too.
    assert memcg_level(Threshold(sig.MEMORY, "100Mi", True), obs) == 8 * GiB - 100 * MiB + 512 * MiB
    assert memcg_level(Threshold(sig.MEMORY, "10%", False), obs) == int(8 * GiB * 0.9) + 512 * MiB


def test_one_notifier_per_memory_threshold_at_the_right_cgroup() -> None:
    found = [
        Threshold(sig.MEMORY, "100Mi", True),
        Threshold(sig.MEMORY, "300Mi", False, 30.0),
        Threshold(sig.ALLOCATABLE_MEMORY, "100Mi", True),
        Threshold(sig.NODEFS, "10%", True),
    ]
    ns = memory_notifiers(found, 1, "/sys/fs/cgroup", "/kubepods", lambda _m: None)
    assert [(n.threshold.signal, n.cgroup) for n in ns] == [
        (sig.MEMORY, "/sys/fs/cgroup/memory"),
        (sig.MEMORY, "/sys/fs/cgroup/memory"),
        (sig.ALLOCATABLE_MEMORY, "/sys/fs/cgroup/memory/kubepods"),
    ]
    assert [n.description for n in ns] == [
        "hard memory eviction threshold",
        "soft memory eviction threshold",
        "hard allocatable memory eviction threshold",
    ]
    # Without allocatable enforced there is no kubepods cgroup to watch.
    assert len(memory_notifiers(found, 1, "/sys/fs/cgroup", None, lambda _m: None)) == 2


def test_cgroup_v2_has_none_and_says_so(caplog: pytest.LogCaptureFixture) -> None:
    found = [Threshold(sig.MEMORY, "100Mi", True)]
    with caplog.at_level(logging.WARNING):
        assert memory_notifiers(found, 2, "/sys/fs/cgroup", None, lambda _m: None) == []
    assert "kernelMemcgNotification" in caplog.text and "cgroup v2" in caplog.text
