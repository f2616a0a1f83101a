"""A few node e2e specs (test/e2e_node of k8s.io/kubernetes) against our
kubelet, through the same harness as the full run (python -m benches.node_e2e):
the suite's own API server, containerd with runc, the systemd stand-ins, the
run's private mount and cgroup namespaces."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from benches.node_e2e import harness, results
from kubelet.testing.images import ImageSet
from kubelet.testing.kubelets import TEST_EVICTION_HARD

pytestmark = [pytest.mark.node_e2e, pytest.mark.timeout(1500)]

# Fast specs of the node suite itself (the common ones are the conformance
# smoke's): pods under the QoS cgroups the suite expects, the container log
# paths (CRI and the legacy /var/log/containers link), a static pod and its
# mirror, a pod deleted while pending.
SMOKE = [
    "Kubelet Cgroup Manager QOS containers On enabling QOS cgroup hierarchy Top level QoS containers should have been created",
    "Kubelet Cgroup Manager Pod containers .NodeConformance. On scheduling a BestEffort Pod Pod containers should have been created under the BestEffort cgroup",
    "ContainerLogPath .NodeConformance. Pod with a container printed log to stdout should print log to correct log path",
    "ContainerLogPath .NodeConformance. Pod with a container printed log to stdout should print log to correct cri log path",
]

# Upstream's node e2e config evicts at imagefs.available<15%; a shared test disk
# sits near that, and DiskPressure then refuses every pod of the slice (seen on
# this machine at 14% free). The slice tests the specs, not the host's disk: the
# test kubelets' thresholds, as a flag (flags win over the suite's config file).
EVICTION_FLAG = "--eviction-hard=" + ",".join(f"{k}<{v}" for k, v in TEST_EVICTION_HARD.items())


def test_smoke_slice_passes_on_our_kubelet(node_e2e_images: ImageSet, tmp_path: Path) -> None:
    opts = harness.Options(
        kubelet="ours",
        workdir=tmp_path,
        focus="|".join(SMOKE),
        procs=2,
        timeout_s=15 * 60,
        kubelet_flags=[EVICTION_FLAG],
    )
    run = harness.run_one(opts, node_e2e_images)
    assert not run.error, run.error
    failed = {t.name: t.failure for t in run.tests if t.state != results.PASSED}
    assert not failed, failed
    # Every pattern matched exactly one spec: a renamed spec cannot pass by vanishing.
    for pattern in SMOKE:
        assert sum(bool(re.search(pattern, t.name)) for t in run.tests) == 1, pattern
