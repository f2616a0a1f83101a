"""One density run: a kubelet (ours or upstream) on the simulated runtime, joined to
the real control plane; N pods created at a fixed rate; measured through a watch,
/proc and the kubelet's metrics; then all deleted.

Pod templates (`Spec.template`):
- plain: one `sleep infinity` container, no service-account token
  (automountServiceAccountToken false), no volumes.
- volumes: the same container with a configMap volume and a secret volume (one
  configMap and one secret shared by all pods, created before the pods), an env
  var from that configMap (valueFrom.configMapKeyRef), and the projected
  kube-api-access-* volume that the API server's ServiceAccount admission adds
  (a TokenRequest-bound token, the kube-root-ca.crt configMap, the namespace).
  kube-root-ca.crt is published by kube-controller-manager's
  root-ca-certificate-publisher-controller, so this template needs the control
  plane started with controllers (see `needs_controllers`).
"""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import aiohttp

from benches.density import cri_probe, evidence, kwok, profile, scrape
from benches.density.changes import ChangeProbe
from benches.density.cluster import count_requests, kubelet_config, upstream_kubelet
from benches.density.containerd import ContainerdRuntime, Usage
from benches.density.kills import KillProbe
from benches.density.spec import CONFIGMAP, SECRET, Result, Spec, perf_percentile
from benches.procmetrics import buckets, hist_quantile, pct, proc_cpu_s, proc_rss_mib
from kubelet.client.kubeconfig import load_kubeconfig
from kubelet.client.rest import API_ERRORS, APIClient, APIError
from kubelet.testing.controlplane import ControlPlane
from kubelet.testing.kubelets import KUBELET_COMMAND, KubeletProcess
from kubelet.testing.net import free_port
from kubelet.testing.process import remove_log_links_into, short_dir, unmount_under
from kubelet.testing.simruntime import start_simruntime
from kubelet.testing.wait import WaitTimeout, wait_for_async

RELIST_HIST = "kubelet_pleg_relist_duration_seconds"
# Containers stopped per second after the steady state (Spec.changes).
CHANGE_RATE = 10.0
# With Spec.scrapes: the idle kubelet is measured this long, once it has settled.
IDLE_S = float(os.environ.get("DENSITY_IDLE_S", "30"))
IDLE_SETTLE_S = min(10.0, IDLE_S)
# Upstream's kubelet_perf.go polls container stats every 10 s.
CPU_SAMPLE_S = float(os.environ.get("DENSITY_CPU_SAMPLE_S", "10"))
# Both kubelets: first seen by the kubelet -> its containers running, as the
# kubelet sees it (no status write, no watch): the kubelet's own share of startup.
POD_START_HIST = "kubelet_pod_start_duration_seconds"


