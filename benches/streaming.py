"""Streaming relay throughput: bytes through the kubelet port's exec/port-forward
proxy vs straight to the runtime's streaming server, in one run.

    python -m benches.streaming [--mib 512] [--runs 3] [--streams 1 8]   # --mib: total per run, split over the streams

Three processes on loopback, each on uvloop as the kubelet runs: a stand-in for the
runtime's streaming server (answers the upgrade with 101, then sends --mib MiB),
the kubelet port (kubelet_app with TLS, on the CRI fake whose Exec URL points at
that server), and this client. The relay does not read frames, so raw bytes measure
what it costs; SPDY framing is the same bytes either way. Prints MB/s direct,
through the kubelet over TLS (as the API server reaches it) and over plain HTTP,
and the ratios.
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
from typing import Any

import uvloop

SWITCH = b"HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: SPDY/3.1\r\n\r\n"
CHUNK = 256 * 1024


class _Source(asyncio.Protocol):
    """After the request head: 101, then `total` bytes, paced by the socket."""

    def __init__(self, total: int) -> None:
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
        while self.left > 0 and not self.paused:
            n = min(CHUNK, self.left)
            self.t.write(self.chunk if n == CHUNK else self.chunk[:n])
            self.left -= n
        if self.left == 0:
            self.t.close()

    def pause_writing(self) -> None:
        self.paused = True

    def resume_writing(self) -> None:
        self.paused = False
        self._pump()


def _backend(port_q: Any, total: int) -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        srv = await loop.create_server(lambda: _Source(total), "127.0.0.1", 0)
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
        runner = await s.serve(s.kubelet_app(lambda: view, dict, [], auth), "127.0.0.1", 0, ctx)
        port_q.put(int(runner.addresses[0][1]))
        await asyncio.Event().wait()

    uvloop.run(main())


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
    c0 = _cpu_s(kpids[0])
    tls = await _measure(kports[0], path, tls_ctx, total, runs, streams)
    c1 = _cpu_s(kpids[0])
    c2 = _cpu_s(kpids[1])
    plain = await _measure(kports[1], path, None, total, runs, streams)
    c3 = _cpu_s(kpids[1])
    return {
        "direct_MBps": round(direct),
        "kubelet_tls_MBps": round(tls),
        "kubelet_plain_MBps": round(plain),
        "ratio_tls": round(tls / direct, 3),
        "ratio_plain": round(plain / direct, 3),
        # Robust on a shared machine: what one GiB costs the kubelet process.
        "kubelet_cpu_s_per_GiB_tls": round((c1 - c0) / gib, 2),
        "kubelet_cpu_s_per_GiB_plain": round((c3 - c2) / gib, 2),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mib", type=int, default=512)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--streams", type=int, nargs="+", default=[1, 8])
    args = ap.parse_args(argv)

    ctx = mp.get_context("spawn")
    q: Any = ctx.Queue()
    procs = []
    out: dict[str, Any] = {"mib_total": args.mib, "runs": args.runs}
    with tempfile.TemporaryDirectory() as d:
        try:
            for streams in args.streams:
                total = args.mib * 1024 * 1024 // streams
                procs.append(ctx.Process(target=_backend, args=(q, total), daemon=True))
                procs[-1].start()
                bport = q.get(timeout=30)
                backend = f"http://127.0.0.1:{bport}"
                kports = []
                for use_tls in (True, False):
                    p = ctx.Process(target=_kubelet, args=(q, backend, d, use_tls), daemon=True)
                    p.start()
                    procs.append(p)
                    kports.append(q.get(timeout=60))

                kpids = [p.pid for p in procs[-2:]]
                gib = args.runs * args.mib / 1024
                out[f"streams_{streams}"] = uvloop.run(
                    _compare(bport, kports, kpids, total, args.runs, streams, gib)
                )
        finally:
            for p in procs:
                p.kill()
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
