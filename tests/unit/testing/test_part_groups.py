"""hack/test.sh runs the tests in groups, each as soon as the real parts it
needs are set up: the selection by parts (tests/fixtures/part_groups.py) and
the shell side (hack/lib.sh run_groups) that waits for the parts, fails a
group whose part failed under CI=true and runs every other group."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fixtures import part_groups
from tests.unit.testing.generated import BROKEN_SCRIPT, REPO, run_lib_sh

TESTS = """
import pytest

def test_plain():
    pass

def test_bus(system_bus):
    pass

@pytest.mark.containerd
def test_marked_containerd():
    pass

def test_containerd_through_a_fixture(node_on_containerd):
    pass

@pytest.mark.cluster
def test_cluster(containerd):
    pass

@pytest.mark.crictl
@pytest.mark.containerd
def test_crictl():
    pass
"""

CONFTEST = """
import pytest

pytest_plugins = ["tests.fixtures.part_groups"]

@pytest.fixture
def containerd():
    return None

@pytest.fixture
def node_on_containerd(containerd):
    return None

@pytest.fixture
def system_bus():
    return None
"""


def selected(tmp_path: Path, *args: str) -> set[str]:
    """The generated tests pytest runs with `args`."""
    (tmp_path / "test_generated.py").write_text(TESTS)
    (tmp_path / "conftest.py").write_text(CONFTEST)
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
    }
    r = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--rootdir", str(tmp_path),
         "-rA", str(tmp_path / "test_generated.py"), *args],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=240,
    )  # fmt: skip
    assert r.returncode in (0, 5), r.stdout + r.stderr
    return {line.split("::")[-1] for line in r.stdout.splitlines() if line.startswith("PASSED ")}


def test_each_group_runs_the_tests_whose_parts_it_adds(tmp_path: Path) -> None:
    first = selected(tmp_path, "--parts-ready=containerd,dbus")
    assert first == {"test_plain", "test_bus"}
    second = selected(
        tmp_path, "--parts-ready=containerd,dbus,containerd2", "--parts-earlier=containerd,dbus"
    )
    assert second == {"test_marked_containerd", "test_containerd_through_a_fixture"}
    third = selected(
        tmp_path,
        "--parts-ready=containerd,dbus,containerd2,control-plane",
        "--parts-earlier=containerd,dbus,containerd2",
    )
    assert third == {"test_cluster"}
    last = selected(
        tmp_path, "--parts-ready=all", "--parts-earlier=containerd,dbus,containerd2,control-plane"
    )
    assert last == {"test_crictl"}
    # Without the options: everything, as before.
    assert selected(tmp_path) == first | second | third | last


def test_a_part_that_does_not_exist_is_a_usage_error(tmp_path: Path) -> None:
    with pytest.raises(
        AssertionError, match=re.escape("no hack/parts/<name>.sh for ['no-such-part']")
    ):
        selected(tmp_path, "--parts-ready=containerd,no-such-part")


def test_the_tables_name_parts_and_paths_that_exist() -> None:
    known = part_groups.known_parts()
    for table in (part_groups.MARKER_PARTS, part_groups.FIXTURE_PARTS, part_groups.PATH_PARTS):
        for parts in table.values():
            assert set(parts) <= known, parts
    for prefix in part_groups.PATH_PARTS:
        path, _, test = prefix.partition("::")
        assert (REPO / path).exists(), prefix
        if test:
            assert f"def {test}(" in (REPO / path).read_text(), prefix


# --- hack/lib.sh: run_groups ---

GROUP_CMD = """
group() {
    echo "RAN $1 ready=$2 earlier=$3"
    [ "$1" != failing ]
}
"""


def run_groups(tmp_path: Path, ci: str | None, *groups: str) -> subprocess.CompletedProcess[str]:
    """prepare_parts in the background on a slow part (`slow`, which leaves a
    file behind when done) and a broken one, then run_groups over `groups`."""
    parts = {"slow": f"sleep 2\ntouch {tmp_path}/slow.done\n", "broken": BROKEN_SCRIPT}
    d = tmp_path / "parts"
    quoted = " ".join(f"'{g}'" for g in groups)
    script = (
        f"{GROUP_CMD}\n"
        f"prepare_parts {tmp_path}/log {d}/slow.sh {d}/broken.sh &\n"
        f"run_groups {tmp_path}/log $! group {quoted}\n"
    )
    return run_lib_sh(tmp_path, ci, parts, script)


def test_a_group_starts_once_its_parts_are_done(tmp_path: Path) -> None:
    r = run_groups(tmp_path, "true", "first:", "slow one:slow")
    assert r.returncode == 0, r
    assert "RAN first ready= earlier=\n" in r.stdout
    # The slow part had finished when its group ran; the last group gets "all".
    assert "RAN slow one ready=all earlier=\n" in r.stdout
    assert (tmp_path / "slow.done").exists()
    assert "part slow ready" in r.stderr


def test_under_ci_a_group_whose_part_failed_fails_the_run_and_others_still_run(
    tmp_path: Path,
) -> None:
    r = run_groups(tmp_path, "true", "first:", "needs broken:broken", "after:slow")
    assert r.returncode == 1, r
    assert "RAN first" in r.stdout
    assert "RAN needs broken" not in r.stdout
    assert "part broken: set-up FAILED (exit 7" in r.stderr
    assert "broken on purpose" in r.stderr  # the tail of its log
    assert "tests of needs broken NOT RUN" in r.stderr
    assert "RAN after ready=all earlier=broken\n" in r.stdout
    assert "FAILED: needs broken" in r.stderr


def test_locally_a_group_whose_part_failed_runs_and_its_tests_skip(tmp_path: Path) -> None:
    r = run_groups(tmp_path, None, "first:", "needs broken:broken", "after:slow")
    assert r.returncode == 0, r
    assert "RAN needs broken ready=broken earlier=\n" in r.stdout
    assert "WARNING: broken not set up" in r.stderr


def test_a_failing_group_does_not_stop_the_next_and_fails_the_run(tmp_path: Path) -> None:
    r = run_groups(tmp_path, "true", "failing:", "after:slow")
    assert r.returncode == 1, r
    assert "RAN failing" in r.stdout and "RAN after" in r.stdout
    assert "FAILED: failing" in r.stderr
