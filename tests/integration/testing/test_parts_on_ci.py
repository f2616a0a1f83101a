"""The containerd fixture itself, with containerd broken (its binary a script
that prints a line and exits 3): under CI=true the test that asked for it
fails with containerd's log tail; locally it is skipped, saying why."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.unit.testing.generated import run_generated

# Needs what the containerd fixture checks before it starts the binary (root,
# the CNI plugins): hack/parts/containerd.sh.
pytestmark = pytest.mark.containerd

ASKS_FOR_CONTAINERD = """
def test_needs_containerd(containerd):
    raise AssertionError("containerd cannot have started")
"""

FAKE = """#!/bin/sh
echo "fake containerd: broken on purpose ($*)"
exit 3
"""


def _remove_broken_runs() -> None:
    """The fixture's directories of the broken containerd (its own path under /tmp)."""
    for d in Path("/tmp").glob("kpy-ctd-*"):
        log = d / "containerd.log"
        if log.is_file() and "fake containerd: broken on purpose" in log.read_text(
            errors="replace"
        ):
            shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def broken_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name in ("containerd", "runc", "ctr"):
        (bin_dir / name).write_text(FAKE)
        (bin_dir / name).chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    # The flavour whose binaries are looked up on PATH, where the fakes stand
    # (containerd 2's come from the build cache); the fixture's path is the same.
    monkeypatch.setenv("KPY_CONTAINERD", "1.6")
    work = tmp_path / "run"
    work.mkdir()
    yield work
    _remove_broken_runs()


CONFTEST = 'pytest_plugins = ["tests.fixtures.containerd"]\n'


def test_broken_containerd_fails_the_run_under_ci(broken_path: Path) -> None:
    out = run_generated(broken_path, ASKS_FOR_CONTAINERD, "true", CONFTEST)
    assert "1 error" in out, out  # a fixture that fails is an error of its test
    assert "containerd unavailable: containerd exited with 3" in out, out
    assert "fake containerd: broken on purpose" in out, out  # the log tail
    assert "skipped" not in out, out


def test_broken_containerd_is_a_skip_locally(broken_path: Path) -> None:
    out = run_generated(broken_path, ASKS_FOR_CONTAINERD, None, CONFTEST)
    assert "1 skipped" in out, out
    assert "containerd unavailable: containerd exited with 3" in out, out
