"""What the volume tests share: the volume manager on a fake clock with a
fake plugin, the pods it mounts for, and an API server fake that keeps the
node status patches (volumesInUse, device resources) the kubelet sends."""

from __future__ import annotations

import asyncio
import os
import shutil
from pathlib import Path
from typing import Any

from kubelet.nodestatus.machine import MachineInfo
from kubelet.util.clock import FakeClock
from kubelet.volume import VolumeError, VolumeHost
from kubelet.volumemanager.manager import VolumeManagerImpl


class FakePlugin:
    """Serves volumes whose spec has `key`; makes its dir and a file in it."""

    def __init__(self, name: str = "test/fake", key: str = "fake", requires_remount: bool = False):
        self.name = name
        self.key = key
        self.requires_remount = requires_remount
        self.read_only = False
        self.set_ups: list[tuple[str, str]] = []
        self.tear_downs: list[tuple[str, str]] = []
        self.fail: dict[str, str | VolumeError] = {}  # volume name -> error
        self.gates: dict[str, asyncio.Event] = {}  # volume name -> wait for it

    def can_support(self, spec: dict[str, Any]) -> bool:
        return self.key in spec

    async def set_up(self, pod: dict[str, Any], spec: dict[str, Any], dir: str) -> None:
        self.set_ups.append((pod["metadata"]["uid"], spec["name"]))
        gate = self.gates.get(spec["name"])
        if gate is not None:
            await gate.wait()
        if spec["name"] in self.fail:
            err = self.fail[spec["name"]]
            raise err if isinstance(err, VolumeError) else VolumeError(err)
        os.makedirs(dir, exist_ok=True)
        with open(os.path.join(dir, "data"), "w") as f:
            f.write(spec["name"])

    async def tear_down(self, pod_uid: str, spec_name: str, dir: str) -> None:
        self.tear_downs.append((pod_uid, spec_name))
        if spec_name in self.fail:
            raise VolumeError(str(self.fail[spec_name]))
        shutil.rmtree(dir, ignore_errors=True)


def mkpod(uid: str, *volumes: dict[str, Any], name: str | None = None) -> dict[str, Any]:
    return {
        "metadata": {"uid": uid, "name": name or f"pod-{uid}", "namespace": "ns"},
        "spec": {"containers": [{"name": "c"}], "volumes": list(volumes)},
    }


class Env:
    def __init__(self, root: Path, *plugins: Any) -> None:
        self.root = root
        self.clock = FakeClock()
        self.ready: list[str] = []
        self.events: list[tuple[dict[str, str], str, str, str]] = []
        self.plugins = list(plugins) or [FakePlugin()]
        self.mgr = VolumeManagerImpl(
            VolumeHost(str(root), "node1"),
            self.plugins,
            on_pod_ready=self.ready.append,
            recorder=lambda *a: self.events.append(a),
            clock=self.clock,
        )

    @property
    def plugin(self) -> FakePlugin:
        return self.plugins[0]

    async def settle(self) -> None:
        """Reconcile until no operation is left running."""
        for _ in range(200):
            self.mgr.reconcile()
            await asyncio.sleep(0)
            if not self.mgr.ops._running and not self.mgr._dirty:
                # executor work (teardown cleanup) needs real time
                return
            await asyncio.sleep(0.001)
        raise AssertionError("operations did not settle")

    async def step(self, seconds: float) -> None:
        self.clock.step(seconds)
        await self.settle()

    def messages(self) -> list[str]:
        return [e[3] for e in self.events]


MACHINE = MachineInfo(2, 1 << 30, "m", "s", "b", "k", "os", "amd64")


class FakeAPI:
    def __init__(self) -> None:
        self.status_patches: list[dict[str, Any]] = []

    async def create(self, path: str, obj: Any) -> Any:
        return {**obj, "metadata": {**obj["metadata"], "uid": "node-uid"}}

    async def patch(self, path: str, body: Any, **kw: Any) -> Any:
        self.status_patches.append(body["status"])
        return {"metadata": {"name": "n"}, "status": body["status"]}
