"""Streaming relay throughput: bytes through the kubelet port's exec/port-forward
proxy vs straight to the runtime's streaming server, in one run.

    python -m benches.streaming [--mib 512] [--runs 3] [--streams 1 8]   # --mib: total per run, split over the streams
    python -m benches.streaming --execs 100 [--pods 20] [--hold 20] [--exec-bytes N] [--exec-rate R]   # relist p99 under concurrent execs (containerd)

Three processes on loopback, each on uvloop as the kubelet runs: a stand-in for the
runtime's streaming server (answers the upgrade with 101, then sends --mib MiB),
the kubelet port (kubelet_app with TLS, on the CRI fake whose Exec URL points at
that server), and this client. The relay does not read frames, so raw bytes measure
what it costs; SPDY framing is the same bytes either way. Prints MB/s direct,
through the kubelet over TLS (as the API server reaches it) and over plain HTTP,
and the ratios; the port-forward path is measured the same way (the relay is the
same; only the CRI call that finds the URL differs).

With --execs: our kubelet (the real command) on a private containerd with --pods
static busybox pods, PLEG relisting every 100 ms. Three windows of --hold seconds:
idle; --execs WebSocket exec sessions (v4.channel.k8s.io) straight to containerd's
streaming server (URL from a CRI Exec call, as the kubelet gets it); the same
sessions through the kubelet port. Each session runs `head -c --exec-bytes`
(1 MiB by default), exits and starts again. Reports each window's relist p50/p99 from the kubelet's own
histogram (interpolated within buckets), the rises over idle, the kubelet's
rise over the direct one (what the relay costs the sync loop, as opposed to a
busy runtime), and the execs completed.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing as mp
import os
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from typing import Any

import uvloop

from benches import records

SWITCH = b"HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: SPDY/3.1\r\n\r\n"
CHUNK = 256 * 1024


class _Source(asyncio.Protocol):
    """After the request head: 101, then `total` bytes, paced by the socket, or
    at `rate` bytes/s (a chunk of PACED_CHUNK at a time) when rate is set."""

    PACED_CHUNK = 64 * 1024

    def __init__(self, total: int, rate: float = 0.0) -> None:
        self.rate = rate
        self.total = total
        self.left = total
        self.buf = b""
        self.chunk = os.urandom(CHUNK)
        self.t: asyncio.Transport | None = None
        self.paused = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.t = transport  # type: ignore[assignment]
        self.t.set_write_buffer_limits(high=4 * CHUNK)  # type: ignore[union-attr]

    def data_received(self, data: bytes) -> None:
        if self.buf is None:
            return
        self.buf += data
        if b"\r\n\r\n" in self.buf:
            self.buf = None  # type: ignore[assignment]
            assert self.t is not None
            self.t.write(SWITCH)
            self._pump()

    def _pump(self) -> None:
        assert self.t is not None
        if self.rate:
            self._paced()
            return
        while self.left > 0 and not self.paused:
            n = min(CHUNK, self.left)
            self.t.write(self.chunk if n == CHUNK else self.chunk[:n])
            self.left -= n
        if self.left == 0:
            self.t.close()

    def _paced(self) -> None:
        assert self.t is not None
        if self.t.is_closing():
            return
        n = min(self.PACED_CHUNK, self.left)
        self.t.write(self.chunk[:n])
        self.left -= n
        if self.left == 0:
            self.t.close()
            return
        asyncio.get_running_loop().call_later(n / self.rate, self._paced)

    def pause_writing(self) -> None:
        self.paused = True

    def resume_writing(self) -> None:
        self.paused = False
        if not self.rate:
            self._pump()


def _backend(port_q: Any, total: int, rate: float = 0.0) -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        srv = await loop.create_server(lambda: _Source(total, rate), "127.0.0.1", 0)
        port_q.put(srv.sockets[0].getsockname()[1])
        await asyncio.Event().wait()

    uvloop.run(main())


def _kubelet(port_q: Any, backend: str, tls_dir: str, use_tls: bool) -> None:
    from kubelet.cri.api import api_pb2 as pb
    from kubelet.cri.fake import FakeRuntimeService
    from kubelet.kuberuntime import labels
    from kubelet.server import server as s
    from kubelet.server.auth import ServerAuth
    from kubelet.server.tls import TLSOptions, ensure_self_signed, server_context

    class View(s.NoPods):
        def __init__(self, rt: FakeRuntimeService) -> None:
            self.runtime_service = rt
            self.pod = {"metadata": {"name": "p", "namespace": "default", "uid": "u"},
                        "spec": {"containers": [{"name": "c"}]}}  # fmt: skip

        def get_pod_by_name(self, namespace_: str, name: str) -> dict[str, Any] | None:
            return self.pod

    async def main() -> None:
        rt = FakeRuntimeService()
        rt.streaming_base = backend
        lbl = {labels.POD_UID: "u"}
        meta = pb.PodSandboxMetadata(name="p", namespace="default", uid="u")
        sid = await rt.run_pod_sandbox(pb.PodSandboxConfig(metadata=meta, labels=lbl))
        cfg = pb.ContainerConfig(
            metadata=pb.ContainerMetadata(name="c"), labels={**lbl, labels.CONTAINER_NAME: "c"}
        )
        await rt.start_container(await rt.create_container(sid, cfg, pb.PodSandboxConfig()))
        view = View(rt)
        auth = ServerAuth(anonymous_enabled=True, authorization_mode="AlwaysAllow")
        ctx = None
        if use_tls:
            cert, key = ensure_self_signed(tls_dir, "bench", ["127.0.0.1"])
            ctx = server_context(TLSOptions(cert, key, ""))
        app = s.kubelet_app(lambda: view, dict, [], auth)
        lag = _LoopLag()
        app.router.add_get("/bench/loop-lag", lag.handler)
        lag.start()
        runner = await s.serve(app, "127.0.0.1", 0, ctx)
        port_q.put(int(runner.addresses[0][1]))
        await asyncio.Event().wait()

    uvloop.run(main())


class _LoopLag:
    """How late the kubelet's event loop runs a 10 ms timer: what a relist, a
    probe or a status write waits while the relay works. GET returns the
    percentiles since the previous GET (and starts a new window)."""

    PERIOD = 0.01

    def __init__(self) -> None:
        self.samples: list[float] = []

    def start(self) -> None:
        asyncio.get_running_loop().create_task(self._tick())

    async def _tick(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            t = loop.time()
            await asyncio.sleep(self.PERIOD)
            self.samples.append(loop.time() - t - self.PERIOD)

    async def handler(self, _: Any) -> Any:
        from aiohttp import web

        xs, self.samples = sorted(self.samples), []
        pick = lambda q: round(xs[min(len(xs) - 1, int(q * len(xs)))] * 1000, 2) if xs else None  # noqa: E731
        return web.json_response({"n": len(xs), "p50_ms": pick(0.5), "p99_ms": pick(0.99),
                                  "max_ms": pick(1.0)})  # fmt: skip


class _Sink(asyncio.Protocol):
    def __init__(self) -> None:
        self.n = 0
        self.done: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self.head = True

    def data_received(self, data: bytes) -> None:
        self.n += len(data)

    def connection_lost(self, exc: BaseException | None) -> None:
        if not self.done.done():
            self.done.set_result(self.n)


async def _one(port: int, path: str, ssl_ctx: Any, total: int) -> float:
    loop = asyncio.get_running_loop()
    sink = _Sink()
    t, _ = await loop.create_connection(lambda: sink, "127.0.0.1", port, ssl=ssl_ctx)
    t0 = time.perf_counter()
    t.write(
        f"POST {path} HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: SPDY/3.1\r\n"
        "Content-Length: 0\r\n\r\n".encode()
    )
    n = await sink.done
    dt = time.perf_counter() - t0
    if n < total:
        raise RuntimeError(f"got {n} of {total} bytes")
    return (n - len(SWITCH)) / dt / 1e6


async def _measure(
    port: int, path: str, ssl_ctx: Any, total: int, runs: int, streams: int
) -> float:
    rates = []
    for _ in range(runs):
        t0 = time.perf_counter()
        await asyncio.gather(*(_one(port, path, ssl_ctx, total) for _ in range(streams)))
        rates.append(streams * total / (time.perf_counter() - t0) / 1e6)
    return statistics.median(rates)


def _cpu_s(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as fh:
        f = fh.read().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")


async def _compare(
    bport: int, kports: list[int], kpids: list[int], total: int, runs: int, streams: int,
    gib: float,
) -> dict[str, float]:  # fmt: skip
    import ssl

    tls_ctx = ssl.create_default_context()
    tls_ctx.check_hostname = False
    tls_ctx.verify_mode = ssl.CERT_NONE
    path = "/exec/default/p/c?output=1&command=cat"
    direct = await _measure(bport, "/exec/tok", None, total, runs, streams)
    await _lag(kports[0], tls_ctx)  # a new window
    await asyncio.sleep(3)
    idle_lag = await _lag(kports[0], tls_ctx)
    c0 = _cpu_s(kpids[0])
    tls = await _measure(kports[0], path, tls_ctx, total, runs, streams)
    c1 = _cpu_s(kpids[0])
    tls_lag = await _lag(kports[0], tls_ctx)
    c2 = _cpu_s(kpids[1])
    await _lag(kports[1], None)
    plain = await _measure(kports[1], path, None, total, runs, streams)
    c3 = _cpu_s(kpids[1])
    plain_lag = await _lag(kports[1], None)
    pf_tls = await _measure(kports[0], "/portForward/default/p", tls_ctx, total, runs, streams)
    pf_plain = await _measure(kports[1], "/portForward/default/p", None, total, runs, streams)
    return {
        "direct_MBps": round(direct),
        "kubelet_tls_MBps": round(tls),
        "kubelet_plain_MBps": round(plain),
        "portforward_tls_MBps": round(pf_tls),
        "portforward_plain_MBps": round(pf_plain),
        "ratio_tls": round(tls / direct, 3),
        "ratio_plain": round(plain / direct, 3),
        "ratio_portforward_tls": round(pf_tls / direct, 3),
        "ratio_portforward_plain": round(pf_plain / direct, 3),
        # Robust on a shared machine: what one GiB costs the kubelet process.
        "kubelet_cpu_s_per_GiB_tls": round((c1 - c0) / gib, 2),
        "kubelet_cpu_s_per_GiB_plain": round((c3 - c2) / gib, 2),
        # The kubelet's event loop: how late a 10 ms timer ran, idle and while
        # the bytes went through (what a relist would have waited).
        "loop_lag_idle": idle_lag,
        "loop_lag_during_tls": tls_lag,
        "loop_lag_during_plain": plain_lag,
    }


async def _lag(port: int, ssl_ctx: Any) -> dict[str, Any]:
    import aiohttp

    scheme = "https" if ssl_ctx is not None else "http"
    async with aiohttp.ClientSession() as http:
        async with http.get(
            f"{scheme}://127.0.0.1:{port}/bench/loop-lag", ssl=ssl_ctx or False
        ) as r:
            return dict(await r.json())


async def _ws_exec(session: Any, url: str) -> int:
    """One exec over WebSocket (v4.channel.k8s.io): stdout bytes received."""
    import aiohttp

    n = 0
    async with session.ws_connect(url, protocols=("v4.channel.k8s.io",), ssl=False) as ws:
        async for msg in ws:
            if msg.type == aiohttp.WSMsgType.BINARY and msg.data[:1] == b"\x01":
                n += len(msg.data) - 1
    return n


async def _exec_load(
    url_for: Callable[[int], Awaitable[str]], execs: int, hold: float, size: int, rate: float
) -> dict[str, Any]:
    """`execs` workers, each running one exec after another until `hold` ends;
    with `rate`, the workers together start at most `rate` execs a second (each
    worker's starts `execs / rate` s apart, staggered), so that two windows put
    the same load on the runtime whichever path is faster."""
    import aiohttp

    done, failed, nbytes = 0, 0, 0
    t0 = time.monotonic()
    deadline = t0 + hold
    conn = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=conn) as session:

        async def worker(i: int) -> None:
            nonlocal done, failed, nbytes
            next_at = t0 + (i / rate if rate else 0.0)
            while True:
                if rate:  # a worker that fell behind runs its execs back to back
                    await asyncio.sleep(max(0.0, next_at - time.monotonic()))
                    next_at += execs / rate
                if time.monotonic() >= deadline:
                    break
                try:
                    got = await _ws_exec(session, await url_for(i))
                except (aiohttp.ClientError, OSError):
                    failed += 1
                    await asyncio.sleep(0.1)
                    continue
                if got == size:
                    done += 1
                    nbytes += got
                else:
                    failed += 1

        await asyncio.gather(*(worker(i) for i in range(execs)))
    return {"execs_completed": done, "execs_failed": failed, "exec_MB": round(nbytes / 1e6)}


def _relist_under_execs(
    n_pods: int, execs: int, hold: float, size: int, rate: float
) -> dict[str, Any]:
    import urllib.request
    from pathlib import Path
    from urllib.parse import urlencode

    from benches.procmetrics import buckets, hist_quantile, proc_cpu_s
    from kubelet.cri.api import api_pb2 as pb
    from kubelet.cri.remote import RemoteRuntimeService
    from kubelet.testing.containerd import Containerd
    from kubelet.testing.kubelets import KubeletProcess, sleeper_pod, write_manifest
    from kubelet.testing.process import remove_log_links_into

    hist = "kubelet_pleg_relist_duration_seconds"
    tmp = Path(tempfile.mkdtemp(prefix="exec-relist-"))
    manifests = tmp / "m"
    manifests.mkdir()
    for i in range(n_pods):
        write_manifest(manifests, sleeper_pod(f"e{i:03d}"), ".json")
    ctd = Containerd(str(tmp / "ctd"), subnet="10.244.11.0/24", bridge="kpy4").start()
    kp = KubeletProcess(
        tmp, ctd.endpoint, "relist", manifests=manifests,
        config_file=Path(__file__).parent.parent / "hack/demo/kubelet-config.yaml",
        flags=("--pleg-relist-period", "100ms"), pod_logs_dir=tmp / "logs",
    ).start()  # fmt: skip
    k, port, ro = kp.proc, kp.port, kp.read_only_port

    def get(path: str) -> str:
        with urllib.request.urlopen(f"http://127.0.0.1:{ro}{path}", timeout=10) as r:
            return str(r.read().decode())

    def window(load: Any) -> dict[str, Any]:
        before = buckets(get("/metrics"), hist)
        c0, w0 = proc_cpu_s(k.pid), time.monotonic()
        extra = load()
        cores = (proc_cpu_s(k.pid) - c0) / (time.monotonic() - w0)
        after = buckets(get("/metrics"), hist)
        steady = [(le, c - b) for (le, c), (_, b) in zip(after, before, strict=True)]
        p50, p99 = hist_quantile(steady, 0.5), hist_quantile(steady, 0.99)
        return {
            "relist_p50_ms": None if p50 is None else round(p50 * 1000, 2),
            "relist_p99_ms": None if p99 is None else round(p99 * 1000, 2),
            "relists": steady[-1][1] if steady else 0,
            "kubelet_cpu_cores": round(cores, 2),
            **extra,
        }

    try:
        t0 = time.monotonic()
        names: list[str] = []
        while time.monotonic() - t0 < 300 and len(names) < n_pods:
            try:
                items = json.loads(get("/pods"))["items"]
            except OSError:
                items = []
            names = [p["metadata"]["name"] for p in items if p.get("status", {}).get("phase") == "Running"]  # fmt: skip
            time.sleep(0.5)
        if len(names) < n_pods:
            raise RuntimeError(f"only {len(names)} of {n_pods} pods Running; log {kp.log}")
        time.sleep(5)  # start-up work settles

        def idle_load() -> dict[str, Any]:
            time.sleep(hold)
            return {}

        cmd = ["head", "-c", str(size), "/dev/zero"]
        q = urlencode([("command", c) for c in cmd] + [("output", "1")])

        async def via_kubelet() -> dict[str, Any]:
            async def url(i: int) -> str:
                return f"https://127.0.0.1:{port}/exec/default/{names[i % len(names)]}/c?{q}"

            return await _exec_load(url, execs, hold, size, rate)

        async def direct() -> dict[str, Any]:
            # The same sessions straight to containerd's streaming server: a CRI
            # Exec call for the URL (as the kubelet makes), then the WebSocket.
            rt = RemoteRuntimeService(f"unix://{ctd.socket}", 10)
            running = pb.ContainerFilter(state=pb.ContainerStateValue(state=pb.CONTAINER_RUNNING))
            cids = [c.id for c in await rt.list_containers(running)]

            async def url(i: int) -> str:
                return await rt.exec(cids[i % len(cids)], cmd, tty=False, stdin=False,
                                     stdout=True, stderr=False)  # fmt: skip

            try:
                return await _exec_load(url, execs, hold, size, rate)
            finally:
                await rt.close()

        idle = window(idle_load)
        straight = window(lambda: uvloop.run(direct()))
        busy = window(lambda: uvloop.run(via_kubelet()))
        out: dict[str, Any] = {"pods": n_pods, "concurrent_execs": execs, "hold_s": hold,
                               "exec_rate_per_s": rate or None,
                               "bytes_per_exec": size,
                               "idle": idle, "execs_direct_to_runtime": straight,
                               "execs_through_kubelet": busy}  # fmt: skip
        p99 = [w["relist_p99_ms"] for w in (idle, straight, busy)]
        if None not in p99:
            out["relist_p99_rise_direct_ms"] = round(p99[1] - p99[0], 2)
            out["relist_p99_rise_kubelet_ms"] = round(p99[2] - p99[0], 2)
            out["relist_p99_kubelet_over_direct_ms"] = round(p99[2] - p99[1], 2)
        return out
    finally:
        kp.stop()
        ctd.stop()
        remove_log_links_into(tmp)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mib", type=int, default=512)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--streams", type=int, nargs="+", default=[1, 8])
    ap.add_argument("--stream-rate", type=float, default=0.0,
                    help="MB/s per stream from the stand-in runtime (0: as fast as taken); "
                    "with many streams, the loop lag under an exec-like load")  # fmt: skip
    ap.add_argument("--execs", type=int, default=0, help="relist p99 under N concurrent execs")
    ap.add_argument("--pods", type=int, default=20)
    ap.add_argument("--hold", type=float, default=20.0)
    ap.add_argument("--exec-bytes", type=int, default=1048576, help="stdout bytes per exec")
    ap.add_argument("--exec-rate", type=float, default=0.0,
                    help="execs started per second, all workers together (0: each worker "
                    "starts its next exec when one ends)")  # fmt: skip
    args = ap.parse_args(argv)
    started = records.begin(argv, "benches.streaming")
    if args.execs:
        res = _relist_under_execs(args.pods, args.execs, args.hold, args.exec_bytes, args.exec_rate)
        print(json.dumps(res, indent=2))
        records.write(started, "streaming-execs", res)
        return 0

    ctx = mp.get_context("spawn")
    q: Any = ctx.Queue()
    procs = []
    out: dict[str, Any] = {"mib_total": args.mib, "runs": args.runs}
    with tempfile.TemporaryDirectory() as d:
        try:
            for streams in args.streams:
                total = args.mib * 1024 * 1024 // streams
                rate = args.stream_rate * 1e6
                procs.append(ctx.Process(target=_backend, args=(q, total, rate), daemon=True))
                procs[-1].start()
                bport = q.get(timeout=30)
                backend = f"http://127.0.0.1:{bport}"
                kports = []
                for use_tls in (True, False):
                    p = ctx.Process(target=_kubelet, args=(q, backend, d, use_tls), daemon=True)
                    p.start()
                    procs.append(p)
                    kports.append(q.get(timeout=60))

                kpids = [p.pid for p in procs[-2:] if p.pid is not None]
                gib = args.runs * args.mib / 1024
                out[f"streams_{streams}"] = uvloop.run(
                    _compare(bport, kports, kpids, total, args.runs, streams, gib)
                )
        finally:
            for p in procs:
                p.kill()
    print(json.dumps(out, indent=2))
    records.write(started, "streaming", out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
