"""What a test does when a real part it needs (containerd, the control plane, a
Go-built tool, ...) cannot be set up or started here.

One rule for every test and fixture: locally the test is skipped and the skip
says why; on CI (`CI=true`) the test fails, with the part's log tail, because a
green run with the real-runtime tests skipped proves nothing. Skips that are
not about a missing part (a kernel feature this host lacks, an opt-in test) are
explicit `pytest.skip` calls listed in tests/unit/testing/test_parts.py.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import NoReturn

import pytest

LOG_TAIL_BYTES = 3000


def on_ci() -> bool:
    """True under CI (`CI` set to anything but empty, 0, false or no)."""
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


def part_unavailable(name: str, reason: str, log_tail: str = "") -> NoReturn:
    """Skip (locally) or fail (on CI) the current test: part `name` cannot run."""
    msg = f"{name} unavailable: {reason}"
    tail = log_tail.strip()
    if tail:
        msg += f"\n--- {name}: last lines of its log ---\n{tail}"
    if on_ci():
        pytest.fail(f"{msg}\n(CI=true: a real part that cannot start fails the run)", pytrace=False)
    pytest.skip(msg)


@contextmanager
def starting(
    name: str, *errors: type[BaseException], log_tail: Callable[[], str] = lambda: ""
) -> Iterator[None]:
    """Around a part's start: any of `errors` becomes part_unavailable(name, ...)."""
    try:
        yield
    except errors as err:
        part_unavailable(name, str(err), log_tail())


def tail_of(*paths: str | Path, limit: int = LOG_TAIL_BYTES) -> str:
    """The last bytes of each log file that exists (a directory: its *.log files)."""
    files: list[Path] = []
    for p in map(Path, paths):
        files.extend(sorted(p.glob("*.log")) if p.is_dir() else [p])
    out = []
    for f in files:
        try:
            with open(f, "rb") as fh:
                fh.seek(max(0, f.stat().st_size - limit))
                text = fh.read().decode(errors="replace").strip()
        except OSError:
            continue
        if text:
            out.append(f"[{f}]\n{text}")
    return "\n".join(out)


def require_binary(name: str, path: str | None, hint: str) -> str:
    """`path` when it is an executable file, else part_unavailable naming `hint`."""
    if path and os.access(path, os.X_OK):
        return path
    part_unavailable(name, f"{path or name} missing: {hint}")
