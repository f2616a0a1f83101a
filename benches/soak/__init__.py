"""Churn soak: our kubelet on the simulated runtime in cluster mode, pods created and
deleted at a steady rate for a long time, the kubelet process sampled at a fixed
interval (RSS, CPU, open descriptors, asyncio tasks, API requests per pod).

The parts (control plane with audit logging, simulated runtime, kubelet command
line and config, pod template, pod watch) are the density benchmark's
(benches/density/harness.py); this module only adds the churn and the sampling.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import time
from collections import deque
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from benches import records
from benches.density.cluster import start_control_plane
from benches.density.harness import Run
from benches.density.spec import Spec, needs_controllers
from benches.procmetrics import pct, proc_cpu_s, proc_rss_mib
from kubelet.client.kubeconfig import load_kubeconfig
from kubelet.client.rest import APIClient, APIError
from kubelet.testing.controlplane import ControlPlane
from kubelet.testing.process import remove_log_links_into, unmount_under


@dataclass
class SoakSpec:
    minutes: float
    rate: float = 20.0  # pods created (and, once `alive` are up, deleted) per second
    alive: int = 2000
    interval: float = 60.0  # seconds between samples
    warmup_minutes: float = 10.0  # left out of the trend figures
    relist: float = 1.0
    # Back-pressure: no new pod while this many deletions are still pending, so a
    # kubelet (or a machine) that cannot keep up shows as a lower achieved rate
    # instead of a backlog whose growth would hide or fake a leak.
    max_deleting: int = 200
    # The density benchmark's pod template: "plain", or "volumes" (configMap, secret
    # and the projected service account token, which exercise their managers).
    template: str = "plain"


@dataclass
class Sample:
    t_s: float  # since the churn began
    rss_mib: float
    cpu_cores: float  # over the last interval
    fds: int
    tasks: int | None  # kubelet_asyncio_tasks
    running_pods: int | None  # kubelet_running_pods
    alive_api: int  # created - deleted, as the API server sees them
    deleting: int  # delete requested, not yet gone from the API
    created: int  # in this interval
    rate: float  # pods created per second in this interval (back-pressure lowers it)
    api_requests: int  # by the node, in this interval
    api_requests_per_pod: float | None  # per pod created in this interval
    startup_p50_s: float | None  # created -> Running (watch), pods Running in this interval
    startup_p99_s: float | None
    errors: int  # API errors of the churn driver in this interval


@dataclass
class SoakResult:
    spec: dict[str, Any]
    started: str
    baseline: dict[str, Any] = field(default_factory=dict)  # 0 pods, before the churn
    drained: dict[str, Any] = field(default_factory=dict)  # 0 pods again, after it
    samples: list[dict[str, Any]] = field(default_factory=list)
    # Trends after the warm-up (least squares): RSS %/h of its mean, fds and tasks per hour.
    rss_growth_pct_per_h: float | None = None
    fds_per_h: float | None = None
    tasks_per_h: float | None = None
    error: str | None = None


def slope_per_hour(points: list[tuple[float, float]]) -> float | None:
    """Least-squares slope of (seconds, value) points, per hour."""
    if len(points) < 3:
        return None
    n = len(points)
    mx = sum(x for x, _ in points) / n
    my = sum(y for _, y in points) / n
    den = sum((x - mx) ** 2 for x, _ in points)
    if den == 0:
        return None
    return sum((x - mx) * (y - my) for x, y in points) / den * 3600


def open_fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def fd_kinds(pid: int) -> dict[str, int]:
    """Open descriptors by kind (socket, pipe, anon_inode:[eventpoll], or a file's
    directory), to tell a pool that grew from a leak."""
    kinds: dict[str, int] = {}
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        kind = target.split(":[")[0] if ":[" in target else os.path.dirname(target)
        kinds[kind] = kinds.get(kind, 0) + 1
    return dict(sorted(kinds.items()))


def gauge(text: str, name: str) -> int | None:
    m = re.search(rf"^{re.escape(name)}(?:\{{[^}}]*\}})? ([0-9.e+]+)$", text, re.M)
    return None if m is None else int(float(m.group(1)))


class AuditTail:
    """Counts a user's requests in an audit log that only grows, reading only what is new."""

    def __init__(self, path: Path, user: str) -> None:
        self.path = path
        self.needle = f'"username":"{user}"'
        self.offset = 0
        self.inode = 0
        self.partial = ""

    def new_requests(self) -> int:
        try:
            with open(self.path, errors="replace") as fh:
                st = os.fstat(fh.fileno())
                if st.st_ino != self.inode or st.st_size < self.offset:
                    # The API server rotated its audit log (at 100 MB): a new file.
                    self.inode, self.offset, self.partial = st.st_ino, 0, ""
                fh.seek(self.offset)
                data = fh.read()
                self.offset = fh.tell()
        except OSError:
            return 0
        data = self.partial + data
        lines = data.split("\n")
        self.partial = lines.pop()
        return sum(1 for line in lines if self.needle in line)


