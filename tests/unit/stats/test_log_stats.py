"""kubelet_container_log_filesystem_used_bytes: each container's log files, from
the last measuring pass."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry

from kubelet.stats.logs import ContainerLogStats

NAME = "kubelet_container_log_filesystem_used_bytes"


def mkpod(ns: str, name: str, uid: str) -> dict[str, Any]:
    return {"metadata": {"namespace": ns, "name": name, "uid": uid}}


def value(reg: CollectorRegistry, **labels: str) -> float | None:
    return reg.get_sample_value(NAME, labels)


async def test_each_containers_logs_are_served_from_the_last_pass(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    web = logs / "default_web_u1" / "app"
    web.mkdir(parents=True)
    (web / "0.log").write_bytes(os.urandom(64 * 1024))
    (web / "1.log.20260101-000000.gz").write_bytes(os.urandom(8 * 1024))  # rotated: counted
    side = logs / "default_web_u1" / "sidecar"
    side.mkdir()
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (outside / "big").write_bytes(os.urandom(256 * 1024))
    os.symlink(outside, logs / "default_web_u1" / "linked")  # never followed
    os.symlink(outside / "big", side / "0.log")  # a link is no log file
    pods = [mkpod("default", "web", "u1"), mkpod("default", "nologs", "u2")]
    stats = ContainerLogStats(lambda: pods, str(logs), 60)
    reg = CollectorRegistry()
    reg.register(stats)
    assert value(reg, uid="u1", namespace="default", pod="web", container="app") is None
    await stats.refresh()
    app = value(reg, uid="u1", namespace="default", pod="web", container="app")
    assert app is not None and 72 * 1024 <= app < 128 * 1024
    assert value(reg, uid="u1", namespace="default", pod="web", container="sidecar") == 0
    assert value(reg, uid="u1", namespace="default", pod="web", container="linked") is None
    (web / "0.log").write_bytes(os.urandom(512 * 1024))
    assert value(reg, uid="u1", namespace="default", pod="web", container="app") == app  # cached
    await stats.refresh()
    grown = value(reg, uid="u1", namespace="default", pod="web", container="app")
    assert grown is not None and grown >= 512 * 1024
    # A pod removed from the node goes at once, not at the next pass.
    stats.forget("u1")
    assert value(reg, uid="u1", namespace="default", pod="web", container="app") is None
    await stats.refresh()
    assert value(reg, uid="u1", namespace="default", pod="web", container="app") is not None
    pods.clear()
    await stats.refresh()
    assert value(reg, uid="u1", namespace="default", pod="web", container="app") is None


async def test_a_negative_period_measures_nothing(tmp_path: Path) -> None:
    asked: list[int] = []

    def pods() -> list[dict[str, Any]]:
        asked.append(1)
        return []

    stats = ContainerLogStats(pods, str(tmp_path), -1)
    await asyncio.wait_for(stats.run(asyncio.Event()), 5)
    assert asked == []
