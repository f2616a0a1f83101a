"""volumesInUse in the node status: always sent (so an emptied list clears
the API's), written at once when a volume starts being used (not at the next
period), and what was written is told back ("reported in use"), which is
what a staging of an attachable volume waits for."""

from __future__ import annotations

import asyncio
from typing import Any

from kubelet.apis.config import KubeletConfiguration
from kubelet.kubelet_node_status import NodeStatusManager
from kubelet.nodestatus.setters import NodeInputs, compute_status
from kubelet.volume.csi.staging import StagingManager
from tests.unit.volume.fixtures import MACHINE, FakeAPI


def inputs(staging: StagingManager, **kw: Any) -> NodeInputs:
    cfg = KubeletConfiguration()
    cfg.node_status_update_frequency = 3600.0  # only urgency writes in this test
    return NodeInputs(
        name="n",
        config=cfg,
        machine=MACHINE,
        kubelet_version="v1.34.4",
        volumes_in_use=staging.in_use,
        volumes_reported=staging.mark_reported,
        **kw,
    )


def test_volumes_in_use_always_sent_sorted(tmp_path):
    staging = StagingManager(str(tmp_path))
    assert compute_status(inputs(staging), None)["volumesInUse"] == []
    staging.add_user("d.example.com", "h2", ("u", "a"))
    staging.add_user("d.example.com", "h1", ("u", "b"))
    assert compute_status(inputs(staging), None)["volumesInUse"] == [
        "kubernetes.io/csi/d.example.com^h1",
        "kubernetes.io/csi/d.example.com^h2",
    ]


async def test_a_volume_waiting_to_be_reported_is_written_at_once(tmp_path):
    needed = asyncio.Event()

    async def urgent() -> None:
        await needed.wait()
        needed.clear()

    staging = StagingManager(str(tmp_path), report_needed=needed.set)
    api = FakeAPI()
    mgr = NodeStatusManager(api, inputs(staging, urgent=urgent))  # type: ignore[arg-type]
    stop = asyncio.Event()
    task = asyncio.ensure_future(mgr.run(stop))
    await mgr.registered.wait()
    writes = len(api.status_patches)
    staging.add_user("d.example.com", "h", ("u", "pv"))
    await asyncio.sleep(0.05)
    assert len(api.status_patches) == writes  # a new user alone waits for the period
    waiter = asyncio.ensure_future(staging.wait_reported("d.example.com", "h", timeout=30))
    await asyncio.wait_for(waiter, 10)  # the period is an hour: the write was urgent
    assert api.status_patches[-1]["volumesInUse"] == ["kubernetes.io/csi/d.example.com^h"]
    stop.set()
    await task


async def test_wait_reported_times_out_with_upstreams_reason(tmp_path):
    staging = StagingManager(str(tmp_path))
    staging.add_user("d.example.com", "h", ("u", "pv"))
    try:
        await staging.wait_reported("d.example.com", "h", timeout=0.05)
    except Exception as err:
        assert "has not yet been added to the list of VolumesInUse" in str(err)
    else:
        raise AssertionError("expected a timeout")
