"""Regular containers start one after the other in the pod's order, and a
postStart hook holds back the containers after its own (upstream's syncPod;
node e2e "Containers Lifecycle ... multiple containers and a PostStart hook")."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from kubelet.config.common import apply_defaults
from kubelet.cri.fake import FakeImageService, FakeRuntimeService
from kubelet.kuberuntime.kuberuntime_manager import RuntimeManager
from kubelet.lifecycle.handlers import HandlerRunner
from kubelet.testing.helpers import standalone_runtime_helper


class GatedHooks(HandlerRunner):
    """postStart hooks that finish only when the test lets them."""

    def __init__(self, rt: FakeRuntimeService) -> None:
        super().__init__(rt, self._no_ips)
        self.entered = asyncio.Event()
        self.release = asyncio.Event()

    @staticmethod
    async def _no_ips(_pod: Any) -> list[str]:
        return []

    async def run(
        self,
        container_id: str,
        pod: Any,
        container: dict[str, Any],
        handler: dict[str, Any],
        timeout: float = 0,
    ) -> str | None:
        self.entered.set()
        await self.release.wait()
        return None


async def test_a_post_start_hook_holds_back_the_next_container(tmp_path: Path) -> None:
    hook = {"postStart": {"exec": {"command": ["true"]}}}
    p = apply_defaults(
        {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
         "spec": {"containers": [{"name": "one", "image": "busybox:1.36", "lifecycle": hook},
                                 {"name": "two", "image": "busybox:1.36"}]}},
        "/m/p.yaml", "file", "n1",
    )  # fmt: skip
    rt = FakeRuntimeService()
    hooks = GatedHooks(rt)
    m = RuntimeManager(rt, FakeImageService(["busybox:1.36"]),
                       standalone_runtime_helper(str(tmp_path)), str(tmp_path), hooks=hooks)  # fmt: skip
    sync = asyncio.create_task(m.sync_pod(p, await m.get_pod_status(p["metadata"]["uid"])))
    await hooks.entered.wait()
    await asyncio.sleep(0.2)  # time enough for a concurrent start to show
    started = [rt.containers[a[0]].metadata.name for a in rt.called("start_container")]
    assert started == ["one"]
    hooks.release.set()
    assert (await sync).ok
    started = [rt.containers[a[0]].metadata.name for a in rt.called("start_container")]
    assert started == ["one", "two"]
