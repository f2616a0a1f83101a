"""Parts shared by the fault drills: our kubelet as a process in cluster mode that a
drill can kill and start again on the same root dir, and the views a drill
compares before and after a fault (the API's pod statuses, the runtime's
sandboxes and containers, the volumes on disk)."""

from __future__ import annotations

import asyncio
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from kubelet.cri.api import api_pb2 as pb
from kubelet.cri.remote import RemoteRuntimeService
from kubelet.testing.controlplane import ControlPlane
from kubelet.testing.kubelets import KubeletProcess
from kubelet.testing.net import free_port

BUSYBOX = "docker.io/library/busybox:1.36"
CONFIGMAP = "drill-config"


def drill_kubelet(
    cp: ControlPlane,
    workdir: Path,
    endpoint: str,
    node: str,
    max_pods: int,
    config: dict[str, Any] | None = None,
    root_dir: Path | None = None,
    extra_args: tuple[str, ...] = (),
    api_server: str | None = None,
) -> KubeletProcess:
    """Our kubelet joined to `cp` as `node`, on the runtime at `endpoint` (not
    started yet). Every start uses the same root dir, cert dir and config: a
    restart finds what the previous process left."""
    kubeconfig = cp.node_kubeconfig(node)
    if api_server is not None:  # through a proxy
        workdir.mkdir(parents=True, exist_ok=True)
        kubeconfig = kubeconfig_via(kubeconfig, api_server, workdir / "via.kubeconfig")
    return KubeletProcess(
        workdir,
        endpoint,
        node,
        cp=cp,
        config={
            "maxPods": max_pods,
            "address": "127.0.0.1",
            "cgroupDriver": "cgroupfs",
            "cgroupsPerQOS": False,
            "enforceNodeAllocatable": [],
            "failSwapOn": False,
            "kubeAPIQPS": 200,
            "kubeAPIBurst": 400,
            "serializeImagePulls": False,
            "plegRelistPeriod": "250ms",
            "nodeStatusUpdateFrequency": "2s",
            "nodeLeaseDurationSeconds": 10,
            "authentication": {
                "anonymous": {"enabled": True},
                "webhook": {"enabled": False},
            },
            "authorization": {"mode": "AlwaysAllow"},
            "evictionHard": {"memory.available": "100Mi"},
            "resolvConf": "",
            **(config or {}),
        },
        kubeconfig=kubeconfig,
        node_ip="127.0.0.1",
        root_dir=root_dir,
        pod_logs_dir=workdir / "logs",
        flags=extra_args,
        new_session=True,
        stop_timeout=60,
    )


def pod(
    name: str, ns: str, node: str, command: str, volumes: bool = True, image: str = BUSYBOX
) -> dict[str, Any]:
    """A pod with an emptyDir and a configMap volume; its container runs `command`."""
    container: dict[str, Any] = {
        "name": "main",
        "image": image,
        "imagePullPolicy": "IfNotPresent",
        "command": ["sh", "-c", command],
    }
    spec: dict[str, Any] = {
        "nodeName": node,
        "terminationGracePeriodSeconds": 2,
        "automountServiceAccountToken": False,
        "tolerations": [{"operator": "Exists"}],
        "containers": [container],
    }
    if volumes:
        spec["volumes"] = [
            {"name": "data", "emptyDir": {}},
            {"name": "config", "configMap": {"name": CONFIGMAP}},
        ]
        container["volumeMounts"] = [
            {"name": "data", "mountPath": "/data"},
            {"name": "config", "mountPath": "/config", "readOnly": True},
        ]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": ns, "labels": {"drill": ns}},
        "spec": spec,
    }


def create_namespace(cp: ControlPlane, ns: str, workdir: Path) -> None:
    cp.kubectl("create", "namespace", ns)
    # The controller-manager's serviceaccount controller may not have made it yet.
    cp.kubectl("create", "serviceaccount", "default", "-n", ns, check=False)
    cp.kubectl("create", "configmap", CONFIGMAP, "-n", ns, "--from-literal=mode=drill")


def create_pods(cp: ControlPlane, pods: list[dict[str, Any]], workdir: Path) -> None:
    for i in range(0, len(pods), 200):
        path = workdir / f"pods-{time.monotonic_ns()}.yaml"
        path.write_text(yaml.safe_dump_all(pods[i : i + 200]))
        cp.kubectl("create", "-f", str(path))


def running(pods: dict[str, dict[str, Any]]) -> int:
    n = 0
    for p in pods.values():
        cs = p.get("status", {}).get("containerStatuses") or []
        if (
            p.get("status", {}).get("phase") == "Running"
            and cs
            and all("running" in c["state"] for c in cs)
        ):
            n += 1
    return n


