"""The kubelet's ports under 1,000 concurrent connections: does the sync loop notice?

    python -m benches.server_load [--pods 200] [--conns 1000] [--hold 20]

Our kubelet (the real command) on the simulated runtime with --pods static pods,
PLEG relisting every 100 ms. Three windows of --hold seconds, side by side:

- idle: nobody connected;
- held: --conns connections held open and doing nothing useful: 60 % TCP
  connections to the kubelet port that never start TLS, 20 % idle TLS
  keep-alive connections, 20 % slowloris clients on the read-only port sending
  a header byte every second;
- held+busy: the same, plus 20 clients asking /pods and /healthz in a loop.

Each window reports relist p50/p99 from the kubelet's own histogram
(interpolated within buckets), the ratio to idle, /healthz latency p99 as a
client sees it, and the kubelet's CPU. Numbers on a shared machine are noisy.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import resource
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

from benches import records
from benches.procmetrics import buckets, free_port, hist_quantile, pct, proc_cpu_s

HIST = "kubelet_pleg_relist_duration_seconds"


def _client_context() -> ssl.SSLContext:
    # The kubelet's self-signed cert; no CA store to load (slow, and not needed).
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    return ctx


_CTX = _client_context()


def _ctx() -> ssl.SSLContext:
    return _CTX


async def _hold(port: int, ro: int, n: int, stop: asyncio.Event) -> int:
    """Open n connections of the three kinds; hold them until stop. Returns how many opened."""
    writers: list[asyncio.StreamWriter] = []

    async def slowloris() -> None:
        try:
            _, w = await asyncio.open_connection("127.0.0.1", ro)
        except OSError:
            return
        writers.append(w)
        w.write(b"GET /pods HTTP/1.1\r\nHost: x\r\n")
        i = 0
        while not stop.is_set():
            try:
                w.write(b"X")
                await w.drain()
            except OSError:
                return
            i += 1
            try:
                await asyncio.wait_for(stop.wait(), 1.0)
            except TimeoutError:
                pass

    half_open, idle_tls = int(n * 0.6), int(n * 0.2)
    for _ in range(half_open):
        _, w = await asyncio.open_connection("127.0.0.1", port)
        writers.append(w)
    for _ in range(idle_tls):
        _, w = await asyncio.open_connection("127.0.0.1", port, ssl=_ctx())
        writers.append(w)
    tasks = [asyncio.create_task(slowloris()) for _ in range(n - half_open - idle_tls)]
    await asyncio.sleep(1)
    opened = len(writers)
    await stop.wait()
    for w in writers:
        w.close()
    await asyncio.gather(*tasks, return_exceptions=True)
    return opened


async def _busy(ro: int, stop: asyncio.Event, lat: list[float]) -> None:
    async def one() -> None:
        while not stop.is_set():
            for path in (b"/pods", b"/healthz"):
                t = time.monotonic()
                r, w = await asyncio.open_connection("127.0.0.1", ro)
                w.write(b"GET " + path + b" HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
                await r.read()
                w.close()
                if path == b"/healthz":
                    lat.append(time.monotonic() - t)

    await asyncio.gather(*(one() for _ in range(20)))


async def _probe(port: int, stop: asyncio.Event, lat: list[float]) -> None:
    """/healthz on the kubelet port over TLS twice a second: what a prober sees."""
    while not stop.is_set():
        t = time.monotonic()
        try:
            r, w = await asyncio.wait_for(
                asyncio.open_connection("127.0.0.1", port, ssl=_ctx()), 10
            )
            w.write(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            await asyncio.wait_for(r.read(), 10)
            w.close()
            lat.append(time.monotonic() - t)
        except (OSError, TimeoutError):
            lat.append(float("inf"))
        try:
            await asyncio.wait_for(stop.wait(), 0.5)
        except TimeoutError:
            pass


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m benches.server_load", description=__doc__)
    ap.add_argument("--pods", type=int, default=200)
    ap.add_argument("--conns", type=int, default=1000)
    ap.add_argument("--hold", type=float, default=20.0)
    args = ap.parse_args(argv)
    started = records.begin(argv, "benches.server_load")
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, 4 * args.conns + 1024)), hard))

    tmp = Path(tempfile.mkdtemp(prefix="server-load-"))
    manifests = tmp / "m"
    manifests.mkdir()
    for i in range(args.pods):
        pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"p{i:04d}"},
               "spec": {"containers": [{"name": "c", "image": "busybox:1.36",
                                        "command": ["sleep", "infinity"]}]}}  # fmt: skip
        (manifests / f"p{i:04d}.json").write_text(json.dumps(pod))
    sock = Path("/tmp") / f"sl-{time.monotonic_ns()}.sock"
    sim = subprocess.Popen(
        [sys.executable, "-m", "kubelet.simruntime", "--listen", f"unix://{sock}"],
        stdout=open(tmp / "sim.log", "wb"), stderr=subprocess.STDOUT,
    )  # fmt: skip
    cfg = tmp / "config.json"
    cfg.write_text(
        json.dumps(
            {
                "apiVersion": "kubelet.config.k8s.io/v1beta1",
                "kind": "KubeletConfiguration",
                "cgroupsPerQOS": False,
                "enforceNodeAllocatable": [],
                "authentication": {"webhook": {"enabled": False}},
                "authorization": {"mode": "AlwaysAllow"},
            }
        )
    )
    port, ro = free_port(), free_port()
    argv = [
        sys.executable, "-m", "kubelet", "--pleg-relist-period", "100ms",
        "--address", "127.0.0.1", "--port", str(port), "--read-only-port", str(ro),
        "--healthz-port", str(free_port()), "--container-runtime-endpoint", f"unix://{sock}",
        "--pod-manifest-path", str(manifests), "--root-dir", str(tmp / "root"),
        "--cert-dir", str(tmp / "pki"), "--pod-logs-dir", str(tmp / "logs"),
        "--hostname-override", "load", "--max-pods", str(args.pods + 10),
        "--config", str(cfg),
    ]  # fmt: skip
    k = subprocess.Popen(argv, stdout=open(tmp / "kubelet.log", "wb"), stderr=subprocess.STDOUT)

    def get(path: str) -> str:
        with urllib.request.urlopen(f"http://127.0.0.1:{ro}{path}", timeout=10) as r:
            return str(r.read().decode())

    async def window(held: bool, busy: bool) -> dict[str, Any]:
        stop = asyncio.Event()
        probe: list[float] = []
        busy_lat: list[float] = []
        before = await asyncio.to_thread(buckets, await asyncio.to_thread(get, "/metrics"), HIST)
        c0, t0 = proc_cpu_s(k.pid), time.monotonic()
        tasks = [asyncio.create_task(_probe(port, stop, probe))]
        hold = asyncio.create_task(_hold(port, ro, args.conns, stop)) if held else None
        if busy:
            tasks.append(asyncio.create_task(_busy(ro, stop, busy_lat)))
        await asyncio.sleep(args.hold)
        after = buckets(await asyncio.to_thread(get, "/metrics"), HIST)
        cores = (proc_cpu_s(k.pid) - c0) / (time.monotonic() - t0)
        stop.set()
        opened = await hold if hold else 0
        await asyncio.gather(*tasks, return_exceptions=True)
        steady = [(le, c - b) for (le, c), (_, b) in zip(after, before, strict=True)]
        p50, p99 = hist_quantile(steady, 0.5), hist_quantile(steady, 0.99)
        hp99 = pct(probe, 0.99)
        return {
            "connections_held": opened,
            "relist_p50_ms": None if p50 is None else round(p50 * 1000, 2),
            "relist_p99_ms": None if p99 is None else round(p99 * 1000, 2),
            "relists": steady[-1][1] if steady else 0,
            "healthz_tls_p99_ms": None if hp99 is None else round(hp99 * 1000, 1),
            "busy_requests": len(busy_lat) * 2,
            "kubelet_cpu_cores": round(cores, 2),
        }

    async def run() -> dict[str, Any]:
        deadline = time.monotonic() + 300
        running = 0
        while time.monotonic() < deadline and running < args.pods:
            try:
                items = json.loads(await asyncio.to_thread(get, "/pods"))["items"]
                running = sum(p.get("status", {}).get("phase") == "Running" for p in items)
            except OSError:
                pass
            await asyncio.sleep(0.5)
        if running < args.pods:
            raise RuntimeError(f"only {running} of {args.pods} pods Running; log {tmp}/kubelet.log")
        await asyncio.sleep(5)  # start-up work settles
        out = {
            "idle": await window(False, False),
            "held": await window(True, False),
            "held+busy": await window(True, True),
        }
        base = out["idle"]["relist_p99_ms"]
        for w in out.values():
            w["relist_p99_vs_idle"] = (
                round(w["relist_p99_ms"] / base, 2) if base and w["relist_p99_ms"] else None
            )
        return out

    try:
        result = asyncio.run(run())
    finally:
        k.terminate()
        k.wait(30)
        sim.terminate()
        sim.wait(10)
    figures = {"pods": args.pods, "conns": args.conns, "hold_s": args.hold, **result}
    print(json.dumps(figures, indent=2))
    records.write(started, "server_load", figures)


if __name__ == "__main__":
    main()