class Run:
    # At least this long for every pod to be Running (a variant may need longer).
    min_wait = 180.0

    def __init__(self, cp: ControlPlane, spec: Spec, workdir: Path, index: int) -> None:
        self.cp = cp
        self.spec = spec
        self.dir = workdir / f"run-{index:02d}-{spec.kubelet}-{int(spec.relist * 1000)}ms-{spec.n}"
        if spec.runtime != "sim":
            self.dir = self.dir.with_name(self.dir.name + f"-{spec.runtime}")
        if spec.evented:
            self.dir = self.dir.with_name(self.dir.name + "-evented")
        self.dir.mkdir(parents=True, exist_ok=True)
        self.node = f"density-{index:02d}-{spec.kubelet}"
        self.ns = f"density-{index:02d}"
        self.result = Result(spec.kubelet, spec.relist, spec.n, spec.rate, template=spec.template,
                             kube_api_qps=spec.qps, kube_api_burst=spec.burst,
                             runtime=spec.runtime,
                             pleg="evented" if spec.evented else "relist")  # fmt: skip
        self.kill_probe = KillProbe()
        self.created: dict[str, float] = {}
        self.running_at: dict[str, float] = {}
        self.deleted: set[str] = set()
        self.procs: list[subprocess.Popen[bytes]] = []
        self.ctd: ContainerdRuntime | None = None
        self.sim_pid: int | None = None
        self.ro: int | None = None  # the kubelet's read-only port (none for kwok)
        self.endpoint = ""  # the runtime's CRI endpoint
        self.changes = ChangeProbe()
        # The creation window (epoch seconds, for the audit log): start, all Running.
        self.window = [0.0, 0.0]

    # ---------------------------------------------------------------- parts
    def _start_sim(self) -> str:
        sim = start_simruntime(
            short_dir(f"dsim-{self.node}"), log=self.dir / "simruntime.log", timeout=20
        )
        self.procs.append(sim.proc)
        self.sim_pid = sim.proc.pid
        return sim.endpoint

    def _start_runtime(self) -> str:
        if self.spec.runtime == "sim":
            return self._start_sim()
        self.ctd = ContainerdRuntime(self.dir / "ctd")
        endpoint = self.ctd.start()
        self.result.containerd = self.ctd.ctd.flavor if self.ctd.ctd else None
        return endpoint

    def _start_kubelet(self, endpoint: str) -> subprocess.Popen[bytes]:
        cgroup_root = self.ctd.cgroup_root if self.ctd is not None else ""
        config = kubelet_config(self.spec, cgroup_root, str(self.dir / "logs"))
        command: tuple[str, ...] = KUBELET_COMMAND
        flags: tuple[str, ...] = tuple(os.environ.get("DENSITY_OURS_ARGS", "").split())
        logs: Path | None = self.dir / "logs"
        if self.spec.kubelet != "ours":
            binary = upstream_kubelet()
            if binary is None:
                raise RuntimeError(
                    "upstream kubelet not built (hack/build-control-plane.sh kubelet)"
                )
            command, flags, logs = (binary,), ("--v=1",), None
        k = KubeletProcess(
            self.dir, endpoint, self.node, cp=self.cp, config=config,
            kubeconfig=self.cp.node_kubeconfig(self.node), node_ip="127.0.0.1",
            port_flags=False, pod_logs_dir=logs, command=command, flags=flags,
            log_file=self.dir / "kubelet.log", new_session=True,
        ).start()  # fmt: skip
        self.ro = k.read_only_port
        self.procs.append(k.proc)
        return k.proc

    def _start_profile(
        self, pid: int, name: str = "profile", duration: float | None = None
    ) -> subprocess.Popen[bytes] | None:
        if not (self.spec.profile and self.spec.kubelet == "ours"):
            return None
        return profile.start(self.dir, pid, name, self.spec.hold if duration is None else duration)

    def _buckets_or_empty(self, metric: str) -> list[tuple[float, float]]:
        try:
            return buckets(self._metrics(), metric)
        except OSError:
            return []

    def _metrics_text(self, keep_as: str) -> str:
        """One scrape of /metrics, kept in the run directory; "" if it failed."""
        try:
            text = self._metrics()
        except OSError:
            return ""
        (self.dir / keep_as).write_text(text)
        return text

    def _metrics(self) -> str:
        if self.ro is None:
            raise OSError("no kubelet metrics (kwok)")
        with urllib.request.urlopen(f"http://127.0.0.1:{self.ro}/metrics", timeout=10) as r:
            return str(r.read().decode())

    # ----------------------------------------------------------------- pods
    def _pod(self, i: int) -> dict[str, Any]:
        container: dict[str, Any] = {
            "name": "c",
            "image": "busybox:1.36",
            "imagePullPolicy": "IfNotPresent",
            "command": ["sleep", "infinity"],
        }
        spec: dict[str, Any] = {
            "nodeName": self.node,
            "terminationGracePeriodSeconds": 1,
            "automountServiceAccountToken": False,
            "tolerations": [{"operator": "Exists"}],
            "containers": [container],
        }
        if self.spec.kills:
            # The status-latency probe kills "c": with a second container and
            # restartPolicy Never the pod keeps running and nothing is restarted,
            # so the status write waits for no runc work (kills.py).
            spec["restartPolicy"] = "Never"
            spec["containers"].append({**container, "name": "side"})
        if self.spec.template == "volumes":
            # The ServiceAccount admission plugin adds kube-api-access-* (and its mount).
            del spec["automountServiceAccountToken"]
            spec["volumes"] = [
                {"name": "config", "configMap": {"name": CONFIGMAP}},
                {"name": "creds", "secret": {"secretName": SECRET}},
            ]
            container["volumeMounts"] = [
                {"name": "config", "mountPath": "/etc/config", "readOnly": True},
                {"name": "creds", "mountPath": "/etc/creds", "readOnly": True},
            ]
            container["env"] = [
                {
                    "name": "MODE",
                    "valueFrom": {"configMapKeyRef": {"name": CONFIGMAP, "key": "mode"}},
                }
            ]
        return {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": f"p{i:05d}", "namespace": self.ns, "labels": {"app": "density"}},
            "spec": spec,
        }

    async def _prepare_namespace(self, admin: APIClient) -> None:
        """The namespace, its default service account and, for the volumes
        template, the shared configMap and secret; then wait until
        kube-root-ca.crt is published, so no pod meets a missing configMap."""
        await admin.create("/api/v1/namespaces", {"metadata": {"name": self.ns}})
        try:  # kube-controller-manager's serviceaccount-controller may be first
            await admin.create(f"/api/v1/namespaces/{self.ns}/serviceaccounts",
                               {"metadata": {"name": "default"}})  # fmt: skip
        except APIError as err:
            if not err.already_exists:
                raise
        if self.spec.template != "volumes":
            return
        await admin.create(
            f"/api/v1/namespaces/{self.ns}/configmaps",
            {"metadata": {"name": CONFIGMAP},
             "data": {"mode": "density", "app.properties": "a=1\nb=2\n" * 16}},
        )  # fmt: skip
        await admin.create(
            f"/api/v1/namespaces/{self.ns}/secrets",
            {"metadata": {"name": SECRET}, "type": "Opaque",
             "stringData": {"username": "density", "password": "s3cr3t-" * 8}},
        )  # fmt: skip
        deadline = time.monotonic() + 60
        while True:
            try:
                await admin.get(f"/api/v1/namespaces/{self.ns}/configmaps/kube-root-ca.crt")
                return
            except APIError as err:
                if not err.not_found or time.monotonic() > deadline:
                    raise RuntimeError(
                        "kube-root-ca.crt not published in 60 s: the volumes template needs "
                        "kube-controller-manager (root-ca-certificate-publisher-controller)"
                    ) from err
            await asyncio.sleep(0.2)

    async def _before_pods(self, admin: APIClient) -> None:
        """The node is Ready; what a variant sets up before the timed window."""

    async def _failed_mounts(self, admin: APIClient) -> None:
        r = self.result
        try:
            evs = await admin.get(f"/api/v1/namespaces/{self.ns}/events",
                                  params={"fieldSelector": "reason=FailedMount"})  # fmt: skip
        except Exception:
            return
        items = evs.get("items") or []
        r.failed_mount_events = sum(int(e.get("count") or 1) for e in items)
        r.failed_mount_samples = [
            f"{e.get('involvedObject', {}).get('name', '')}: {e.get('message', '')}"[:300]
            for e in items[:5]
        ]

    async def _watch(self, admin: APIClient, rv: str, stop: asyncio.Event) -> None:
        params = {"fieldSelector": f"spec.nodeName={self.node}", "resourceVersion": rv,
                  "allowWatchBookmarks": "true"}  # fmt: skip
        while not stop.is_set():
            try:
                async for etype, obj in admin.watch(f"/api/v1/namespaces/{self.ns}/pods", params):
                    now = time.monotonic()
                    name = obj.get("metadata", {}).get("name", "")
                    if obj.get("metadata", {}).get("resourceVersion"):
                        params["resourceVersion"] = obj["metadata"]["resourceVersion"]
                    if etype == "DELETED":
                        self.deleted.add(name)
                    else:
                        if obj.get("status", {}).get("phase") == "Running":
                            self.running_at.setdefault(name, now)
                        self.changes.observe(obj, now)
                    if etype == "MODIFIED":
                        self.kill_probe.observe(name, obj, now)
                    if stop.is_set():
                        return
            except asyncio.CancelledError:
                raise
            except Exception:
                await asyncio.sleep(0.5)

    async def _create_all(self, admin: APIClient) -> None:
        sem = asyncio.Semaphore(64)
        t0 = time.monotonic()

        async def one(i: int) -> None:
            delay = t0 + i / self.spec.rate - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            async with sem:
                name = f"p{i:05d}"
                self.created[name] = time.monotonic()
                await admin.create(f"/api/v1/namespaces/{self.ns}/pods", self._pod(i))

        await asyncio.gather(*(one(i) for i in range(self.spec.n)))

    async def _delete_all(self, admin: APIClient) -> None:
        """DeleteCollection, asked again while the API server times out (504):
        each request deletes what it reaches before its deadline."""
        for _ in range(20):
            try:
                await admin.request("DELETE", f"/api/v1/namespaces/{self.ns}/pods",
                                    params={"fieldSelector": f"spec.nodeName={self.node}"})  # fmt: skip
                return
            except APIError as err:
                if err.status != 504:
                    raise
                print(f"{self.node}: DeleteCollection timed out, asking again", file=sys.stderr)
            except aiohttp.ClientPayloadError as err:
                # The answer lists every pod deleted (tens of MB at 10,000): cut
                # off when the server's deadline comes, the deletions stand.
                print(f"{self.node}: DeleteCollection answer cut off ({err}), asking again",
                      file=sys.stderr)  # fmt: skip
        raise RuntimeError("DeleteCollection timed out 20 times")

    async def _wait(self, cond: Any, timeout: float) -> bool:
        """Whether cond() held within `timeout` s; RuntimeError once a part exits."""

        def held() -> bool:
            if cond():
                return True
            if any(p.poll() is not None for p in self.procs):
                raise RuntimeError(f"a process exited; see {self.dir}")
            if self.ctd is not None and not self.ctd.alive():
                raise RuntimeError(f"containerd exited; see {self.dir}/ctd/containerd.log")
            return False

        try:
            return await wait_for_async(repr(cond), held, timeout, every=0.2, retry_on=())
        except WaitTimeout:
            return False

    # ------------------------------------------------------------------ run
    async def run(self) -> Result:
        """The whole run, phase by phase; a failure ends it with `error` set
        and what was measured so far kept."""
        r = self.result
        admin = APIClient(load_kubeconfig(self.cp.admin_kubeconfig), qps=0, burst=1)
        stop = asyncio.Event()
        watch: asyncio.Task[None] | None = None
        try:
            r.load_avg = [round(x, 2) for x in os.getloadavg()]
            await self._prepare_namespace(admin)
            kubelet = await self._start_node(admin)
            if self.spec.scrapes and self.spec.kubelet != "kwok":
                await asyncio.sleep(IDLE_SETTLE_S)  # the first status and lease writes
                r.idle_cpu_cores, r.idle_rss_mib = await scrape.idle(kubelet.pid, IDLE_S)
            await self._before_pods(admin)
            lst = await admin.get(f"/api/v1/namespaces/{self.ns}/pods")
            watch = asyncio.create_task(
                self._watch(admin, lst["metadata"]["resourceVersion"], stop)
            )
            await self._startup(admin, kubelet.pid)
            await asyncio.sleep(5)  # let start-up work drain
            await self._steady(kubelet.pid)
            if self.spec.changes and self.endpoint:
                await self.changes.trigger(self.endpoint, self.spec.changes, CHANGE_RATE)
                await self.changes.wait(60)
                r.container_change = self.changes.result()
            await self._delete_phase(admin)
        except Exception as err:
            r.error = f"{type(err).__name__}: {err}"
        finally:
            stop.set()
            if watch is not None:
                watch.cancel()
                await asyncio.gather(watch, return_exceptions=True)
            await self._failed_mounts(admin)
            await self._stop_parts()
            await self._count_api_requests()
            await self._remove(admin)
        return r

    async def _start_node(self, admin: APIClient) -> subprocess.Popen[bytes]:
        """The runtime and the kubelet (or kwok and its Node), until the Node is Ready."""
        if self.spec.kubelet == "kwok":
            # No runtime and no kubelet: kwok manages a Node we create.
            await admin.create("/api/v1/nodes", kwok.node_object(self.node))
            kubelet = kwok.start(self.dir, self.cp.admin_kubeconfig, self.node, free_port())
            self.procs.append(kubelet)
        else:
            self.endpoint = self._start_runtime()
            kubelet = self._start_kubelet(self.endpoint)

        async def ready() -> bool:
            try:
                n = await admin.get(f"/api/v1/nodes/{self.node}")
            except API_ERRORS:
                return False
            conds = {c["type"]: c["status"] for c in n["status"].get("conditions", [])}
            return conds.get("Ready") == "True"

        deadline = time.monotonic() + 120
        while not await ready():
            if time.monotonic() > deadline or kubelet.poll() is not None:
                raise RuntimeError(f"node {self.node} never became Ready; see {self.dir}")
            await asyncio.sleep(0.5)
        return kubelet

    async def _startup(self, admin: APIClient, pid: int) -> None:
        """Create the N pods and wait for all Running: latencies, the kubelet's
        and the runtime's CPU over the window, the histograms' window."""
        r = self.result
        t_create = time.monotonic()
        timeout = max(self.min_wait, self.spec.n / self.spec.rate * 4)
        spy0 = self._start_profile(pid, "profile-startup", timeout)
        cpu0 = proc_cpu_s(pid)
        sim0 = proc_cpu_s(self.sim_pid) if self.sim_pid is not None else 0.0
        rt0 = self.ctd.usage() if self.ctd is not None else None
        start0 = self._buckets_or_empty(POD_START_HIST)
        m0 = self._metrics_text("metrics-before-create.txt")
        self.window[0] = time.time()
        await self._create_all(admin)
        await self._wait(lambda: len(self.running_at) >= self.spec.n, timeout)
        self.window[1] = time.time()
        start1 = self._buckets_or_empty(POD_START_HIST)
        m1 = self._metrics_text("metrics-all-running.txt")
        if m0 and m1:
            r.evidence["histograms"] = evidence.window(m0, m1)
        if start1 and len(start0) in (0, len(start1)):
            base = start0 or [(le, 0.0) for le, _ in start1]
            window = [(le, c - b) for (le, c), (_, b) in zip(start1, base, strict=True)]
            r.kubelet_start_p50_s = hist_quantile(window, 0.5)
            r.kubelet_start_p99_s = hist_quantile(window, 0.99)
        secs = time.monotonic() - t_create
        r.startup_cpu_cores = (proc_cpu_s(pid) - cpu0) / secs
        if self.sim_pid is not None:
            r.sim_startup_cpu_cores = (proc_cpu_s(self.sim_pid) - sim0) / secs
        if rt0 is not None and self.ctd is not None and (rt1 := self.ctd.usage()):
            r.containerd_startup_cpu_cores = (rt1.containerd_cpu_s - rt0.containerd_cpu_s) / secs
        if spy0 is not None:
            r.profile_startup_top, r.profile_startup_inclusive = profile.finish(
                self.dir, spy0, "profile-startup", stop=True
            )
        self._startup_latencies(t_create)

    def _startup_latencies(self, t_create: float) -> None:
        r = self.result
        r.running = len(self.running_at)
        lat = [self.running_at[k] - self.created[k] for k in self.running_at if k in self.created]
        r.startup_latencies_s = sorted(round(x, 4) for x in lat)
        r.startup_p50_s, r.startup_p90_s, r.startup_p99_s = (
            pct(lat, 0.5), pct(lat, 0.9), pct(lat, 0.99))  # fmt: skip
        if self.running_at:
            r.all_running_s = max(self.running_at.values()) - t_create

    async def _steady(self, pid: int) -> None:
        """The steady state for Spec.hold: CPU and RSS, relist durations (with
        the CRI control beside them), scrapes, kills."""
        r = self.result
        before = self._buckets_or_empty(RELIST_HIST)
        spy = self._start_profile(pid)
        c0, w0 = proc_cpu_s(pid), time.monotonic()
        s0 = proc_cpu_s(self.sim_pid) if self.sim_pid is not None else 0.0
        u0 = self.ctd.usage() if self.ctd is not None else None
        control = None
        if self.spec.cri_control and self.endpoint:
            control = cri_probe.start(self.endpoint, self.spec.relist, self.spec.hold)
        await self._sample_cpu(pid)
        r.steady_cpu_cores = (proc_cpu_s(pid) - c0) / (time.monotonic() - w0)
        if self.sim_pid is not None:
            r.sim_cpu_cores = (proc_cpu_s(self.sim_pid) - s0) / (time.monotonic() - w0)
        r.steady_rss_mib = proc_rss_mib(pid)
        if u0 is not None and self.ctd is not None and (u1 := self.ctd.usage(pss=True)):
            self._runtime_usage(u0, u1, time.monotonic() - w0)
        after = self._buckets_or_empty(RELIST_HIST)
        if r.kubelet != "kwok":
            self._metrics_text("metrics-steady.txt")  # for the metric parity check
        if spy is not None:
            r.profile_top, r.profile_inclusive = profile.finish(self.dir, spy)
        if self.spec.scrapes and self.ro:
            r.scrape = await scrape.scrape_cost(self.ro, pid, self.spec.scrapes)
        if self.spec.kills and self.ctd is not None:
            await self._status_latency()
        if before and after and len(before) == len(after):
            steady = [(le, c - b) for (le, c), (_, b) in zip(after, before, strict=True)]
            p50, p99 = hist_quantile(steady, 0.5), hist_quantile(steady, 0.99)
            r.relist_p50_ms = None if p50 is None else p50 * 1000
            r.relist_p99_ms = None if p99 is None else p99 * 1000
        if control is not None:
            r.cri_list_p50_ms, r.cri_list_p99_ms, r.cri_list_p99_bucketed_ms = cri_probe.finish(
                control, [le for le, _ in after], self.spec.hold + 60
            )

    async def _delete_phase(self, admin: APIClient) -> None:
        t_del = time.monotonic()
        await self._delete_all(admin)
        names = set(self.created)
        # Real containers stop one runc delete at a time per pod, slower at density.
        per_pod = 1.0 if self.spec.runtime == "containerd" else 0.1
        if await self._wait(lambda: names <= self.deleted, max(180.0, self.spec.n * per_pod)):
            self.result.delete_all_s = time.monotonic() - t_del

    async def _stop_parts(self) -> None:
        self._stop_all()
        if self.ctd is not None:
            left = await self.ctd.remove_sandboxes()
            if left:
                print(f"{self.node}: stopped {left} sandboxes still ready", file=sys.stderr)
            self.ctd.stop()

    async def _count_api_requests(self) -> None:
        """The node's requests from the audit log, and their timing in the
        creation window."""
        r = self.result
        await asyncio.sleep(2)  # the audit log is written in batches
        audit_log = Path(self.cp.directory).parent / "audit.log"
        user = f"system:node:{self.node}"
        try:
            r.api_requests, r.api_by_kind = count_requests(audit_log, user)
            r.api_requests_per_pod = r.api_requests / max(1, self.spec.n)
            wall0, wall1 = self.window
            if wall0 and wall1:
                r.evidence["audit"] = evidence.audit_timing(audit_log, user, wall0, wall1 + 1.0)
        except (OSError, ValueError) as err:
            print(f"{self.node}: no audit figures: {err}", file=sys.stderr)

    async def _remove(self, admin: APIClient) -> None:
        """The namespace, the Node and what the kubelet left mounted."""
        try:
            await admin.request("DELETE", f"/api/v1/namespaces/{self.ns}")
            await admin.request("DELETE", f"/api/v1/nodes/{self.node}")
        except API_ERRORS as err:
            print(f"{self.node}: cleanup: {err}", file=sys.stderr)
        await admin.close()
        left = unmount_under(self.dir / "root")
        if left:
            print(f"{self.node}: unmounted {left} mounts it left behind", file=sys.stderr)
        shutil.rmtree(self.dir / "root", ignore_errors=True)
        remove_log_links_into(self.dir)

    async def _sample_cpu(self, pid: int) -> None:
        """The steady state: the kubelet's CPU in CPU_SAMPLE_S intervals, as upstream's
        kubelet_perf.go samples it (every 10 s), for its p50 and p95."""
        r, samples = self.result, []
        end = time.monotonic() + self.spec.hold
        while (left := end - time.monotonic()) > 0:
            c0, t0 = proc_cpu_s(pid), time.monotonic()
            await asyncio.sleep(min(CPU_SAMPLE_S, left))
            if time.monotonic() - t0 >= CPU_SAMPLE_S / 2:
                samples.append((proc_cpu_s(pid) - c0) / (time.monotonic() - t0))
        r.steady_cpu_samples = len(samples)
        r.steady_cpu_p50_cores = perf_percentile(samples, 0.50)
        r.steady_cpu_p95_cores = perf_percentile(samples, 0.95)

    async def _status_latency(self) -> None:
        r, probe = self.result, self.kill_probe
        assert self.ctd is not None
        assert self.ctd.ctd is not None
        before = buckets(self._metrics(), RELIST_HIST)
        await probe.kill(self.ctd.ctd.endpoint, sorted(self.running_at), self.spec.kills,
                         self.spec.kill_rate)  # fmt: skip
        await self._wait(lambda: probe.killed.keys() <= probe.seen.keys(), 120.0)
        after = buckets(self._metrics(), RELIST_HIST)
        if before and after and len(before) == len(after):
            window = [(le, c - b) for (le, c), (_, b) in zip(after, before, strict=True)]
            if window and window[-1][1] > 0:
                p50, p99 = hist_quantile(window, 0.5), hist_quantile(window, 0.99)
                r.kill_relist_p50_ms = None if p50 is None else p50 * 1000
                r.kill_relist_p99_ms = None if p99 is None else p99 * 1000
        lat = probe.latencies()
        r.killed = len(probe.killed)
        r.status_latencies_s = [round(x, 4) for x in lat]
        r.status_latency_p50_s, r.status_latency_p99_s = pct(lat, 0.5), pct(lat, 0.99)
        if probe.errors:
            print(f"{self.node}: kills that failed: {probe.errors[:5]}", file=sys.stderr)

    def _runtime_usage(self, u0: Usage, u1: Usage, secs: float) -> None:
        r = self.result
        r.containerd_cpu_cores = (u1.containerd_cpu_s - u0.containerd_cpu_s) / secs
        r.containerd_rss_mib = u1.containerd_rss_mib
        both = u0.shim_cpu_s.keys() & u1.shim_cpu_s.keys()
        r.shims = len(u1.shim_cpu_s)
        r.shims_cpu_cores = sum(u1.shim_cpu_s[p] - u0.shim_cpu_s[p] for p in both) / secs
        r.shims_rss_mib = u1.shims_rss_mib
        r.shims_pss_mib = u1.shims_pss_mib

    def _stop_all(self) -> None:
        for p in reversed(self.procs):
            if p.poll() is None:
                p.terminate()
        for p in reversed(self.procs):
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
