"""run(): from a validated KubeletServer and Dependencies to a serving node
(cmd/kubelet/app/server.go run / RunKubelet / startKubelet).
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import socket
from collections.abc import Callable
from typing import Any

import kubelet
from kubelet.apis.config.v1beta1 import encode
from kubelet.cmd.node import start_node
from kubelet.cmd.options import KubeletServer
from kubelet.dependencies import Dependencies
from kubelet.kubelet import Kubelet
from kubelet.server import server as httpserver
from kubelet.server.auth import ServerAuth
from kubelet.server.tls import TLSOptions, ensure_self_signed, server_context
from kubelet.util import flock, sdnotify
from kubelet.util.oom import OOMAdjuster, adjust_self
from kubelet.version import user_agent

log = logging.getLogger("kubelet")


class StartupError(Exception):
    """A fatal problem found while starting; the command exits 1 with it."""


def node_name(s: KubeletServer) -> str:
    # Upstream lowercases the hostname and the override alike.
    return (s.flags.hostname_override or socket.gethostname()).strip().lower()


def run_command(s: KubeletServer, deps: Dependencies | None = None) -> int:
    """Run the kubelet on uvloop until it is told to stop; returns the exit code."""
    import uvloop

    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        try:
            return runner.run(run(s, deps))
        except StartupError as err:
            log.error("%s", err)
            return 1


async def run(
    s: KubeletServer, deps: Dependencies | None = None, stop: asyncio.Event | None = None
) -> int:
    deps = deps or Dependencies()
    stop = stop or asyncio.Event()
    loop = asyncio.get_running_loop()
    cfg, flags = s.config, s.flags
    if kubelet.__impl__ != "native":
        log.warning("KUBELET_IMPL=%s: running the pure-Python reference kernels", kubelet.__impl__)
    for sig in (signal.SIGTERM, signal.SIGINT):
        try:
            loop.add_signal_handler(sig, stop.set)
        except (NotImplementedError, RuntimeError, ValueError):
            pass  # not the main thread (tests): the caller sets `stop`

    cleanups: list[Callable[[], Any]] = []
    try:
        if flags.lock_file_path:
            fd = await loop.run_in_executor(None, flock.acquire, flags.lock_file_path)
            cleanups.append(lambda: os.close(fd))
            log.info("Acquired lock file %s", flags.lock_file_path)
            if flags.exit_on_lock_contention:
                ino = flock.watch_for_contention(flags.lock_file_path, loop, stop.set)
                cleanups.append(ino.close)

        standalone = not flags.kubeconfig and not flags.bootstrap_kubeconfig
        if standalone:
            log.info("Standalone mode, no API client")
            if deps.recorder is None:
                from kubelet.events import EventRecorder

                deps.recorder = EventRecorder(node_name(s))  # events go to the log
        else:
            build_clients(s, deps)

        if deps.auth is None:
            deps.auth = build_auth(s, deps.kube_client, node_name(s))
        adjust_self(deps.oom_adjuster or OOMAdjuster(), cfg.oom_score_adj)

        name = node_name(s)
        node = await start_node(s, deps, name, stop, cleanups)

        if flags.run_once:
            return await _run_once(node)

        await _start_servers(s, deps, name, node, cleanups)
        if sdnotify.notify("READY=1"):
            log.info("Notified the service manager: READY=1")
        log.info("Kubelet %s started on node %s", kubelet.__version__, name)
        await stop.wait()
        log.info("Shutting down")
        return 0
    finally:
        for fn in reversed(cleanups):
            try:
                res = fn()
                if asyncio.iscoroutine(res):
                    await res
            except Exception:
                log.exception("cleanup failed")


def build_clients(s: KubeletServer, deps: Dependencies) -> None:
    """The three API clients, as upstream: the main one (kubeAPIQPS/Burst), the event
    client (eventRecordQPS/eventBurst) and the heartbeat client (no rate limit,
    nodeStatusUpdateFrequency as its timeout). Injected ones are kept."""
    from kubelet.client.rest import APIClient, load_kubeconfig
    from kubelet.events import EventRecorder

    cfg, flags = s.config, s.flags
    if flags.bootstrap_kubeconfig and not flags.kubeconfig:
        raise StartupError(
            "--bootstrap-kubeconfig (TLS bootstrapping) is not supported by this kubelet; "
            "give a --kubeconfig with a client certificate or token"
        )
    if deps.kube_client is None:
        try:
            conn = load_kubeconfig(flags.kubeconfig)
        except ValueError as err:
            raise StartupError(str(err)) from err
        agent = user_agent()
        deps.kube_client = APIClient(conn, cfg.kube_api_qps, cfg.kube_api_burst, user_agent=agent)
        if deps.event_client is None:
            deps.event_client = APIClient(
                conn, cfg.event_record_qps, cfg.event_burst, user_agent=agent
            )
        if deps.heartbeat_client is None:
            deps.heartbeat_client = APIClient(
                conn, 0, 1, timeout=cfg.node_status_update_frequency, user_agent=agent
            )
    if deps.recorder is None:
        deps.recorder = EventRecorder(node_name(s), deps.event_client or deps.kube_client)
    log.info("Cluster mode: API server %s", getattr(deps.kube_client.conn, "host", "?"))


def build_auth(s: KubeletServer, client: Any, node: str) -> ServerAuth:
    cfg = s.config
    has_client = client is not None
    if cfg.authorization.mode == "Webhook" and not has_client:
        raise StartupError(
            "no client provided, cannot use webhook authorization "
            "(use --authorization-mode=AlwaysAllow in standalone mode)"
        )
    if cfg.authentication.webhook.enabled and not has_client:
        log.warning(
            "no API client: webhook (bearer token) authentication is off; only client "
            "certificates%s are accepted",
            " and anonymous requests" if cfg.authentication.anonymous.enabled else "",
        )
    return ServerAuth(
        anonymous_enabled=cfg.authentication.anonymous.enabled,
        authorization_mode=cfg.authorization.mode,
        x509_enabled=bool(cfg.authentication.x509.client_ca_file),
        client=client,
        node_name=node,
        webhook_authn=cfg.authentication.webhook.enabled,
        authn_ttl=cfg.authentication.webhook.cache_ttl,
        authorized_ttl=cfg.authorization.webhook.cache_authorized_ttl,
        unauthorized_ttl=cfg.authorization.webhook.cache_unauthorized_ttl,
    )


async def _run_once(node: Kubelet) -> int:
    results = await node.run_once()
    failed = 0
    for pod in results:
        meta = pod.get("metadata", {})
        phase = pod.get("status", {}).get("phase", "Unknown")
        log.info("runonce: pod %s/%s is %s", meta.get("namespace"), meta.get("name"), phase)
        failed += phase == "Failed"
    return 1 if failed else 0


async def _start_servers(
    s: KubeletServer,
    deps: Dependencies,
    name: str,
    node: Kubelet,
    cleanups: list[Callable[[], Any]],
) -> None:
    cfg, flags = s.config, s.flags
    from kubelet.metrics import REGISTRY

    registries = [REGISTRY]

    def view() -> httpserver.NodeView:
        return node

    if cfg.healthz_port > 0:
        r = await httpserver.serve(
            httpserver.healthz_app(view), cfg.healthz_bind_address, cfg.healthz_port
        )
        cleanups.append(r.cleanup)
    if cfg.enable_server:
        tls = deps.tls_options
        if tls is None:
            cert, key = cfg.tls_cert_file, cfg.tls_private_key_file
            if not cert or not key:
                ips = [ip.strip() for ip in flags.node_ip.split(",") if ip.strip()]
                cert, key = ensure_self_signed(flags.cert_directory, name, ips)
            tls = TLSOptions(cert, key, cfg.authentication.x509.client_ca_file)
            deps.tls_options = tls
        assert deps.auth is not None  # built by run() before the servers start
        app = httpserver.kubelet_app(view, lambda: encode(cfg), registries, deps.auth)
        r = await httpserver.serve(app, cfg.address, cfg.port, server_context(tls))
        cleanups.append(r.cleanup)
        if cfg.read_only_port > 0:
            r = await httpserver.serve(
                httpserver.read_only_app(view, registries), cfg.address, cfg.read_only_port
            )
            cleanups.append(r.cleanup)
