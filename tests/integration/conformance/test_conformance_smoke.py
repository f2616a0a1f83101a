"""A handful of fast node conformance tests against our kubelet, through the
same harness as the full run (python -m benches.conformance): a real control
plane with its controllers, containerd with runc, the upstream e2e binary."""

from __future__ import annotations

from pathlib import Path

import pytest

from benches.conformance import harness, results

pytestmark = [pytest.mark.conformance, pytest.mark.timeout(900)]

# Fast specs that exercise the pod path end to end: container start with the
# image's defaults and with overrides, logs, init containers, the status of a
# failing container, host IP, pod deletion.
SMOKE = [
    r"Containers should use the image defaults if command and args are blank",
    r"Containers should be able to override the image's default arguments \(container cmd\)",
    r"Kubelet when scheduling a busybox command in a pod should print the output to logs",
    r"InitContainer \[NodeConformance\] should invoke init containers on a RestartNever pod",
    r"Kubelet when scheduling a busybox command that always fails in a pod should have an terminated reason",
    r"Pods should get a host IP",
    r"Pods should be submitted and removed",
]


def test_smoke_subset_passes_on_our_kubelet(
    conformance_images: dict[str, str], tmp_path: Path
) -> None:
    opts = harness.Options(
        kubelet="ours",
        workdir=tmp_path,
        focus="|".join(SMOKE),
        procs=2,
        timeout_s=10 * 60,
    )
    run = harness.run_one(opts, conformance_images)
    assert not run.error, run.error
    failed = {t.name: t.failure for t in run.tests if t.state != results.PASSED}
    assert not failed, failed
    # Every pattern matched one spec: a renamed test cannot pass by vanishing.
    assert len(run.tests) == len(SMOKE), [t.name for t in run.tests]
