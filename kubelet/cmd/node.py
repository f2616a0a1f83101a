"""Assemble the node: CRI clients from Dependencies (or the configured
endpoints) and the Kubelet with its loops (RunKubelet / createAndInitKubelet).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from kubelet.cmd.kubelet import KubeletServer
from kubelet.dependencies import Dependencies

log = logging.getLogger("kubelet")


def build_cri(s: KubeletServer, deps: Dependencies) -> None:
    """Fill in the runtime and image services that the caller did not inject."""
    cfg = s.config
    if deps.runtime_service is None or deps.image_service is None:
        from kubelet.cri.remote import RemoteImageService, RemoteRuntimeService

        timeout = cfg.runtime_request_timeout
        if deps.runtime_service is None:
            deps.runtime_service = RemoteRuntimeService(cfg.container_runtime_endpoint, timeout)
        if deps.image_service is None:
            endpoint = cfg.image_service_endpoint or cfg.container_runtime_endpoint
            deps.image_service = RemoteImageService(endpoint, timeout)


async def start_node(
    s: KubeletServer,
    deps: Dependencies,
    name: str,
    stop: asyncio.Event,
    cleanups: list[Callable[[], Any]],
) -> Any:
    from kubelet.kubelet import Kubelet

    build_cri(s, deps)
    node_ip = s.flags.node_ip.split(",")[0].strip() or None
    k = Kubelet(
        s.config,
        name,
        s.flags.root_directory,
        deps.runtime_service,
        deps.image_service,
        node_ip=node_ip,
        recorder=deps.recorder,
    )
    if s.flags.run_once:
        return k

    task = asyncio.create_task(k.run(), name="kubelet")

    def on_done(t: asyncio.Task[None]) -> None:
        # The loops ending on their own is fatal: stop the process rather than
        # serve a node that no longer syncs.
        if not t.cancelled() and t.exception() is not None:
            log.error("kubelet loops failed", exc_info=t.exception())
            stop.set()

    task.add_done_callback(on_done)

    async def shutdown() -> None:
        await k.stop()
        try:
            await asyncio.wait_for(task, 30)
        except (TimeoutError, asyncio.CancelledError):
            task.cancel()
        except Exception:
            pass

    cleanups.append(shutdown)
    return k
