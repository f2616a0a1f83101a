"""run(): from a validated KubeletServer and Dependencies to a serving node
(cmd/kubelet/app/server.go run / RunKubelet / startKubelet).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import socket
import ssl
from collections.abc import Coroutine
from typing import Any

import kubelet
from kubelet import watchdog
from kubelet.apis.config.v1beta1 import document
from kubelet.certificate.manager import Manager as CertManager
from kubelet.certificate.store import KeyPair
from kubelet.client.certificate import CertificateSource
from kubelet.client.rest import APIClient
from kubelet.cm.interfaces import ContainerManagerError
from kubelet.cmd.node import Cleanup, start_node
from kubelet.cmd.options import KubeletServer
from kubelet.credentialprovider.plugin.plugins import PluginRegistrationError
from kubelet.dependencies import Dependencies
from kubelet.features import Feature, FeatureGate
from kubelet.kubelet import Kubelet
from kubelet.server import server as httpserver
from kubelet.server.auth import ServerAuth
from kubelet.server.tls import (
    RotatingServerContext,
    TLSOptions,
    ensure_self_signed,
    server_context,
)
from kubelet.userns.idrange import IDRangeError
from kubelet.userns.userns_manager import UsernsError
from kubelet.util import flock, memdebug, sdnotify
from kubelet.util.oom import OOMAdjuster, adjust_self
from kubelet.util.tlsconfig import TLSPolicy
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
    cfg = s.config
    if kubelet.__impl__ != "native":
        log.warning("KUBELET_IMPL=%s: running the pure-Python reference kernels", kubelet.__impl__)
    for sig in (signal.SIGTERM, signal.SIGINT):
        try:
            loop.add_signal_handler(sig, stop.set)
        except (NotImplementedError, RuntimeError, ValueError):
            pass  # not the main thread (tests): the caller sets `stop`

    cleanups: list[Cleanup] = []
    failed = asyncio.Event()  # set by a loop that ends the process with an error
    # The checks the systemd watchdog runs: none until the sync loop exists, as
    # upstream starts its watchdog before the kubelet and adds them later.
    watched: dict[str, watchdog.HealthCheck] = {}
    try:
        await _process_guards(s, stop, watched, cleanups)
        await _api_clients(s, deps, stop, failed, cleanups)
        if deps.auth is None:
            deps.auth = build_auth(s, deps.kube_client, node_name(s))
        adjust_self(deps.oom_adjuster or OOMAdjuster(), cfg.oom_score_adj)

        name = node_name(s)
        try:
            node = await start_node(s, deps, name, stop, cleanups)
        except ContainerManagerError as err:
            raise StartupError(f"failed to run Kubelet: {err}") from err
        except PluginRegistrationError as err:
            raise StartupError(f"Failed to register CRI auth plugins: {err}") from err
        except (IDRangeError, UsernsError) as err:
            raise StartupError(f"failed to create kubelet: {err}") from err
        memdebug.install(loop, node)  # KUBELET_MEMDEBUG only

        if cfg.run_once:
            return await _run_once(node)

        watched["syncloop"] = node.host.healthz_checks()["syncloop"]
        await _start_servers(s, deps, name, node, cleanups)
        try:
            if sdnotify.notify("READY=1"):
                log.info("Notified the service manager: READY=1")
        except sdnotify.NotifyError as err:
            log.error("%s", err)
        log.info("Kubelet %s started on node %s", kubelet.__version__, name)
        await stop.wait()
        log.info("Shutting down")
        return 1 if failed.is_set() else 0
    finally:
        await _run_cleanups(cleanups)


async def _process_guards(
    s: KubeletServer,
    stop: asyncio.Event,
    watched: dict[str, watchdog.HealthCheck],
    cleanups: list[Cleanup],
) -> None:
    """The systemd watchdog and the lock file, before anything else starts."""
    if FeatureGate(s.config.feature_gates).enabled(Feature.SystemdWatchdog):
        try:
            wd = watchdog.HealthChecker.from_environment(lambda: watched)
        except watchdog.WatchdogError as err:
            raise StartupError(f"create health checker: {err}") from err
        _spawn(wd.run(stop), "systemd-watchdog", cleanups)
    path = s.flags.lock_file_path
    if path:
        loop = asyncio.get_running_loop()
        fd = await loop.run_in_executor(None, flock.acquire, path)
        cleanups.append(lambda: os.close(fd))
        log.info("Acquired lock file %s", path)
        if s.flags.exit_on_lock_contention:
            ino = flock.watch_for_contention(path, loop, stop.set)
            cleanups.append(ino.close)


async def _api_clients(
    s: KubeletServer,
    deps: Dependencies,
    stop: asyncio.Event,
    failed: asyncio.Event,
    cleanups: list[Cleanup],
) -> None:
    """Standalone: no client, events to the log. Otherwise the client
    certificates (bootstrapped and rotated when configured) and the clients."""
    if not s.flags.kubeconfig and not s.flags.bootstrap_kubeconfig:
        log.info("Standalone mode, no API client")
        if s.config.rotate_certificates:
            log.warning("rotateCertificates is ignored in standalone mode: no API server")
        if deps.recorder is None:
            from kubelet.events import EventRecorder

            deps.recorder = EventRecorder(node_name(s))  # events go to the log
        return
    cert_source = await client_certificates(s, deps, stop, cleanups)
    build_clients(s, deps, cert_source)
    if isinstance(cert_source, CertManager):
        _spawn(cert_source.run(stop), "client-certificate-manager", cleanups)
        _spawn(
            exit_on_expired_client_certificate(cert_source, stop, failed),
            "client-certificate-expiry",
            cleanups,
        )


async def _run_cleanups(cleanups: list[Cleanup]) -> None:
    for fn in reversed(cleanups):
        try:
            res = fn()
            if asyncio.iscoroutine(res):
                await res
        except Exception:  # every cleanup runs, whatever the one before did
            log.exception("cleanup failed")


def _spawn(coro: Coroutine[Any, Any, None], name: str, cleanups: list[Cleanup]) -> None:
    task = asyncio.create_task(coro, name=name)

    async def cancel() -> None:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task

    cleanups.append(cancel)


async def _bootstrap_until_stopped(s: KubeletServer, name: str, stop: asyncio.Event) -> None:
    """TLS bootstrapping retries while the API server is away; a signal must
    still stop the kubelet meanwhile."""
    from kubelet.certificate import bootstrap

    flags = s.flags
    task = asyncio.create_task(
        bootstrap.load_client_cert(
            flags.kubeconfig, flags.bootstrap_kubeconfig, flags.cert_directory, name
        )
    )
    stopped = asyncio.create_task(stop.wait())
    await asyncio.wait({task, stopped}, return_when=asyncio.FIRST_COMPLETED)
    stopped.cancel()
    if not task.done():
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        raise StartupError("stopped while bootstrapping the client certificate")
    try:
        task.result()
    except bootstrap.BootstrapError as err:
        raise StartupError(f"failed to run Kubelet: {err}") from err


async def client_certificates(
    s: KubeletServer,
    deps: Dependencies,
    stop: asyncio.Event,
    cleanups: list[Cleanup],
) -> CertificateSource | None:
    """TLS bootstrapping (--bootstrap-kubeconfig) and, with rotateCertificates,
    the client certificate manager the API clients read their pair from."""
    from kubelet.certificate import bootstrap
    from kubelet.certificate.kubelet import new_client_manager
    from kubelet.client.kubeconfig import load_kubeconfig
    from kubelet.client.rest import APIClient

    cfg, flags = s.config, s.flags
    if deps.kube_client is not None:
        return None  # injected clients (tests) bring their own credentials
    if flags.bootstrap_kubeconfig and not flags.kubeconfig:
        raise StartupError("--bootstrap-kubeconfig needs --kubeconfig: where to write the result")
    name = node_name(s)
    if flags.bootstrap_kubeconfig:
        await _bootstrap_until_stopped(s, name, stop)
    if not cfg.rotate_certificates:
        return None
    try:
        conn = load_kubeconfig(flags.kubeconfig)
        bootstrap.check_cert_dir(flags.cert_directory)
    except (ValueError, bootstrap.BootstrapError) as err:
        raise StartupError(str(err)) from err
    fallback: list[APIClient] = []

    def csr_client(current: KeyPair | None) -> APIClient | None:
        # The node's own identity while its certificate is valid; once expired,
        # the bootstrap credentials (if any), as upstream.
        if current is not None or not flags.bootstrap_kubeconfig:
            return deps.kube_client
        if not fallback:
            try:
                fallback.append(APIClient(load_kubeconfig(flags.bootstrap_kubeconfig), 5, 10))
            except ValueError as err:
                log.error("unable to load bootstrap kubeconfig: %s", err)
                return None
            cleanups.append(fallback[0].close)
        return fallback[0]

    try:
        mgr = new_client_manager(
            flags.cert_directory, name, conn.cert_file or "", conn.key_file or "", csr_client
        )
    except (OSError, ValueError) as err:
        raise StartupError(f"failed to initialize client certificate manager: {err}") from err
    if mgr.current() is None:
        log.warning(
            "rotateCertificates: no valid client certificate in %s or %s; requests will be "
            "refused until one is issued",
            flags.kubeconfig,
            flags.cert_directory,
        )
    return mgr


# How long the kubelet goes on without a valid client certificate before it
# exits so that its supervisor restarts it into bootstrapping (upstream: 5 min).
CLIENT_CERT_EXIT_AFTER = 300.0


async def exit_on_expired_client_certificate(
    mgr: CertManager,
    stop: asyncio.Event,
    failed: asyncio.Event,
    exit_after: float = CLIENT_CERT_EXIT_AFTER,
    period: float = 10.0,
) -> None:
    """Stop the kubelet with an error once its client certificate has been
    missing or expired for `exit_after` while the API server answers; only
    complain while the server does not (a restart would not help)."""
    last_ok = mgr.clock.time()
    complained = False
    while not stop.is_set():
        now = mgr.clock.time()
        if mgr.current() is not None:
            last_ok, complained = now, False
        elif now - last_ok > exit_after:
            if mgr.server_healthy:
                log.error(
                    "The currently active client certificate has expired and the server is "
                    "responsive, exiting."
                )
                failed.set()
                stop.set()
                return
            if not complained:
                log.error(
                    "The currently active client certificate has expired, but the server is "
                    "not responsive. A restart may be necessary to retrieve new initial "
                    "credentials."
                )
                complained = True
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), period)


def build_clients(
    s: KubeletServer, deps: Dependencies, cert_source: CertificateSource | None = None
) -> None:
    """The three API clients, as upstream: the main one (kubeAPIQPS/Burst), the event
    client (eventRecordQPS/eventBurst) and the heartbeat client (no rate limit,
    nodeStatusUpdateFrequency as its timeout). Injected ones are kept. With a
    `cert_source` (rotateCertificates) all three take their client pair from it."""
    from kubelet.client.kubeconfig import load_kubeconfig
    from kubelet.client.rest import APIClient
    from kubelet.events import EventRecorder

    cfg, flags = s.config, s.flags
    if deps.kube_client is None:
        try:
            conn = load_kubeconfig(flags.kubeconfig)
        except ValueError as err:
            raise StartupError(str(err)) from err
        agent = user_agent()
        src = cert_source
        deps.kube_client = APIClient(
            conn, cfg.kube_api_qps, cfg.kube_api_burst, user_agent=agent, cert_source=src
        )
        if deps.event_client is None:
            deps.event_client = APIClient(
                conn, cfg.event_record_qps, cfg.event_burst, user_agent=agent, cert_source=src
            )
        if deps.heartbeat_client is None:
            deps.heartbeat_client = APIClient(
                conn,
                0,
                1,
                timeout=cfg.node_status_update_frequency,
                user_agent=agent,
                cert_source=src,
            )
    if deps.recorder is None:
        deps.recorder = EventRecorder(node_name(s), deps.event_client or deps.kube_client)
    log.info("Cluster mode: API server %s", getattr(deps.kube_client.conn, "host", "?"))


def build_auth(s: KubeletServer, client: APIClient | None, node: str) -> ServerAuth:
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
        fine_grained_authz=FeatureGate(cfg.feature_gates).enabled(Feature.KubeletFineGrainedAuthz),
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
    cleanups: list[Cleanup],
) -> None:
    cfg = s.config
    from kubelet import metrics
    from kubelet.cm.cgroup_manager import cgroup_mounts
    from kubelet.stats.volumes import VolumeStatsCollector
    from kubelet.version import KUBERNETES_VERSION

    info = metrics.NodeInfo(name, cgroup_mounts()[0], KUBERNETES_VERSION,
                            node.node.features.metric_rows())  # fmt: skip
    state = metrics.KubeletStateCollector(node.pod_counts, info)
    metrics.REGISTRY.register(state)
    cleanups.append(lambda: metrics.REGISTRY.unregister(state))
    claims = VolumeStatsCollector(node.volumes.stats.claims_usage)
    metrics.REGISTRY.register(claims)
    cleanups.append(lambda: metrics.REGISTRY.unregister(claims))
    metrics.REGISTRY.register(node.log_stats)
    cleanups.append(lambda: metrics.REGISTRY.unregister(node.log_stats))
    registries = [metrics.REGISTRY]

    def view() -> httpserver.NodeView:
        return node.host

    if cfg.healthz_port > 0:
        r = await httpserver.serve(
            httpserver.healthz_app(view), cfg.healthz_bind_address, cfg.healthz_port
        )
        cleanups.append(r.cleanup)
    if cfg.enable_server:
        ssl_ctx = _kubelet_port_tls(s, deps, name, cleanups)
        assert deps.auth is not None  # built by run() before the servers start
        debug = httpserver.DebugHandlers(
            enable_debugging_handlers=cfg.enable_debugging_handlers,
            enable_system_log_handler=cfg.enable_system_log_handler,
            enable_profiling_handler=cfg.enable_profiling_handler,
            enable_debug_flags_handler=cfg.enable_debug_flags_handler,
            checkpoint_dir=node.checkpoints_dir or "",
        )
        app = httpserver.kubelet_app(
            view, lambda: document(cfg, s.document), registries, deps.auth, debug
        )
        r = await httpserver.serve(app, cfg.address, cfg.port, ssl_ctx)
        cleanups.append(r.cleanup)
        if cfg.read_only_port > 0:
            r = await httpserver.serve(
                httpserver.read_only_app(view, registries), cfg.address, cfg.read_only_port
            )
            cleanups.append(r.cleanup)


def _kubelet_port_tls(
    s: KubeletServer, deps: Dependencies, name: str, cleanups: list[Cleanup]
) -> ssl.SSLContext:
    """The kubelet port's context: serving pair, client CA, tlsMinVersion and suites."""
    cfg, flags = s.config, s.flags
    tls = deps.tls_options
    gate = FeatureGate(cfg.feature_gates).enabled(Feature.RotateKubeletServerCertificate)
    if tls is None and cfg.server_tls_bootstrap and not gate:
        log.warning(
            "serverTLSBootstrap is ignored: feature gate RotateKubeletServerCertificate is off"
        )
    policy = TLSPolicy(cfg.tls_min_version, tuple(cfg.tls_cipher_suites))
    try:
        if tls is None and cfg.server_tls_bootstrap and gate:
            return _serving_certificates(s, deps, name, cleanups, policy).context
        if tls is None:
            cert, key = cfg.tls_cert_file, cfg.tls_private_key_file
            if not cert or not key:
                ips = [ip.strip() for ip in flags.node_ip.split(",") if ip.strip()]
                cert, key = ensure_self_signed(flags.cert_directory, name, ips)
            tls = TLSOptions(cert, key, cfg.authentication.x509.client_ca_file, policy)
            deps.tls_options = tls
        reload = FeatureGate(cfg.feature_gates).enabled(Feature.ReloadKubeletServerCertificateFile)
        return server_context(tls, reload)
    except (OSError, ValueError, ssl.SSLError) as err:
        raise StartupError(f"failed to set up the kubelet server's TLS: {err}") from err


