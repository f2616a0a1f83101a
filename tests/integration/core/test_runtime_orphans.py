"""Housekeeping kills a pod that is in the runtime but that no source wants, and
does not walk every runtime pod again while nothing it depends on has changed."""

from __future__ import annotations

from typing import Any

from kubelet.cri.api import api_pb2 as pb
from kubelet.kuberuntime import labels
from kubelet.testing.wait import wait_for_async


async def test_unknown_runtime_pod_is_killed_and_quiet_rounds_skip_the_scan(node: Any) -> None:
    node.write("web", [{"name": "c", "image": "busybox"}])
    await node.wait(lambda: node.phase("web") == "Running", what="web running")
    k = node.kubelet
    await node.wait(lambda: k.pods.sources_ready.is_set(), what="sources ready")
    # A sandbox this kubelet never asked for (left by a pod deleted while it was down).
    meta = pb.PodSandboxMetadata(name="ghost", namespace="default", uid="ghost-uid")
    lbl = {labels.POD_UID: "ghost-uid", labels.POD_NAME: "ghost", labels.POD_NAMESPACE: "default"}
    sid = await node.rt.run_pod_sandbox(pb.PodSandboxConfig(metadata=meta, labels=lbl))

    async def ready_sandboxes() -> list[str]:
        ready = pb.PodSandboxFilter(state=pb.PodSandboxStateValue(state=pb.SANDBOX_READY))
        return [s.id for s in await node.rt.list_pod_sandbox(ready)]

    assert sid in await ready_sandboxes()

    async def stopped() -> bool:
        return sid not in await ready_sandboxes()

    await wait_for_async("the orphaned sandbox stopped", stopped, 10.0, 0.1, retry_on=())
    # Quiet now: rounds in which neither the runtime's pods (the relist), the
    # desired pods nor the workers change do not walk the runtime's pods again.
    differ = k.pleg.differ
    # Until the relist has seen the sandbox go, a finished kill leaves it in the
    # differ and the next scan kills it again: that would be a change, not quiet.
    await node.wait(lambda: "ghost-uid" not in differ.pod_ids(), what="relist saw it go")
    await node.wait(lambda: not k.orphans.killing, what="kill done")
    calls: list[int] = []
    real = differ.pod_ids
    differ.pod_ids = lambda: calls.append(1) or real()  # type: ignore[method-assign]
    try:
        for _ in range(50):  # the relist may still see the kill land: a quiet window
            await k.housekeeping()
            seen, calls[:] = differ.changes, []
            await k.housekeeping()
            await k.housekeeping()
            if differ.changes == seen:
                break
        else:
            raise AssertionError("the relist never stayed quiet")
        assert calls == []
        node.write("web2", [{"name": "c", "image": "busybox"}])  # a new desired pod
        await node.wait(lambda: node.phase("web2") == "Running", what="web2 running")
        await k.housekeeping()
        assert calls != []
    finally:
        differ.pod_ids = real  # type: ignore[method-assign]
