"""The status a pod ends with once its containers are stopped (TerminatePod
upstream): regular containers of a pod that never initialized keep waiting,
those of an initialized pod end unknown, and the pod ends Failed."""

from __future__ import annotations

from typing import Any

from kubelet.status.terminal import UNKNOWN_TERMINATION, terminate_pod

WAIT_INIT = {"waiting": {"reason": "PodInitializing"}}
WAIT = {"waiting": {"reason": "ContainerCreating"}}
FAILED = {"terminated": {"exitCode": 1, "reason": "Error"}}
DONE = {"terminated": {"exitCode": 0, "reason": "Completed"}}
UNKNOWN = {"terminated": UNKNOWN_TERMINATION}


def pod(inits: int = 0, static: bool = False, sidecar: bool = False) -> dict[str, Any]:
    ann = {"kubernetes.io/config.source": "file"} if static else {}
    init = [{"name": f"i{n}", "image": "b"} for n in range(inits)]
    if sidecar and init:
        init[-1]["restartPolicy"] = "Always"
    return {
        "metadata": {"name": "p", "uid": "u", "annotations": ann},
        "spec": {"initContainers": init, "containers": [{"name": "c", "image": "b"}]},
    }


def cs(name: str, state: dict[str, Any], **kw: Any) -> dict[str, Any]:
    return {"name": name, "state": state, "lastState": {}, **kw}


def test_a_failed_init_container_leaves_the_regular_one_waiting() -> None:
    st = {"phase": "Failed", "initContainerStatuses": [cs("i0", FAILED)],
          "containerStatuses": [cs("c", WAIT_INIT)]}  # fmt: skip
    out = terminate_pod(pod(1), st)
    assert out["containerStatuses"] == [cs("c", WAIT_INIT)]
    assert out["initContainerStatuses"] == [cs("i0", FAILED)]
    assert out["phase"] == "Failed"


def test_a_pod_deleted_before_any_init_container_started() -> None:
    st = {"phase": "Pending",
          "initContainerStatuses": [cs("i0", WAIT_INIT), cs("i1", WAIT_INIT)],
          "containerStatuses": [cs("c", WAIT_INIT)]}  # fmt: skip
    out = terminate_pod(pod(2), st)
    # The first init container always counts as tried; the rest and the regular one wait.
    assert [c["state"] for c in out["initContainerStatuses"]] == [UNKNOWN, WAIT_INIT]
    assert out["containerStatuses"][0]["state"] == WAIT_INIT
    assert out["phase"] == "Failed"


def test_init_containers_up_to_the_last_that_tried() -> None:
    st = {"phase": "Pending",
          "initContainerStatuses": [cs("i0", DONE), cs("i1", {"running": {}}),
                                    cs("i2", WAIT_INIT)],
          "containerStatuses": [cs("c", WAIT_INIT)]}  # fmt: skip
    out = terminate_pod(pod(3), st)
    assert [c["state"] for c in out["initContainerStatuses"]] == [DONE, UNKNOWN, WAIT_INIT]
    assert out["containerStatuses"][0]["state"] == WAIT_INIT


def test_an_initialized_pod_ends_its_waiting_containers_unknown() -> None:
    st = {"phase": "Pending", "containerStatuses": [cs("c", WAIT)]}
    out = terminate_pod(pod(), st)
    assert out["containerStatuses"][0]["state"] == UNKNOWN and out["phase"] == "Failed"
    # A completed last init container also means initialized; a running sidecar
    # only once it started.
    st = {"phase": "Pending", "initContainerStatuses": [cs("i0", DONE)],
          "containerStatuses": [cs("c", WAIT_INIT)]}  # fmt: skip
    assert terminate_pod(pod(1), st)["containerStatuses"][0]["state"] == UNKNOWN
    side = {"phase": "Pending",
            "initContainerStatuses": [cs("i0", {"running": {}}, started=False)],
            "containerStatuses": [cs("c", WAIT_INIT)]}  # fmt: skip
    assert terminate_pod(pod(1, sidecar=True), side)["containerStatuses"][0]["state"] == WAIT_INIT


def test_terminal_phases_stay_and_static_pods_keep_theirs() -> None:
    done = {"phase": "Succeeded", "containerStatuses": [cs("c", DONE)]}
    assert terminate_pod(pod(), done) == done
    running = {"phase": "Running", "containerStatuses": [cs("c", {"running": {}})]}
    assert terminate_pod(pod(static=True), running)["phase"] == "Running"
    assert terminate_pod(pod(), running)["phase"] == "Failed"
