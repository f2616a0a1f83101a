"""POST /checkpoint/{namespace}/{pod}/{container} (ContainerCheckpoint,
server.go's checkpoint handler and Kubelet.CheckpointContainer upstream).

Behind the kubelet port's authentication and the nodes/checkpoint
authorization (auth.py), and only with the debugging handlers on, as
upstream. The pod and a container of that name in its spec must exist; the
running container is asked of the runtime with CRI CheckpointContainer, the
archive going to <root-dir>/checkpoints/checkpoint-<pod>_<ns>-<container>-
<RFC 3339 time>.tar. The answer is {"items": [<archive>]}; a runtime error is
a 500 naming it ("rpc error: code = Unimplemented desc = ..." for a runtime
without the method, such as containerd 1.6).
"""

from __future__ import annotations

import datetime
import logging
import os
from collections.abc import Callable

import orjson
from aiohttp import web

from kubelet.cri import errors as cri_errors
from kubelet.server import streaming
from kubelet.server.host import NodeView
from kubelet.types import container_list

log = logging.getLogger(__name__)

CHECKPOINTS_DIR = "checkpoints"


def _text(status: int, text: str) -> web.Response:
    return web.Response(status=status, text=text, content_type="text/plain")


def archive_name(pod_full_name: str, container: str, now: datetime.datetime) -> str:
    """checkpoint-<name>_<namespace>-<container>-<time.RFC3339>.tar"""
    stamp = now.astimezone().isoformat(timespec="seconds").replace("+00:00", "Z")
    return f"checkpoint-{pod_full_name}-{container}-{stamp}.tar"


def install(app: web.Application, node: Callable[[], NodeView], directory: str) -> None:
    """directory: <root-dir>/checkpoints (made 0700 when the kubelet starts)."""

    async def checkpoint(request: web.Request) -> web.Response:
        return await _checkpoint(request, node(), directory)

    app.router.add_post("/checkpoint/{namespace}/{pod}/{container}", checkpoint)


async def _checkpoint(request: web.Request, view: NodeView, directory: str) -> web.Response:
    ns, name, cname = (request.match_info[k] for k in ("namespace", "pod", "container"))
    pod = view.get_pod_by_name(ns, name)
    if pod is None:
        return _text(404, "pod does not exist")
    if container_list(pod, cname) is None:
        return _text(404, f"container {cname} does not exist")
    timeout = 0
    values = request.query.getall("timeout", [])
    if values:
        try:
            timeout = int(values[-1])  # the last one wins, as upstream
        except ValueError:
            return _text(404, "cannot parse value of timeout parameter")
    failed = f"checkpointing of {ns}/{name}/{cname} failed"
    rt = view.runtime_service
    if rt is None:
        return _text(500, f"{failed} (the container runtime is not available yet)")
    location = os.path.join(directory, archive_name(f"{name}_{ns}", cname, datetime.datetime.now()))
    # Names come from the API (DNS labels and subdomains); a static pod's are
    # checked too, but a path leaving the directory is never built.
    if os.path.dirname(location) != directory:
        return _text(400, f"{failed} (invalid name)")
    try:
        cid = await streaming.running_container(rt, str(pod["metadata"]["uid"]), cname)
        if cid is None:
            return _text(500, f"{failed} (container {cname} not found)")
        # The runtime gets the larger of this and the CRI request timeout.
        await rt.checkpoint_container(cid, location, timeout)
    except ValueError as err:
        return _text(500, f"{failed} ({err})")
    except cri_errors.CRIError as err:
        log.error("CheckpointContainer from runtime service failed: %s", err)
        code = streaming.grpc_code_name(err.code)
        return _text(500, f"{failed} (rpc error: code = {code} desc = {err.message})")
    log.info("Checkpointed container %s of pod %s/%s to %s", cname, ns, name, location)
    return web.Response(body=orjson.dumps({"items": [location]}), content_type="application/json")
