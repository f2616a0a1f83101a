"""The evented PLEG: container events, not the relist, drive the node."""

from __future__ import annotations

from kubelet.metrics import REGISTRY

BUSYBOX = "busybox:1.36"


async def test_events_start_and_restart_pods_without_relists(evented_node) -> None:  # type: ignore[no-untyped-def]
    node = evented_node
    latency = "kubelet_evented_pleg_connection_latency_seconds_count"
    events_timed = REGISTRY.get_sample_value(latency) or 0.0
    node.write(
        "ev", [{"name": "c", "image": BUSYBOX, "command": ["sh", "-c", "sleep 0.5; exit 1"]}]
    )
    # The generic relist runs once at start (its period is now 300s); the pod was
    # written after it, so only events can bring it up and restart it.
    await node.wait(
        lambda: node.container("ev", "c")["restartCount"] >= 2, timeout=20, what="restarts"
    )
    assert node.kubelet.evented is not None and node.kubelet.evented.events_seen > 0
    assert node.kubelet.pleg.relists <= 2
    assert node.phase("ev") == "Running"
    # The stream is open (counted once it was), and each event is timed.
    assert (
        REGISTRY.get_sample_value("kubelet_evented_pleg_connection_success_count_total") or 0
    ) >= 1
    assert (REGISTRY.get_sample_value(latency) or 0.0) > events_timed
