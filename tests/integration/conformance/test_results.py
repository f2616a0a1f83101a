"""The harness's reading of ginkgo's JUnit report, its causes and its crash
report, on small inputs (no cluster)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from benches.conformance import harness, results
from kubelet.testing.controlplane import ControlPlane

JUNIT = """<?xml version="1.0" encoding="UTF-8"?>
<testsuites tests="5" failures="2">
  <testsuite name="node conformance" tests="5">
    <testcase name="[SynchronizedBeforeSuite]" classname="node conformance" status="passed" time="0.1"></testcase>
    <testcase name="[It] [sig-node] Pods should get a host IP [NodeConformance] [Conformance] [sig-node, NodeConformance, Conformance]" classname="node conformance" status="passed" time="2.5"></testcase>
    <testcase name="[It] [sig-storage] EmptyDir volumes should support (root,0644,tmpfs) [LinuxOnly] [NodeConformance] [Conformance] [sig-storage, NodeConformance, Conformance]" classname="node conformance" status="failed" time="300.2">
      <failure message="Timed out after 300.000s.&#xA;Expected pod to be running" type="failed">...</failure>
    </testcase>
    <testcase name="[It] [sig-node] Secrets should be consumable via the environment [NodeConformance] [Conformance] [sig-node, NodeConformance, Conformance]" classname="node conformance" status="failed" time="4.1">
      <failure message="expected &quot;data-1=value-1&quot; in container output" type="failed">...</failure>
    </testcase>
    <testcase name="[It] [sig-node] Pods should be updated [NodeConformance] [Conformance] [sig-node, NodeConformance, Conformance]" classname="node conformance" status="skipped" time="0">
      <skipped message="skipped"></skipped>
    </testcase>
  </testsuite>
</testsuites>
"""


def test_junit_specs_labels_stripped_filtered_specs_dropped(tmp_path: Path) -> None:
    path = tmp_path / "junit.xml"
    path.write_text(JUNIT)
    tests = {t.name: t for t in results.parse_junit(path)}
    # The suite node that passed and the spec filtered out by --focus are not results.
    assert sorted(tests) == [
        "[sig-node] Pods should get a host IP [NodeConformance] [Conformance]",
        "[sig-node] Secrets should be consumable via the environment [NodeConformance] [Conformance]",
        "[sig-storage] EmptyDir volumes should support (root,0644,tmpfs) [LinuxOnly] [NodeConformance] [Conformance]",
    ]
    empty_dir = tests[
        "[sig-storage] EmptyDir volumes should support (root,0644,tmpfs) [LinuxOnly] [NodeConformance] [Conformance]"
    ]
    assert empty_dir.state == results.FAILED
    assert empty_dir.failure == "Timed out after 300.000s."
    assert empty_dir.duration_s == 300.2


def test_causes_and_the_figure_against_upstream(tmp_path: Path) -> None:
    path = tmp_path / "junit.xml"
    path.write_text(JUNIT)
    ours = results.RunResult("ours", "today", 1.0, 4, "", "", tests=results.parse_junit(path))
    upstream = results.RunResult("upstream", "today", 1.0, 4, "", "")
    upstream.tests = [
        results.TestResult(t.name, results.PASSED if "Secrets" not in t.name else results.FAILED, 1)
        for t in ours.tests
    ]
    results.merge_upstream(ours, upstream)
    causes = {t.name.split(" should")[0]: results.classify(t) for t in ours.tests if t.failure}
    assert causes["[sig-storage] EmptyDir volumes"] == "volumes"
    assert causes["[sig-node] Secrets"].startswith("fails on upstream too: test image")
    assert results.passed_where_upstream_passes(ours) == (1, 2)
    results.write(ours, tmp_path / "ours")
    loaded = results.load(tmp_path / "ours" / "results.json")
    assert loaded is not None and loaded.counts() == ours.counts()
    assert (
        "Passed where the upstream kubelet passes: **1 of 2**"
        in (tmp_path / "ours" / "results.md").read_text()
    )


def test_a_crashed_kubelet_fails_the_run_with_its_last_lines(tmp_path: Path) -> None:
    run = harness.Run(harness.Options(kubelet="ours", workdir=tmp_path), {})
    run.kubelet_log.write_text("".join(f"line {i}\n" for i in range(100)) + "panic: boom\n")
    run.kubelet = subprocess.Popen([sys.executable, "-c", "raise SystemExit(3)"])
    run.kubelet.wait()
    with pytest.raises(harness.RunFailed) as err:
        run._check_kubelet()
    text = str(err.value)
    assert "exited with 3" in text
    assert text.rstrip().endswith("panic: boom")
    assert "line 99" in text and "line 10\n" not in text


def _suite_in_argv(tmp_path: Path, opts: harness.Options) -> list[str]:
    run = harness.Run(opts, {})
    run.cp = ControlPlane(str(tmp_path / "cp"), admin_kubeconfig=str(tmp_path / "admin"))
    argv = run.ginkgo_argv()
    # The binary is ginkgo's last positional argument before "--".
    return [a for a in argv[: argv.index("--")] if a.endswith(".test")]


def test_the_suite_option_selects_the_e2e_binary_ginkgo_runs(tmp_path: Path) -> None:
    default = harness.Options(kubelet="ours", workdir=tmp_path)
    assert _suite_in_argv(tmp_path, default) == [str(harness.BIN / "e2e.test")]
    storage = harness.Options(kubelet="upstream", workdir=tmp_path, suite="e2e-storage.test")
    assert _suite_in_argv(tmp_path, storage) == [str(harness.BIN / "e2e-storage.test")]
    # Only a binary a recipe builds is accepted, before anything starts.
    r = subprocess.run(
        [sys.executable, "-m", "benches.conformance", "--suite", "e2e_node.test"],
        capture_output=True,
        text=True,
        cwd=harness.REPO,
    )
    assert r.returncode == 2 and "invalid choice: 'e2e_node.test'" in r.stderr
