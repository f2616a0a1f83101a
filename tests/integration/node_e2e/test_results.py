"""Reading the node e2e suite's JUnit report, and the shim that runs our
kubelet under the suite."""

from __future__ import annotations

from pathlib import Path

from benches.node_e2e import kubelet_shim, results

PERL = "registry.k8s.io/e2e-test-images/perl:5.26"

JUNIT = f"""<?xml version="1.0" encoding="UTF-8"?>
<testsuites><testsuite name="E2eNode Suite">
 <testcase name="[It] [sig-node] A passes [NodeConformance] [sig-node, NodeConformance]"
   status="passed" time="3.2"></testcase>
 <testcase name="[It] [sig-node] B fails on a pull [NodeConformance]" status="failed" time="300">
  <failure message="Timed out after 300s.&#xA;more">...</failure>
  <system-err>Event: Failed to pull image \\"{PERL}\\": not found</system-err>
 </testcase>
 <testcase name="[It] [sig-node] C fails [NodeConformance]" status="failed" time="5">
  <failure message="expected 1 to equal 2">...</failure>
  <system-err>the spec mentions {PERL} but never pulled it</system-err>
 </testcase>
 <testcase name="[It] [sig-node] D filtered [Serial]" status="skipped" time="0">
  <skipped message="skipped"></skipped>
 </testcase>
 <testcase name="[It] [sig-node] E skips itself" status="skipped" time="0.1">
  <skipped message="skipped - only on cgroup v2"></skipped>
 </testcase>
 <testcase name="[SynchronizedBeforeSuite]" status="passed" time="9"></testcase>
</testsuite></testsuites>
"""


def test_parse_junit_states(tmp_path: Path) -> None:
    path = tmp_path / "junit.xml"
    path.write_text(JUNIT)
    tests = {t.name: t for t in results.parse_junit(path, [PERL])}
    assert set(tests) == {
        "[sig-node] A passes [NodeConformance]",
        "[sig-node] B fails on a pull [NodeConformance]",
        "[sig-node] C fails [NodeConformance]",
        "[sig-node] E skips itself",
    }
    assert tests["[sig-node] A passes [NodeConformance]"].state == results.PASSED
    # A pod that could not pull an image the harness cannot make: not run, never failed.
    b = tests["[sig-node] B fails on a pull [NodeConformance]"]
    assert (b.state, b.failure) == (results.NOT_RUN, f"image {PERL} not available")
    # Naming the image without a failed pull is an ordinary failure.
    c = tests["[sig-node] C fails [NodeConformance]"]
    assert (c.state, c.failure) == (results.FAILED, "expected 1 to equal 2")
    assert tests["[sig-node] E skips itself"].state == results.SKIPPED


def test_annotate_and_record_round_trip(tmp_path: Path) -> None:
    path = tmp_path / "junit.xml"
    path.write_text(JUNIT)
    up = results.NodeRunResult("upstream", "d", 1.0, 4, "f", "s")
    up.tests = results.parse_junit(path, [PERL])
    ours = results.NodeRunResult("ours", "d", 1.0, 4, "f", "s", notes=["dropped --x"])
    ours.tests = results.parse_junit(path, [PERL])
    ours.tests[0].state = results.FAILED  # A: upstream passes, ours fails
    results.annotate(ours, up)
    assert results.passed_where_upstream_passes(ours) == (0, 1)
    results.write(ours, tmp_path / "ours")
    back = results.load(tmp_path / "ours" / "results.json")
    assert back is not None and back.notes == ["dropped --x"]
    assert [t.state for t in back.tests] == [t.state for t in ours.tests]
    assert back.counts()[results.NOT_RUN] == 1
    assert "0 of 1" in (tmp_path / "ours" / "results.md").read_text()


def test_shim_drops_only_flags_ours_does_not_know() -> None:
    keep, dropped = kubelet_shim.split_unknown(
        ["--kubeconfig", "/k", "--no-such-flag-for-test", "/d", "--v", "4",
         "--no-such-either=1", "--config", "/c"]
    )  # fmt: skip
    assert keep == ["--kubeconfig", "/k", "--v", "4", "--config", "/c"]
    assert dropped == ["--no-such-flag-for-test", "/d", "--no-such-either=1"]


def test_disk_thresholds_follow_the_flag_and_warn_under_them(tmp_path: Path) -> None:
    from benches.node_e2e import harness, host

    hard = harness.base_config()["evictionHard"]
    assert isinstance(hard, dict)
    # The suite's config plus the kubelet's defaults for the signals it leaves out.
    assert host.disk_thresholds(hard, []) == {
        "nodefs.available": "10%",
        "nodefs.inodesFree": "5%",
        "imagefs.available": "15%",
        "imagefs.inodesFree": "5%",
    }
    flag = "--eviction-hard=memory.available<1Mi,nodefs.available<1%,imagefs.available<101%"
    thresholds = host.disk_thresholds(hard, [flag])
    assert thresholds == {"nodefs.available": "1%", "imagefs.available": "101%"}
    # No disk has more than 100% free: the impossible threshold is always reported, by name.
    notes = host.disk_pressure_notes(str(tmp_path), thresholds)
    assert len(notes) == 1 and "imagefs.available<101%" in notes[0]
    assert host.disk_pressure_notes(str(tmp_path), {"nodefs.available": "0%"}) == []
