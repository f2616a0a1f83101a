"""A runtime manager on the fake CRI services, as the unit tests drive it
without the rest of the node, and the pods and containers they give it."""

from __future__ import annotations

from typing import Any

from kubelet.config.common import apply_defaults
from kubelet.kuberuntime.kuberuntime_manager import RuntimeManager
from kubelet.testing.helpers import standalone_runtime_helper


def pod(containers: list[dict[str, Any]], **spec: Any) -> dict[str, Any]:
    p = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p"},
        "spec": {"containers": containers, **spec},
    }
    return apply_defaults(p, "/m/p.yaml", "file", "n1")


def c(name: str, image: str = "busybox:1.36", **kw: Any) -> dict[str, Any]:
    return {"name": name, "image": image, **kw}


def manager(tmp_path, rt, img, **kw: Any) -> RuntimeManager:  # type: ignore[no-untyped-def]
    helper = standalone_runtime_helper(str(tmp_path))
    return RuntimeManager(rt, img, helper, str(tmp_path), **kw)


async def status(m: RuntimeManager, p: dict[str, Any]):  # type: ignore[no-untyped-def]
    return await m.get_pod_status(p["metadata"]["uid"])


class RecordingRecorder:
    def __init__(self) -> None:
        self.events: list[tuple[dict[str, str], str, str, str]] = []

    def event(self, ref: dict[str, str], etype: str, reason: str, msg: str) -> None:
        self.events.append((ref, etype, reason, msg))