def status_view(pods: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """What a restart must not change in the API: phase, conditions, and each
    container's ID, restartCount, state and readiness."""
    out = {}
    for name, p in pods.items():
        st = p.get("status", {})
        out[name] = {
            "phase": st.get("phase"),
            "podIP": st.get("podIP"),
            "startTime": st.get("startTime"),
            "conditions": sorted(
                (c["type"], c["status"], c.get("lastTransitionTime"))
                for c in st.get("conditions", [])
            ),
            "containers": sorted(
                (
                    c["name"],
                    c.get("containerID"),
                    c["restartCount"],
                    json.dumps(c["state"], sort_keys=True),
                    c.get("ready"),
                )
                for c in st.get("containerStatuses", [])
            ),
        }
    return out


def diff(before: dict[str, Any], after: dict[str, Any], limit: int = 5) -> list[str]:
    out = []
    for k in sorted(set(before) | set(after)):
        b, a = before.get(k), after.get(k)
        if b == a:
            continue
        if isinstance(b, dict) and isinstance(a, dict):
            fields = sorted(f for f in set(b) | set(a) if b.get(f) != a.get(f))
            out.append(f"{k}: " + ", ".join(f"{f} {b.get(f)!r} -> {a.get(f)!r}" for f in fields))
        else:
            out.append(f"{k}: {b!r} -> {a!r}")
    return out[:limit] + ([f"... {len(out) - limit} more"] if len(out) > limit else [])


@dataclass
class RuntimeView:
    sandboxes: dict[str, tuple[str, int, int]]  # id -> (pod uid, attempt, state)
    containers: dict[str, tuple[str, str, int, int]]  # id -> (sandbox id, name, attempt, state)

    def ready_sandboxes_per_pod(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for uid, _, state in self.sandboxes.values():
            if state == pb.SANDBOX_READY:
                out[uid] = out.get(uid, 0) + 1
        return out

    def running_ids(self) -> set[str]:
        return {cid for cid, (_, _, _, st) in self.containers.items() if st == pb.CONTAINER_RUNNING}


def runtime_view(endpoint: str, namespace: str | None = None) -> RuntimeView:
    """The runtime's sandboxes and containers; with `namespace`, only that
    namespace's pods (a runtime shared with other tests' kubelets holds theirs
    too, which this drill's kubelet rightly removes as pods nobody wants)."""

    async def run() -> RuntimeView:
        rt = RemoteRuntimeService(endpoint, 60)
        try:
            sbs = await rt.list_pod_sandbox()
            cs = await rt.list_containers()
        finally:
            await rt.close()
        if namespace is not None:
            sbs = [s for s in sbs if s.metadata.namespace == namespace]
            ids = {s.id for s in sbs}
            cs = [c for c in cs if c.pod_sandbox_id in ids]
        return RuntimeView(
            {s.id: (s.metadata.uid, s.metadata.attempt, s.state) for s in sbs},
            {c.id: (c.pod_sandbox_id, c.metadata.name, c.metadata.attempt, c.state) for c in cs},
        )

    return asyncio.run(run())


def volume_view(root: Path, pods: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Per pod: the emptyDir's inode and the test's marker file in it, and the
    configMap volume's current `..data` target (a new one means written again)."""
    out = {}
    for name, p in pods.items():
        vols = root / "pods" / p["metadata"]["uid"] / "volumes"
        ed = vols / "kubernetes.io~empty-dir" / "data"
        cm = vols / "kubernetes.io~configmap" / "config"
        marker = ed / "marker"
        out[name] = {
            "emptydir_inode": ed.stat().st_ino if ed.exists() else None,
            "marker": marker.read_text() if marker.exists() else None,
            "configmap_data": os.readlink(cm / "..data") if (cm / "..data").is_symlink() else None,
        }
    return out


def mark_emptydirs(root: Path, pods: dict[str, dict[str, Any]]) -> None:
    """A file the kubelet did not write, in each pod's emptyDir on the host."""
    for name, p in pods.items():
        ed = root / "pods" / p["metadata"]["uid"] / "volumes" / "kubernetes.io~empty-dir" / "data"
        marker = ed / "marker"
        if not marker.exists():
            marker.write_text(f"{name} {time.time_ns()}")


class CuttableProxy:
    """A TCP proxy in its own thread between the kubelet and the API server; cut()
    drops every connection through it (watches and requests in flight), as a
    flaky network or a load balancer's idle timeout would."""

    def __init__(self, upstream_host: str, upstream_port: int) -> None:
        import threading

        self.upstream = (upstream_host, upstream_port)
        self.port = free_port()
        self.cuts = 0
        self._loop = asyncio.new_event_loop()
        self._writers: set[asyncio.StreamWriter] = set()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, name="cuttable-proxy", daemon=True)

    def start(self) -> CuttableProxy:
        self._thread.start()
        self._ready.wait(10)
        return self

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        server = self._loop.run_until_complete(
            asyncio.start_server(self._handle, "127.0.0.1", self.port)
        )
        self._ready.set()
        try:
            self._loop.run_forever()
        finally:
            server.close()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            ur, uw = await asyncio.open_connection(*self.upstream)
        except OSError:
            writer.close()
            return
        self._writers.update((writer, uw))

        async def pump(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
            try:
                while data := await src.read(65536):
                    dst.write(data)
                    await dst.drain()
            except (OSError, asyncio.IncompleteReadError):
                pass
            finally:
                dst.close()

        await asyncio.gather(pump(reader, uw), pump(ur, writer))
        self._writers.difference_update((writer, uw))

    def cut(self) -> None:
        def drop() -> None:
            for w in list(self._writers):
                w.transport.abort()
            self._writers.clear()

        self.cuts += 1
        self._loop.call_soon_threadsafe(drop)

    def stop(self) -> None:
        self.cut()
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)


def kubeconfig_via(path: str, server: str, out: Path) -> str:
    """The kubeconfig at `path` with its cluster's server replaced."""
    doc = yaml.safe_load(Path(path).read_text())
    for c in doc["clusters"]:
        c["cluster"]["server"] = server
    out.write_text(yaml.safe_dump(doc))
    return str(out)