def _serving_certificates(
    s: KubeletServer,
    deps: Dependencies,
    name: str,
    cleanups: list[Cleanup],
    policy: TLSPolicy,
) -> RotatingServerContext:
    """serverTLSBootstrap: the serving pair comes from kubelet-serving CSRs for the
    node's addresses, renewed like the client pair; tlsCertFile/tlsPrivateKeyFile
    are only read while no pair has been issued yet, as upstream."""
    from kubelet.certificate import bootstrap
    from kubelet.certificate.kubelet import new_server_manager
    from kubelet.nodestatus.setters import default_node_ip

    cfg, flags = s.config, s.flags
    ips = [ip.strip() for ip in flags.node_ip.split(",") if ip.strip()] or [default_node_ip()]
    hostname = (flags.hostname_override or "").strip().lower() or name
    addresses = [{"type": "InternalIP", "address": ip} for ip in ips]
    addresses.append({"type": "Hostname", "address": hostname})
    try:
        bootstrap.check_cert_dir(flags.cert_directory)
        mgr = new_server_manager(
            deps.kube_client,
            flags.cert_directory,
            name,
            lambda: addresses,
            cfg.tls_cert_file,
            cfg.tls_private_key_file,
        )
    except (OSError, ValueError, bootstrap.BootstrapError) as err:
        raise StartupError(f"failed to initialize server certificate manager: {err}") from err
    if deps.kube_client is None:
        log.warning(
            "serverTLSBootstrap: no API client (standalone mode), so no serving certificate "
            "can be requested; HTTPS handshakes fail until one is in %s",
            flags.cert_directory,
        )
    else:
        stop = asyncio.Event()
        cleanups.append(stop.set)
        _spawn(mgr.run(stop), "server-certificate-manager", cleanups)
    return RotatingServerContext(mgr, cfg.authentication.x509.client_ca_file, policy)
