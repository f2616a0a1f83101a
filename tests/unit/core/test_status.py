"""getPhase as upstream: init containers gate the pod, restartPolicy decides stopped pods."""

from __future__ import annotations

from typing import Any

import pytest

from kubelet.status.generate import get_phase


def _pod(policy: str) -> dict[str, Any]:
    return {"metadata": {"name": "p"}, "spec": {"restartPolicy": policy, "containers": []}}


RUN = {"state": {"running": {}}}
OK = {"state": {"terminated": {"exitCode": 0}}}
FAIL = {"state": {"terminated": {"exitCode": 1}}}
WAIT = {"state": {"waiting": {"reason": "ContainerCreating"}}}
BACKOFF = {
    "state": {"waiting": {"reason": "CrashLoopBackOff"}},
    "lastState": {"terminated": {"exitCode": 1}},
}


@pytest.mark.parametrize(
    ("policy", "init", "main", "phase"),
    [
        ("Always", [], [RUN, RUN], "Running"),
        ("Always", [], [RUN, WAIT], "Pending"),
        ("Always", [], [], "Pending"),
        ("Always", [], [FAIL, OK], "Running"),  # restarted later
        ("Always", [], [BACKOFF], "Running"),
        ("OnFailure", [], [OK, OK], "Succeeded"),
        ("OnFailure", [], [OK, FAIL], "Running"),
        ("Never", [], [OK, OK], "Succeeded"),
        ("Never", [], [OK, FAIL], "Failed"),
        ("Never", [], [RUN, FAIL], "Running"),
        ("Always", [OK, RUN], [WAIT], "Pending"),
        ("Always", [WAIT], [WAIT], "Pending"),
        ("Always", [FAIL], [WAIT], "Pending"),  # the init container is retried
        ("Never", [FAIL], [WAIT], "Failed"),
        ("Never", [OK], [RUN], "Running"),
    ],
)
def test_get_phase(policy: str, init: list[Any], main: list[Any], phase: str) -> None:
    assert get_phase(_pod(policy), init, main) == phase


def _gated(conditions: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "metadata": {"name": "p", "uid": "u"},
        "spec": {"readinessGates": [{"conditionType": "g1"}, {"conditionType": "g2"}]},
        "status": {"conditions": conditions},
    }


def test_readiness_gate_messages_as_upstream() -> None:
    from kubelet.status.conditions import readiness_gates_unready

    assert readiness_gates_unready(_gated([]), []) == [
        'corresponding condition of pod readiness gate "g1" does not exist.',
        'corresponding condition of pod readiness gate "g2" does not exist.',
    ]
    conds = [{"type": "g1", "status": "True"}, {"type": "g2", "status": "Unknown"}]
    assert readiness_gates_unready(_gated(conds), conds) == [
        'the status of pod readiness gate "g2" is not "True", but Unknown'
    ]


@pytest.mark.parametrize(
    ("gates", "ready", "containers", "need"),
    [
        (["True", "True"], ("False", "x"), "True", True),  # gates opened: write Ready
        (["True", "True"], ("True", None), "True", False),
        (["True", "False"], ("True", None), "True", True),  # a gate closed
        (["True", "False"], ("True", None), "False", True),  # Ready must follow containers
        ([], ("False", "c"), "False", False),  # containers not ready, nothing new
    ],
)
def test_need_to_reconcile_pod_readiness(
    gates: list[str], ready: tuple[str, str | None], containers: str, need: bool
) -> None:
    from kubelet.status.conditions import need_to_reconcile_pod_readiness

    conds: list[dict[str, Any]] = [{"type": f"g{i + 1}", "status": s} for i, s in enumerate(gates)]
    conds.append({"type": "ContainersReady", "status": containers, "message": "c"})
    r: dict[str, Any] = {"type": "Ready", "status": ready[0]}
    if ready[1] is not None:
        r["message"] = ready[1]
    conds.append(r)
    assert need_to_reconcile_pod_readiness(_gated(conds)) is need
    ungated = _gated(conds)
    del ungated["spec"]["readinessGates"]
    assert need_to_reconcile_pod_readiness(ungated) is False


def test_a_container_status_names_the_image_its_instance_runs() -> None:
    """As upstream (cs.Image from the runtime): an init container that finished
    before its image was changed in the spec still shows the image it ran; a
    container with no instance yet shows the spec's."""
    from kubelet.container.runtime import ContainerStatus, PodStatus
    from kubelet.status.generate import container_statuses

    done = ContainerStatus("id", "init", "exited", image="registry.example/busybox:1.36")
    [entry] = container_statuses(
        [{"name": "init", "image": "registry.example/busybox:1.37"}],
        PodStatus("u", containers=[done]), {}, True, {},
    )  # fmt: skip
    assert entry["image"] == "registry.example/busybox:1.36"
    [waiting] = container_statuses(
        [{"name": "init", "image": "registry.example/busybox:1.37"}], PodStatus("u"), {}, True, {}
    )
    assert waiting["image"] == "registry.example/busybox:1.37"


@pytest.mark.parametrize(
    ("policy", "main", "phase"),
    [
        ("Always", [OK, OK], "Succeeded"),  # deleted, every container exited 0
        ("Always", [OK, FAIL], "Failed"),
        ("OnFailure", [OK, FAIL], "Failed"),
        ("Never", [OK], "Succeeded"),
    ],
)
def test_a_pod_stopped_for_good_ends_by_its_exit_codes(
    policy: str, main: list[Any], phase: str
) -> None:
    """podIsTerminal: the restart policy no longer says Running (upstream's
    'Deleted pods handling ... Restart policy Always' spec)."""
    assert get_phase(_pod(policy), [], main, terminal=True) == phase
    static = _pod(policy)
    static["metadata"]["annotations"] = {"kubernetes.io/config.source": "file"}
    if policy == "Always":  # static pods keep the policy's answer, as upstream
        assert get_phase(static, [], main, terminal=True) == "Running"


def test_generate_passes_terminal_on_to_the_phase() -> None:
    """The terminating sync's final status (generate with terminal=True, then
    TerminatePod): all containers exited 0 under restartPolicy Always is
    Succeeded; without the flag the policy still says Running."""
    from kubelet.container.runtime import ContainerStatus, PodStatus
    from kubelet.status.generate import generate
    from kubelet.status.terminal import terminate_pod

    pod = {
        "metadata": {"name": "p", "namespace": "d", "uid": "u"},
        "spec": {"restartPolicy": "Always", "containers": [{"name": "c", "image": "i"}]},
    }
    done = PodStatus("u", containers=[ContainerStatus("id", "c", "exited", exit_code=0)])
    final = generate(pod, done, {}, ["10.0.0.1"], None, terminal=True)
    assert final["phase"] == "Succeeded"
    assert terminate_pod(pod, final)["phase"] == "Succeeded"
    assert generate(pod, done, {}, ["10.0.0.1"], None)["phase"] == "Running"
