"""One rule for a real part that cannot start (kubelet/testing/parts.py): a
skip that says why locally, a failure with the part's log tail under CI=true.
Each case runs pytest in a subprocess on a tiny generated test, so the outcome
seen is pytest's own."""

from __future__ import annotations

import ast
import subprocess
from pathlib import Path

import pytest

from kubelet.testing.parts import on_ci
from tests.unit.testing.generated import BROKEN_SCRIPT, REPO, run_generated, run_lib_sh

BROKEN_PART = """
from kubelet.testing.parts import starting

class Broken(Exception):
    pass

def test_needs_the_part(tmp_path):
    log = tmp_path / "part.log"
    log.write_text("line one\\npart says: broken on purpose\\n")
    with starting("the part", Broken, log_tail=lambda: log.read_text()):
        raise Broken("exited with 3")
"""


@pytest.mark.parametrize("ci", ["true", "1"])
def test_a_part_that_cannot_start_fails_under_ci_with_its_log_tail(tmp_path: Path, ci: str) -> None:
    out = run_generated(tmp_path, BROKEN_PART, ci)
    assert "1 failed" in out, out
    assert "the part unavailable: exited with 3" in out, out
    assert "part says: broken on purpose" in out, out
    assert "CI=true: a real part that cannot start fails the run" in out, out


def test_locally_the_same_part_is_a_skip_that_says_why(tmp_path: Path) -> None:
    out = run_generated(tmp_path, BROKEN_PART, None)
    assert "1 skipped" in out, out
    assert "failed" not in out, out
    assert "the part unavailable: exited with 3" in out, out  # -rs prints the reason


@pytest.mark.parametrize(
    ("value", "ci"),
    [(None, False), ("", False), ("0", False), ("false", False), ("no", False),
     ("true", True), ("1", True), ("yes", True)],
)  # fmt: skip
def test_what_counts_as_ci(monkeypatch: pytest.MonkeyPatch, value: str | None, ci: bool) -> None:
    if value is None:
        monkeypatch.delenv("CI", raising=False)
    else:
        monkeypatch.setenv("CI", value)
    assert on_ci() is ci


# Skips that are not about a missing part: a host feature or privilege this
# machine may lack, or an opt-in test. Every other pytest.skip / skipif /
# importorskip in the tests goes through kubelet.testing.parts.
ALLOWED_SKIPS = {
    # KUBELET_IMPL=reference runs the pure-Python references alone; the
    # equivalence proofs need the native module beside them.
    "tests/equivalence/test_cache_equiv.py": 1,
    "tests/equivalence/test_relist_equiv.py": 1,
    "tests/equivalence/test_rawlist_equiv.py": 1,
    "tests/equivalence/test_fnv_equiv.py": 1,
    "tests/equivalence/test_stats_equiv.py": 1,
    "tests/equivalence/test_workqueue_equiv.py": 1,
    # ... and a writable cgroup v2 mount (root, a kernel with cgroup2).
    "tests/equivalence/test_cgroup_reader_equiv.py": 2,
    # Opt-in (KUBELET_TEST_WHEELS=1): builds and installs the release wheels.
    "tests/integration/test_packaging.py": 1,
    # Compares with cgroup v1 files: a host on cgroup v2 only has none.
    "tests/integration/cluster/test_exec.py": 1,
    # Mounting a tmpfs needs root.
    "tests/integration/drills/test_disk_full.py": 1,
    # Mounting (bind, tmpfs) is not permitted to every user or container.
    "tests/unit/volume/test_volumemanager.py": 1,
    "tests/unit/volume/test_emptydir.py": 1,
    "tests/unit/volume/test_csi_paths.py": 1,
    # A block device under /dev: not every container has one.
    "tests/unit/volume/test_hostpath.py": 1,
    # Swap accounting (memory.memsw) is a kernel boot option on cgroup v1.
    "tests/integration/core/test_containerd2.py": 1,
    # Memory usage notifications exist on cgroup v1 only (and need root).
    "tests/integration/core/test_memcg_notifier.py": 1,
    # The reference-only run (no native module); a kernel built without PSI.
    "tests/unit/stats/test_pressure_swap.py": 2,
}

SKIP_CALLS = {"skip", "skipif", "importorskip"}


def skip_calls(path: Path) -> int:
    tree = ast.parse(path.read_text(), str(path))
    n = 0
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            f = node.func
            name = f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", "")
            n += name in SKIP_CALLS
    return n


def test_every_other_skip_goes_through_the_part_mechanism() -> None:
    found = {}
    for top in ("tests", "benches", "kubelet/testing"):
        for path in sorted((REPO / top).rglob("*.py")):
            rel = str(path.relative_to(REPO))
            if rel in ("kubelet/testing/parts.py", "tests/unit/testing/test_parts.py"):
                continue
            n = skip_calls(path)
            if n:
                found[rel] = n
    extra = {k: v for k, v in found.items() if v > ALLOWED_SKIPS.get(k, 0)}
    assert not extra, (
        f"skips outside kubelet.testing.parts: {extra}. A missing real part: call "
        "part_unavailable() / starting(); a host feature: add it to ALLOWED_SKIPS with why."
    )
    stale = {k: v for k, v in ALLOWED_SKIPS.items() if found.get(k, 0) < v}
    assert not stale, f"ALLOWED_SKIPS lists skips that are gone: {stale}"


def run_parts(tmp_path: Path, ci: str | None) -> subprocess.CompletedProcess[str]:
    """hack/lib.sh's prepare_parts + report_parts on a part that sets up and one that fails."""
    parts = {"fine": "echo fine\n", "broken": BROKEN_SCRIPT}
    d = tmp_path / "parts"
    script = f"prepare_parts {tmp_path}/log {d}/*.sh && report_parts {tmp_path}/log"
    return run_lib_sh(tmp_path, ci, parts, script)


def test_hack_fails_under_ci_when_a_part_cannot_be_set_up(tmp_path: Path) -> None:
    r = run_parts(tmp_path, "true")
    assert r.returncode == 1, r
    assert "part fine ready" in r.stderr
    assert "part broken: set-up FAILED (exit 7" in r.stderr
    assert "broken on purpose" in r.stderr  # the tail of its log
    assert "CI=true: real parts that cannot be set up fail the run: broken" in r.stderr


def test_hack_warns_locally_when_a_part_cannot_be_set_up(tmp_path: Path) -> None:
    r = run_parts(tmp_path, None)
    assert r.returncode == 0, r
    assert "broken on purpose" in r.stderr
    assert "WARNING: broken not set up; tests that need them will skip and say why" in r.stderr
