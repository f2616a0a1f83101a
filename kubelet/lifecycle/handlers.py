"""Container lifecycle hooks: postStart and preStop handlers (pkg/kubelet/lifecycle/handlers.go).

A handler is one of exec (CRI ExecSync in the container), httpGet (a GET to
the pod, by default at its IP) or sleep. run() answers None when the hook
succeeded, or upstream's failure message; the caller decides what a failure
means (postStart: the container is killed; preStop: an event, then the stop).
The runner keeps no per-call state: every pod worker shares it.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

import aiohttp
import yarl

from kubelet.cri import errors
from kubelet.cri.api import api_pb2 as pb
from kubelet.events import Recorder
from kubelet.lifecycle.metrics import (
    LIFECYCLE_HANDLER_HTTP_FALLBACKS,
    SLEEP_ACTION_TERMINATED_EARLY,
)
from kubelet.probe.dial import join_host_port
from kubelet.probe.http import HTTPGetter, RedirectError
from kubelet.types import (
    Container,
    HTTPGetAction,
    IntOrString,
    LifecycleHandler,
    Pod,
    name,
    namespace,
    object_ref,
    uid,
)

log = logging.getLogger(__name__)

USER_AGENT = "kube-lifecycle/1.34"


class CommandRunner(Protocol):
    """Runs a command in a container (the CRI runtime's ExecSync)."""

    async def exec_sync(
        self, container_id: str, cmd: list[str], timeout: float
    ) -> pb.ExecSyncResponse: ...


PodIPs = Callable[[Pod], Awaitable[list[str]]]


class HookError(Exception):
    """A handler that could not run or did not succeed (str: the error part of the message)."""


def format_pod(pod: Pod) -> str:
    return f"{name(pod)}_{namespace(pod)}({uid(pod)})"


def go_quote(s: str) -> str:
    """Go's %q for a string (close enough: JSON escapes for control characters)."""
    return json.dumps(s, ensure_ascii=False)


def go_list(items: list[Any]) -> str:
    """Go's %v for a []string: [a b c]."""
    return "[" + " ".join(str(i) for i in items) + "]"


def resolve_port(port: IntOrString | None, container: Container) -> int:
    """An IntOrString port: a number, a numeric string, or a named port of the container."""
    if isinstance(port, int):
        n = port
    elif isinstance(port, str) and port.isdigit():
        n = int(port)
    else:
        for p in container.get("ports") or []:
            if p.get("name") == port:
                return int(p["containerPort"])
        raise HookError(f"couldn't find port: {port} in {container.get('name')}")
    if not 0 < n < 65536:
        raise HookError(f"invalid port number: {n}")
    return n


class HandlerRunner:
    def __init__(
        self,
        runner: CommandRunner,
        pod_ips: PodIPs,
        recorder: Recorder | None = None,
        http: HTTPGetter | None = None,
    ) -> None:
        self.runner = runner
        # The pod's IPs from the runtime (an httpGet hook without a host goes there).
        self.pod_ips = pod_ips
        self.recorder = recorder
        # A connection per request, nothing one pod's hooks can use up (kubelet/probe).
        self.http = http or HTTPGetter()

    async def close(self) -> None:
        await self.http.close()

    async def run(
        self,
        container_id: str,
        pod: Pod,
        container: Container,
        handler: LifecycleHandler,
        timeout: float = 0,
    ) -> str | None:
        """Run one hook; None on success, else the message upstream reports.
        timeout: seconds for an exec hook (0: none, as upstream's postStart)."""
        cname = container.get("name", "")
        if (ex := handler.get("exec")) is not None:
            cmd = list(ex.get("command") or [])
            try:
                await self._exec(container_id, cmd, timeout)
            except _ExecFailed as f:
                return (
                    f"Exec lifecycle hook ({go_list(cmd)}) for Container {go_quote(cname)} "
                    f"in Pod {go_quote(format_pod(pod))} failed - error: {f.error}, "
                    f"message: {go_quote(f.output)}"
                )
            return None
        if (h := handler.get("httpGet")) is not None:
            try:
                await self._http_get(pod, container, h)
            except HookError as err:
                return (
                    f"HTTP lifecycle hook ({h.get('path', '')}) for Container "
                    f"{go_quote(cname)} in Pod {go_quote(format_pod(pod))} failed - "
                    f"error: {err}"
                )
            return None
        if (sl := handler.get("sleep")) is not None:
            # Runs to its end: a caller that gives up cancels the task
            # (upstream: "container terminated before sleep hook finished").
            try:
                await asyncio.sleep(max(0, int(sl.get("seconds") or 0)))
            except asyncio.CancelledError:
                SLEEP_ACTION_TERMINATED_EARLY.inc()
                raise
            return None
        return f"Cannot run handler: invalid handler: {handler}"

    # ------------------------------------------------------------------ exec
    async def _exec(self, cid: str, cmd: list[str], timeout: float) -> None:
        try:
            resp = await self.runner.exec_sync(cid, cmd, timeout)
        except errors.CRIError as err:
            # As the Go CRI client prints a gRPC status.
            code = err.code.name.title().replace("_", "")
            raise _ExecFailed(f"rpc error: code = {code} desc = {err.message}", "") from err
        output = (resp.stdout + resp.stderr).decode(errors="replace")
        if resp.exit_code != 0:
            stderr = resp.stderr.decode(errors="replace")
            raise _ExecFailed(
                f"command '{' '.join(cmd)}' exited with {resp.exit_code}: {stderr}", output
            )

    # ------------------------------------------------------------------ http
    async def _http_get(self, pod: Pod, container: Container, h: HTTPGetAction) -> None:
        host = h.get("host") or ""
        if not host:
            ips = await self.pod_ips(pod)
            if not ips:
                raise HookError("failed to find networking container: no pod IP")
            host = ips[0]
        scheme = (h.get("scheme") or "HTTP").lower()
        port = resolve_port(h.get("port"), container)
        path = h.get("path") or ""
        if not path.startswith("/"):
            path = "/" + path
        hostport = join_host_port(host, port)
        url = yarl.URL(f"{scheme}://{hostport}{path}", encoded=False)
        headers: dict[str, str] = {}
        for hd in h.get("httpHeaders") or []:
            headers[hd["name"]] = hd["value"]
        lower = {k.lower() for k in headers}
        if "user-agent" not in lower:
            headers["User-Agent"] = USER_AGENT
        if "accept" not in lower:
            headers["Accept"] = "*/*"
        elif not next(v for k, v in headers.items() if k.lower() == "accept"):
            headers = {k: v for k, v in headers.items() if k.lower() != "accept"}
        try:
            await self._get(uid(pod), url, headers)
        except _HTTPResponseToHTTPS:
            # A plain-HTTP server behind an https hook: retried over HTTP, as upstream.
            headers.pop("Authorization", None)
            await self._get(uid(pod), url.with_scheme("http"), headers)
            LIFECYCLE_HANDLER_HTTP_FALLBACKS.inc()
            if self.recorder is not None:
                self.recorder.event(
                    object_ref(pod),
                    "Warning",
                    "LifecycleHTTPFallback",
                    f"request to HTTPS lifecycle hook {hostport} got HTTP response, "
                    "retry with HTTP succeeded",
                )

    async def _get(self, owner: str, url: yarl.URL, headers: dict[str, str]) -> None:
        """GET following redirects on the same host only (RedirectChecker(false));
        any response is a success, as upstream."""
        try:
            await self.http.get(owner, url, headers)
        except aiohttp.ClientError as err:
            # The TLS handshake is part of aiohttp's connect: a plain-HTTP answer
            # to it comes as a connector error, so it is looked at first.
            if url.scheme == "https" and _looks_like_plain_http(err):
                raise _HTTPResponseToHTTPS() from err
            if isinstance(err, aiohttp.ClientConnectorError):
                raise HookError(f'Get "{url}": dial tcp {_dial_error(err)}') from err
            raise HookError(f'Get "{url}": {err}') from err
        except RedirectError as err:
            raise HookError(str(err)) from err
        except OSError as err:  # a host name that did not resolve
            raise HookError(f'Get "{url}": dial tcp {err}') from err


class _ExecFailed(Exception):
    def __init__(self, error: str, output: str) -> None:
        super().__init__(error)
        self.error = error
        self.output = output


class _HTTPResponseToHTTPS(Exception):
    pass


# What OpenSSL says when the answer to its hello is plain HTTP ("HTTP/1.1 ..."
# read as a TLS record): upstream falls back only on an HTTP answer, never on
# other TLS failures (a refused handshake must not send the request in clear).
_PLAIN_HTTP_ANSWER = ("wrong version number", "record layer failure", "packet length too long")


def _looks_like_plain_http(err: Exception) -> bool:
    text = str(err).lower()
    return any(s in text for s in _PLAIN_HTTP_ANSWER)


def _dial_error(err: aiohttp.ClientConnectorError) -> str:
    os_err = err.os_error
    what = "connection refused" if isinstance(os_err, ConnectionRefusedError) else str(os_err)
    return f"{join_host_port(err.host, err.port or 0)}: connect: {what}"
