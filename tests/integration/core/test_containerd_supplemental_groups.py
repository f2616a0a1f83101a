"""SupplementalGroupsPolicy on a real containerd: containerd 2 reports the
feature, so a Strict pod runs and its status carries the user the process runs
as; containerd 1.6 predates the field, so there the Strict pod is refused with
upstream's reason."""

from __future__ import annotations

import pytest

from kubelet.testing.images import BUSYBOX_REF
from kubelet.testing.kubelets import InProcessKubelet

pytestmark = pytest.mark.containerd

SECURITY = {"runAsUser": 1000, "runAsGroup": 3000, "supplementalGroups": [4000],
            "supplementalGroupsPolicy": "Strict"}  # fmt: skip


async def test_strict_pod_on_containerd(containerd_node: InProcessKubelet, containerd) -> None:  # type: ignore[no-untyped-def]  # fmt: skip
    node = containerd_node
    cmd = ["sh", "-c", "id; sleep 3600"]
    node.write("strict", [{"name": "c", "image": BUSYBOX_REF, "command": cmd}],
               securityContext=SECURITY)  # fmt: skip
    if str(containerd.flavor) == "1.6":
        await node.wait(lambda: node.phase("strict") == "Failed", what="strict refused")
        assert node.pod("strict")["status"]["reason"] == "SupplementalGroupsPolicyNotSupported"  # type: ignore[index]
        return
    await node.wait(lambda: node.phase("strict") == "Running", timeout=60, what="strict running")
    await node.wait(lambda: node.container("strict", "c")["user"], what="the user reported")
    user = node.container("strict", "c")["user"]["linux"]
    assert (user["uid"], user["gid"]) == (1000, 3000)
    assert set(user["supplementalGroups"]) == {3000, 4000}  # Strict: none from the image