class SoakRun(Run):
    def __init__(self, cp: ControlPlane, spec: SoakSpec, workdir: Path) -> None:
        # maxPods: room for the pods still terminating while their successors start.
        room = spec.alive + int(spec.rate * 60) + 20
        super().__init__(
            cp, Spec("ours", spec.relist, room, spec.rate, 0.0, template=spec.template), workdir, 0
        )
        self.soak = spec
        self.out = SoakResult(asdict(spec), time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
        self.audit = AuditTail(Path(cp.directory).parent / "audit.log", f"system:node:{self.node}")
        self.order: deque[str] = deque()  # alive pods, oldest first
        self.delete_requested: set[str] = set()
        self.pending_deletes: set[str] = set()  # requested, not yet seen DELETED
        self.errors = 0
        self.n_created = 0

    def _pid(self) -> int:
        return self.procs[-1].pid

    def _probe(self) -> dict[str, Any]:
        pid = self._pid()
        try:
            text = self._metrics()
        except OSError:
            text = ""
        return {
            "rss_mib": round(proc_rss_mib(pid), 1),
            "fds": open_fds(pid),
            "tasks": gauge(text, "kubelet_asyncio_tasks"),
            "running_pods": gauge(text, "kubelet_running_pods"),
        }

    async def _churn(self, admin: APIClient, until: float) -> None:
        sem = asyncio.Semaphore(64)
        pending: set[asyncio.Task[None]] = set()

        async def create(i: int) -> None:
            name = f"p{i:05d}"
            async with sem:
                self.created[name] = time.monotonic()
                try:
                    await admin.create(f"/api/v1/namespaces/{self.ns}/pods", self._pod(i))
                except APIError:
                    self.errors += 1
                    self.created.pop(name, None)
                    return
            self.order.append(name)
            self.n_created += 1

        async def delete(name: str) -> None:
            async with sem:
                self.delete_requested.add(name)
                self.pending_deletes.add(name)
                try:
                    await admin.delete(f"/api/v1/namespaces/{self.ns}/pods/{name}")
                except APIError as err:
                    if not err.not_found:
                        self.errors += 1

        t0 = time.monotonic()
        i = 0
        while time.monotonic() < until:
            delay = t0 + i / self.soak.rate - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            self.pending_deletes = {n for n in self.pending_deletes if n not in self.deleted}
            if len(self.pending_deletes) >= self.soak.max_deleting:
                t0 += 1 / self.soak.rate  # skip this slot
                continue
            for coro in [create(i)] + (
                [delete(self.order.popleft())] if len(self.order) >= self.soak.alive else []
            ):
                task = asyncio.create_task(coro)
                pending.add(task)
                task.add_done_callback(pending.discard)
            i += 1
            dead = [
                f"pid {p.pid} (exit {p.returncode})" for p in self.procs if p.poll() is not None
            ]
            if dead:
                raise RuntimeError(f"exited: {'; '.join(dead)}; see {self.dir}")
        await asyncio.gather(*pending)

    async def _sampler(self, t0: float) -> None:
        pid = self._pid()
        last_cpu, last_t = proc_cpu_s(pid), time.monotonic()
        last_created = 0
        seen_running: set[str] = set()
        while True:
            await asyncio.sleep(self.soak.interval)
            now = time.monotonic()
            cpu = proc_cpu_s(pid)
            probe = self._probe()
            created = self.n_created - last_created
            reqs = self.audit.new_requests()
            fresh = [n for n in self.running_at if n not in seen_running and n in self.created]
            seen_running.update(fresh)
            lat = [self.running_at[n] - self.created[n] for n in fresh]
            gone = len(self.delete_requested & self.deleted)
            s = Sample(
                t_s=round(now - t0, 1),
                cpu_cores=round((cpu - last_cpu) / (now - last_t), 4),
                alive_api=self.n_created - gone,
                deleting=len(self.delete_requested) - gone,
                created=created,
                rate=round(created / (now - last_t), 2),
                api_requests=reqs,
                api_requests_per_pod=round(reqs / created, 2) if created else None,
                startup_p50_s=None if not lat else round(pct(lat, 0.5) or 0.0, 3),
                startup_p99_s=None if not lat else round(pct(lat, 0.99) or 0.0, 3),
                errors=self.errors,
                **probe,
            )
            self.errors = 0
            self.out.samples.append(asdict(s))
            last_cpu, last_t, last_created = cpu, now, self.n_created
            print(json.dumps(asdict(s)), flush=True)

    async def _settle(self, seconds: float) -> dict[str, Any]:
        """Let housekeeping run, then probe: the probe with the fewest asyncio
        tasks of five a second apart, so a periodic loop's pass in flight (node
        status, GC, housekeeping) is not read as a task that stayed."""
        await asyncio.sleep(seconds)
        probes = []
        for _ in range(5):
            probes.append(self._probe())
            await asyncio.sleep(1.0)
        fewest = min(probes, key=lambda p: p["tasks"] if p["tasks"] is not None else 0)
        probe = {**fewest, "fd_kinds": fd_kinds(self._pid())}
        if os.environ.get("KUBELET_MEMDEBUG"):
            # The kubelet inherited it: have it write a memory report (kubelet/util/memdebug.py).
            os.kill(self._pid(), signal.SIGUSR2)
            await asyncio.sleep(5)
        return probe

    async def soak_run(self) -> SoakResult:
        admin = APIClient(load_kubeconfig(self.cp.admin_kubeconfig), qps=0, burst=1)
        stop = asyncio.Event()
        watch: asyncio.Task[None] | None = None
        sampler: asyncio.Task[None] | None = None
        try:
            await self._prepare_namespace(admin)
            kubelet = self._start_kubelet(self._start_sim())
            deadline = time.monotonic() + 120
            while True:
                try:
                    n = await admin.get(f"/api/v1/nodes/{self.node}")
                    conds = {c["type"]: c["status"] for c in n["status"].get("conditions", [])}
                    if conds.get("Ready") == "True":
                        break
                except APIError:
                    pass
                if time.monotonic() > deadline or kubelet.poll() is not None:
                    raise RuntimeError(f"node {self.node} never became Ready; see {self.dir}")
                await asyncio.sleep(0.5)
            self.out.baseline = await self._settle(10)
            lst = await admin.get(f"/api/v1/namespaces/{self.ns}/pods")
            watch = asyncio.create_task(
                self._watch(admin, lst["metadata"]["resourceVersion"], stop)
            )
            self.audit.new_requests()  # start counting from here
            t0 = time.monotonic()
            sampler = asyncio.create_task(self._sampler(t0))
            await self._churn(admin, t0 + self.soak.minutes * 60)
            sampler.cancel()
            await asyncio.gather(sampler, return_exceptions=True)
            sampler = None
            # Drain: every pod deleted, gone from the API and from the runtime.
            await admin.request("DELETE", f"/api/v1/namespaces/{self.ns}/pods",
                                params={"fieldSelector": f"spec.nodeName={self.node}"})  # fmt: skip
            names = set(self.created)
            await self._wait(lambda: names <= self.deleted, max(180.0, len(self.order) / 5))
            await self._wait(lambda: self._probe()["running_pods"] == 0, 120)
            self.out.drained = await self._settle(30)
        except Exception as err:
            self.out.error = f"{type(err).__name__}: {err}"
        finally:
            stop.set()
            for t in (watch, sampler):
                if t is not None:
                    t.cancel()
                    await asyncio.gather(t, return_exceptions=True)
            self._stop_all()
            try:
                await admin.request("DELETE", f"/api/v1/namespaces/{self.ns}")
                await admin.request("DELETE", f"/api/v1/nodes/{self.node}")
            except Exception:
                pass
            await admin.close()
            unmount_under(self.dir / "root")
            remove_log_links_into(self.dir)
        self._trends()
        return self.out

    def _trends(self) -> None:
        warm = self.soak.warmup_minutes * 60
        after = [s for s in self.out.samples if s["t_s"] >= warm]
        rss = [(s["t_s"], s["rss_mib"]) for s in after]
        slope = slope_per_hour(rss)
        if slope is not None and rss:
            mean = sum(v for _, v in rss) / len(rss)
            self.out.rss_growth_pct_per_h = round(slope / mean * 100, 2)
        fds = slope_per_hour([(s["t_s"], s["fds"]) for s in after])
        self.out.fds_per_h = None if fds is None else round(fds, 2)
        tasks = slope_per_hour([(s["t_s"], s["tasks"]) for s in after if s["tasks"] is not None])
        self.out.tasks_per_h = None if tasks is None else round(tasks, 2)


def run_soak(spec: SoakSpec, workdir: Path) -> SoakResult:
    """Start a control plane (with audit logging) in `workdir`, soak, stop it."""
    cp = start_control_plane(workdir, controllers=needs_controllers([spec.template]))
    try:
        return asyncio.run(SoakRun(cp, spec, workdir).soak_run())
    finally:
        cp.stop()


def write_results(
    result: SoakResult, out: Path, stem: str, started: records.Started | None = None
) -> list[Path]:
    """The result as JSON (a record <stem>-<time>.json when `started` is given)
    and its plot beside it."""
    out.mkdir(parents=True, exist_ok=True)
    if started is not None:
        js = records.write(started, stem, asdict(result), out)
        stem = js.stem
    else:
        js = out / f"{stem}.json"
        js.write_text(json.dumps(asdict(result), indent=1))
    made = [js]
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed (pip install matplotlib): no plot")
        return made
    xs = [s["t_s"] / 60 for s in result.samples]
    panels = [
        ("rss_mib", "RSS (MiB)"),
        ("cpu_cores", "CPU (cores)"),
        ("fds", "open fds"),
        ("tasks", "asyncio tasks"),
        ("api_requests_per_pod", "API requests / pod"),
        ("alive_api", "pods alive (API)"),
        ("rate", "pods created / s"),
    ]
    fig, axes = plt.subplots(len(panels), 1, figsize=(8, 2.0 * len(panels)), sharex=True)
    for ax, (key, label) in zip(axes, panels, strict=True):
        pts = [(x, s[key]) for x, s in zip(xs, result.samples, strict=True) if s[key] is not None]
        ax.plot([x for x, _ in pts], [y for _, y in pts], marker=".")
        ax.set_ylabel(label, fontsize=8)
        ax.grid(True, alpha=0.3)
        ax.axvline(result.spec["warmup_minutes"], color="grey", linestyle=":", linewidth=1)
    sp = result.spec
    axes[0].set_title(
        f"soak: {sp['rate']:g} pods/s churn, {sp['alive']} alive, simulated runtime "
        f"(RSS {result.rss_growth_pct_per_h} %/h, fds {result.fds_per_h}/h, "
        f"tasks {result.tasks_per_h}/h after warm-up)",
        fontsize=8,
    )
    axes[-1].set_xlabel("minutes")
    fig.tight_layout()
    png = out / f"{stem}.png"
    fig.savefig(png, dpi=100)
    plt.close(fig)
    made.append(png)
    return made
