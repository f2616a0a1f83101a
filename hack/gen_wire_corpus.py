"""Write the fuzz corpus of rust/tests/corpus/: real CRI List responses.

Starts the simulated runtime, runs a few pods through it with the labels and
annotations the kubelet sets (one container running, one exited, one only
created, one sandbox stopped), and saves the raw ListPodSandbox and
ListContainers response bytes at each step. Run again only when the CRI
messages change: `python hack/gen_wire_corpus.py`.
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "rust" / "tests" / "corpus"


async def main() -> None:
    sys.path.insert(0, str(ROOT))
    from kubelet.cri.api import api_pb2 as pb
    from kubelet.cri.remote import RemoteImageService, RemoteRuntimeService
    from tests.fixtures.simruntime import start_simruntime

    with tempfile.TemporaryDirectory(prefix="corpus-") as d:
        sim = start_simruntime(Path(d))
        try:
            rt = RemoteRuntimeService(sim.endpoint)
            img = RemoteImageService(sim.endpoint)
            await img.pull_image(pb.ImageSpec(image="registry.k8s.io/pause:3.10"), None, None)
            step = 0

            async def dump() -> None:
                nonlocal step
                (OUT / f"sandboxes-{step}.bin").write_bytes(await rt.list_pod_sandbox_raw())
                (OUT / f"containers-{step}.bin").write_bytes(await rt.list_containers_raw())
                step += 1

            await dump()  # empty
            sids = []
            for i in range(3):
                uid = f"0b5e7a4c-93f1-4c55-9d1e-00000000000{i}"
                meta = pb.PodSandboxMetadata(name=f"web-{i}", uid=uid, namespace="default")
                cfg = pb.PodSandboxConfig(
                    metadata=meta,
                    hostname=f"web-{i}",
                    log_directory=f"/var/log/pods/default_web-{i}_{uid}",
                    labels={
                        "io.kubernetes.pod.name": f"web-{i}",
                        "io.kubernetes.pod.namespace": "default",
                        "io.kubernetes.pod.uid": uid,
                    },
                    annotations={"kubernetes.io/config.source": "file"},
                )
                sid = await rt.run_pod_sandbox(cfg, "")
                sids.append(sid)
                cc = pb.ContainerConfig(
                    metadata=pb.ContainerMetadata(name="app", attempt=0),
                    image=pb.ImageSpec(image="registry.k8s.io/pause:3.10"),
                    labels={
                        "io.kubernetes.container.name": "app",
                        "io.kubernetes.pod.name": f"web-{i}",
                        "io.kubernetes.pod.namespace": "default",
                        "io.kubernetes.pod.uid": uid,
                    },
                    annotations={"io.kubernetes.container.restartCount": "0"},
                    log_path="app/0.log",
                )
                cid = await rt.create_container(sid, cc, cfg)
                if i != 2:
                    await rt.start_container(cid)
                if i == 1:
                    await rt.stop_container(cid, 0)
            await dump()  # running, exited, created
            await rt.stop_pod_sandbox(sids[0])
            await dump()  # a sandbox not ready
        finally:
            sim.stop()
    print(f"wrote {len(list(OUT.glob('*.bin')))} files to {OUT}")


if __name__ == "__main__":
    asyncio.run(main())
