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
