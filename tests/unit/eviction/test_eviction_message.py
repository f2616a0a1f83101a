"""The Evicted event's message and annotations, as upstream's evictionMessage
writes them (the node e2e eviction specs read the annotations)."""

from __future__ import annotations

from typing import Any

from kubelet.eviction.message import PodUsage, eviction_message, threshold_met
from kubelet.eviction.signals import Observation
from kubelet.eviction.thresholds import Threshold
from tests.unit.eviction.helpers import GiB, Harness, MiB, pod


def _pod(containers: list[dict[str, Any]], pod_requests: dict[str, str] | None = None) -> dict:
    spec: dict[str, Any] = {"containers": containers}
    if pod_requests:
        spec["resources"] = {"requests": pod_requests}
    return {"metadata": {"name": "p", "namespace": "ns", "uid": "u"}, "spec": spec}


def _c(name: str, **requests: str) -> dict[str, Any]:
    return {"name": name, "resources": {"requests": requests}}


def test_memory_blames_the_containers_over_their_requests() -> None:
    t = Threshold("memory.available", "100Mi", True)
    p = _pod([_c("hog", memory="64Mi"), _c("quiet", memory="1Gi"), _c("none")])
    usage = PodUsage({"hog": 200 * MiB, "quiet": 10 * MiB, "none": 3 * MiB + 5}, 213 * MiB)
    message, ann = eviction_message(t, Observation(50 * MiB, 8 * GiB), p, usage)
    assert message == (
        "The node was low on resource: memory. Threshold quantity: 100Mi, available: 50Mi. "
        "Container hog was using 200Mi, request is 64Mi, has larger consumption of memory. "
        "Container none was using 3145733, request is 0, has larger consumption of memory. "
    )
    assert ann == {
        "starved_resource": "memory",
        "offending_containers": "hog,none",
        "offending_containers_usage": "200Mi,3145733",
    }


def test_pod_level_memory_request_names_the_pod_too() -> None:
    t = Threshold("memory.available", "100Mi", True)
    p = _pod([_c("c")], {"memory": "1024Mi"})
    _, ann = eviction_message(t, Observation(0, GiB), p, PodUsage({"c": 2 * GiB}, 2 * GiB))
    assert ann["offending_pod"] == "p" and ann["offending_pod_usage"] == "2Gi"
    assert ann["offending_containers"] == "c"


def test_local_storage_counts_init_containers_and_prints_the_request_canonically() -> None:
    t = Threshold("nodefs.available", "10%", False)
    p = _pod([_c("app", **{"ephemeral-storage": "1024Ki"})])
    p["spec"]["initContainers"] = [_c("init")]
    usage = PodUsage({"app": 512 * 1024, "init": 4096})
    message, ann = eviction_message(t, Observation(3 * GiB, 40 * GiB), p, usage)
    # A percentage shows as what it came to; the request as the API prints it.
    assert "Threshold quantity: 4Gi, available: 3Gi. " in message
    assert ann == {
        "starved_resource": "ephemeral-storage",
        "offending_containers": "init",
        "offending_containers_usage": "4Ki",
    }


def test_inodes_and_pids_name_the_resource_and_no_container() -> None:
    o = Observation(1_500_000, 10_000_000)
    msg, ann = eviction_message(Threshold("nodefs.inodesFree", "2M", True), o, _pod([_c("c")]),
                                PodUsage())  # fmt: skip
    assert msg == "The node was low on resource: inodes. Threshold quantity: 2M, available: 1500k. "
    assert ann == {"starved_resource": "inodes", "offending_containers": "",
                   "offending_containers_usage": ""}  # fmt: skip
    _, ann = eviction_message(Threshold("pid.available", "100", True), Observation(5, 900),
                              _pod([]), None)  # fmt: skip
    assert ann == {"starved_resource": "pids"}  # no figures for the pod: the resource alone


def test_threshold_text_is_canonical() -> None:
    assert threshold_met(Threshold("memory.available", "1024Mi", True), Observation(1536, GiB)) == (
        "Threshold quantity: 1Gi, available: 1536. "
    )


async def test_the_evicted_event_carries_the_annotations() -> None:
    h = Harness()
    h.pods = [pod("hog", mem_req="10Mi"), pod("calm", mem_req="1Gi")]
    h.usage = {"hog": 50 * MiB, "calm": 20 * MiB}
    h.containers = {"hog": {"c": 50 * MiB}}
    h.available = 50 * MiB
    await h.m.synchronize()
    assert [e[:3] for e in h.events] == [("hog", "Warning", "Evicted")]
    assert h.annotations == [
        {"starved_resource": "memory", "offending_containers": "c",
         "offending_containers_usage": "50Mi"}
    ]  # fmt: skip
    # The pod's status says the same as the event.
    assert h.evictions[0][3] == h.events[0][3]
    assert "Container c was using 50Mi, request is 10Mi" in h.events[0][3]
