"""cpuCFSQuota and cpuCFSQuotaPeriod reach the containers' CRI resources and
the sandbox's, as upstream's calculateLinuxResources applies them."""

from __future__ import annotations

from typing import Any

from kubelet.kuberuntime.kuberuntime_container_linux import NodeSettings, container_resources
from kubelet.kuberuntime.kuberuntime_sandbox import sandbox_resources


def limited_pod() -> Any:
    c = {"name": "app", "resources": {"requests": {"cpu": "500m"}, "limits": {"cpu": "1500m"}}}
    return {"metadata": {"uid": "u", "name": "p", "namespace": "ns"}, "spec": {"containers": [c]}}


def test_the_configured_period_gives_the_quota() -> None:
    p = limited_pod()
    c = p["spec"]["containers"][0]
    default = container_resources(p, c, NodeSettings())
    assert (default.cpu_period, default.cpu_quota, default.cpu_shares) == (100000, 150000, 512)
    short = container_resources(p, c, NodeSettings(cfs_period=50000))
    assert (short.cpu_period, short.cpu_quota) == (50000, 75000)
    sb = sandbox_resources(p, no_quota=False, cfs_period=50000)
    assert (sb.cpu_period, sb.cpu_quota) == (50000, 75000)


def test_cfs_quota_off_leaves_cpu_limits_to_shares() -> None:
    p = limited_pod()
    off = container_resources(p, p["spec"]["containers"][0], NodeSettings(cfs_period=None))
    assert (off.cpu_period, off.cpu_quota, off.cpu_shares) == (0, 0, 512)
    sb = sandbox_resources(p, no_quota=False, cfs_period=None)
    assert (sb.cpu_period, sb.cpu_quota, sb.cpu_shares) == (0, 0, 512)
