"""Node capacity and allocatable knobs: localStorageCapacityIsolation (false takes
ephemeral-storage out of both; local storage eviction is off too, in the
eviction manager's own tests) and reserved hugepages."""

from __future__ import annotations

from kubelet.apis.config import KubeletConfiguration
from kubelet.nodestatus.machine import machine_info
from kubelet.nodestatus.setters import NodeInputs, allocatable, capacity


def inputs(isolation: bool) -> NodeInputs:
    cfg = KubeletConfiguration()
    cfg.local_storage_capacity_isolation = isolation
    return NodeInputs(
        name="n",
        config=cfg,
        machine=machine_info(),
        kubelet_version="v1.34.4",
        rootfs_capacity=lambda: 100 << 30,
    )


def test_ephemeral_storage_only_with_isolation() -> None:
    on = inputs(True)
    assert capacity(on)["ephemeral-storage"] == "100Gi"
    assert "ephemeral-storage" in allocatable(on, capacity(on))
    off = inputs(False)
    assert "ephemeral-storage" not in capacity(off)
    assert "ephemeral-storage" not in allocatable(off, capacity(off))


def test_reserved_hugepages_come_off_allocatable() -> None:
    inp = inputs(True)
    inp.machine.hugepages = {"hugepages-2Mi": 64 << 20}
    inp.config.system_reserved = {"hugepages-2Mi": "16Mi"}
    assert capacity(inp)["hugepages-2Mi"] == "64Mi"
    assert allocatable(inp, capacity(inp))["hugepages-2Mi"] == "48Mi"
