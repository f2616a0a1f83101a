"""Which terminal phase a stopped pod ends with, as upstream's
generateAPIPodStatus rules it: the phase its containers give when they stopped
for good stands over the kubelet's own earlier terminal phase (a preempted pod
whose containers exit 0 on SIGTERM is Succeeded, not the kill's Failed); a
phase the API already holds as terminal is final."""

from __future__ import annotations

from typing import Any

import pytest

from kubelet.container.runtime import EXITED, ContainerStatus, PodStatus, SandboxStatus
from kubelet.status.generate import generate


def pod(api_phase: str | None) -> dict[str, Any]:
    p: dict[str, Any] = {
        "metadata": {"name": "p", "namespace": "ns", "uid": "u"},
        "spec": {"containers": [{"name": "c", "image": "pause"}], "restartPolicy": "Always"},
    }
    if api_phase:
        p["status"] = {"phase": api_phase}
    return p


@pytest.mark.parametrize(
    ("exit_code", "ours_before", "api_phase", "want"),
    [
        (0, "Failed", "Running", "Succeeded"),  # preempted, exited 0 on SIGTERM
        (137, "Failed", "Running", "Failed"),
        (0, None, "Running", "Succeeded"),
        (0, "Failed", "Failed", "Failed"),  # the API has it: final
        (0, "Succeeded", "Running", "Succeeded"),
    ],
)
def test_the_phase_a_stopped_pod_ends_with(
    exit_code: int, ours_before: str | None, api_phase: str, want: str
) -> None:
    exited = ContainerStatus("id-c", "c", EXITED, started_at=1, finished_at=2, exit_code=exit_code)
    runtime = PodStatus("u", sandboxes=[SandboxStatus("s", False, 1, 0)], containers=[exited])
    old = {"phase": ours_before} if ours_before else None
    out = generate(pod(api_phase), runtime, {}, ["10.0.0.1"], old, terminal=True)  # type: ignore[arg-type]
    assert out["phase"] == want
