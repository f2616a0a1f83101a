"""PodReadyToStartContainers (PodReadyToStartContainersCondition, beta and on):
True once a sandbox with its network is up that the runtime manager would keep
(upstream's PodSandboxChanged), False before and after; absent with the gate
off."""

from __future__ import annotations

from typing import Any

import pytest

from kubelet.container.runtime import PodStatus, SandboxStatus
from kubelet.status.generate import generate


def pod(host_network: bool = False) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": [{"name": "c", "image": "busybox"}]}
    if host_network:
        spec["hostNetwork"] = True
    return {"metadata": {"name": "p", "namespace": "ns", "uid": "u"}, "spec": spec}


def condition(p: dict[str, Any], sandboxes: list[SandboxStatus], **kw: Any) -> str | None:
    api = generate(p, PodStatus("u", sandboxes=sandboxes), {}, ["10.0.0.1"], None, **kw)
    found = [c for c in api["conditions"] if c["type"] == "PodReadyToStartContainers"]
    return found[0]["status"] if found else None


@pytest.mark.parametrize(
    ("host_network", "sandboxes", "want"),
    [
        (False, [], "False"),
        (False, [SandboxStatus("a", True, 1, 0, "10.0.0.2")], "True"),
        # Ready but without its pod IP: the network is not set up.
        (False, [SandboxStatus("a", True, 1, 0, "")], "False"),
        (True, [SandboxStatus("a", True, 1, 0, "", host_network=True)], "True"),
        # The pod's hostNetwork no longer matches the sandbox's.
        (True, [SandboxStatus("a", True, 1, 0, "10.0.0.2")], "False"),
        # The newest sandbox is down (an older ready one does not count).
        (False, [SandboxStatus("b", False, 2, 1), SandboxStatus("a", True, 1, 0, "10.0.0.2")], "False"),
        # Two ready sandboxes: the runtime manager starts over.
        (False, [SandboxStatus("b", True, 2, 1, "10.0.0.3"), SandboxStatus("a", True, 1, 0, "10.0.0.2")], "False"),
    ],
)  # fmt: skip
def test_it_follows_whether_the_sandbox_would_be_kept(
    host_network: bool, sandboxes: list[SandboxStatus], want: str
) -> None:
    assert condition(pod(host_network), sandboxes) == want


def test_absent_with_the_gate_off() -> None:
    ready = [SandboxStatus("a", True, 1, 0, "10.0.0.2")]
    assert condition(pod(), ready, ready_to_start=False) is None
