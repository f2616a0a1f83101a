"""CRI List calls at 1,000 and 10,000 containers on the simulated runtime:
the server's handler (cached bytes, and rebuilt after a change) and the client
round trip over the unix socket (raw bytes, as the relist uses them)."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kubelet.cri.api import api_pb2 as pb
from kubelet.cri.remote import RemoteImageService, RemoteRuntimeService
from kubelet.simruntime.server import SimRuntime
from kubelet.simruntime.state import Options

SIZES = [1000, 10000]


def sandbox_cfg(i: int) -> pb.PodSandboxConfig:
    uid = f"uid-{i:08d}"
    return pb.PodSandboxConfig(
        metadata=pb.PodSandboxMetadata(name=f"pod-{i}", uid=uid, namespace="default"),
        labels={"io.kubernetes.pod.uid": uid, "io.kubernetes.pod.name": f"pod-{i}"},
    )


def container_cfg(i: int) -> pb.ContainerConfig:
    return pb.ContainerConfig(
        metadata=pb.ContainerMetadata(name="app"),
        image=pb.ImageSpec(image="busybox:1.36"),
        command=["sleep", "infinity"],
        labels={"io.kubernetes.pod.uid": f"uid-{i:08d}", "io.kubernetes.container.name": "app"},
        annotations={"io.kubernetes.container.hash": "1a2b3c4d"},
    )


class Ctx:
    async def abort(self, code: object, msg: str) -> None:
        raise RuntimeError(msg)


def populated(n: int) -> tuple[SimRuntime, asyncio.AbstractEventLoop]:
    loop = asyncio.new_event_loop()

    async def build() -> SimRuntime:
        sim = SimRuntime(Options())
        sim.rt.add_image("busybox:1.36")
        for i in range(n):
            sid = sim.rt.run_pod_sandbox(sandbox_cfg(i), "")
            cid = sim.rt.create_container(sid, container_cfg(i))
            sim.rt.start_container(cid)
        return sim

    return loop.run_until_complete(build()), loop


@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("kind", ["cached", "rebuilt"])
def test_server_list_containers(benchmark, n: int, kind: str) -> None:  # type: ignore[no-untyped-def]
    benchmark.group = f"cri_list_server_{n}"
    benchmark.extra_info["impl"] = kind
    sim, loop = populated(n)
    req = pb.ListContainersRequest()

    def one() -> None:
        if kind == "rebuilt":
            sim.rt._changed()  # any state change invalidates the cached bytes
        loop.run_until_complete(sim.ListContainers(req, Ctx()))  # type: ignore[arg-type]

    benchmark(one)
    loop.close()


@pytest.fixture(scope="module")
def served() -> dict[int, str]:
    """A simulated runtime process per size, filled through its own gRPC API."""
    out: dict[int, str] = {}
    procs = []
    for n in SIZES:
        sock = Path(f"/tmp/bench-sim-{os.getpid()}-{n}.sock")
        p = subprocess.Popen(
            [sys.executable, "-m", "kubelet.simruntime", "--listen", f"unix://{sock}"]
        )
        procs.append(p)
        for _ in range(100):
            if sock.exists():
                break
            time.sleep(0.05)

        async def fill(n: int = n, sock: Path = sock) -> None:
            rt = RemoteRuntimeService(f"unix://{sock}", 30)
            img = RemoteImageService(f"unix://{sock}", 30)
            await img.pull_image(pb.ImageSpec(image="busybox:1.36"))
            sem = asyncio.Semaphore(64)

            async def one(i: int) -> None:
                async with sem:
                    sid = await rt.run_pod_sandbox(sandbox_cfg(i))
                    cid = await rt.create_container(sid, container_cfg(i), sandbox_cfg(i))
                    await rt.start_container(cid)

            await asyncio.gather(*(one(i) for i in range(n)))
            await rt.close()

        asyncio.run(fill())
        with open(f"/proc/{p.pid}/status") as fh:
            rss = next(int(line.split()[1]) for line in fh if line.startswith("VmRSS"))
        print(f"\nsimruntime with {n} sandboxes + {n} containers: RSS {rss / 1024:.0f} MiB")
        out[n] = f"unix://{sock}"
    yield out
    for p in procs:
        p.terminate()
        p.wait()


@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("call", ["containers", "sandboxes"])
def test_client_round_trip(benchmark, served: dict[int, str], n: int, call: str) -> None:  # type: ignore[no-untyped-def]
    benchmark.group = f"cri_list_roundtrip_{n}"
    benchmark.extra_info["impl"] = call
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)  # grpc.aio binds its channel to the current loop
    rt = RemoteRuntimeService(served[n], 30)
    fn = rt.list_containers_raw if call == "containers" else rt.list_pod_sandbox_raw

    def one() -> None:
        data = loop.run_until_complete(fn())
        assert len(data) > n * 50

    benchmark(one)
    loop.run_until_complete(rt.close())
    asyncio.set_event_loop(None)
    loop.close()
