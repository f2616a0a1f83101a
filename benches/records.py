"""Benchmark records: every published figure comes from one of these.

A record is one JSON file in benches/results/, written by the benchmark that
measured it:

    {"name": ..., "command": ..., "commit": ..., "date": ...,
     "machine": {"cores", "memory_gib", "kernel", "loadavg_start"},
     "figures": <the benchmark's own result>}

`begin()` is called before the measurement (it reads the load average then),
`write()` after. Records of runs made before this format (backfilled from the
result files of their day) carry a `note` saying what is not known about them.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypedDict

RESULTS = Path(__file__).resolve().parent / "results"
REPO = RESULTS.parents[1]


class Machine(TypedDict):
    cores: int | None
    memory_gib: float | None
    kernel: str | None
    loadavg_start: list[float] | None


def machine() -> Machine:
    """This machine, with the load average now (call before measuring)."""
    mem = None
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemTotal:"):
                    mem = round(int(line.split()[1]) / 2**20, 1)
    except OSError:
        pass
    return Machine(
        cores=os.cpu_count(),
        memory_gib=mem,
        kernel=os.uname().release,
        loadavg_start=[round(x, 2) for x in os.getloadavg()],
    )


def _git(*args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(REPO), *args], capture_output=True, text=True, check=False
    ).stdout.strip()


def dirty_files() -> list[str]:
    """Tracked files that differ from HEAD."""
    return _git("diff", "--name-only", "HEAD").splitlines()


def commit() -> str:
    """HEAD of this checkout, `-dirty` when tracked files differ from it."""
    head = _git("rev-parse", "HEAD") or "unknown"
    return f"{head}-dirty" if dirty_files() else head


@dataclass(frozen=True)
class Started:
    """What a record says about its run, taken when the run began."""

    command: str
    commit: str
    date: str
    machine: Machine
    dirty: tuple[str, ...] = ()  # the files that differed from the commit


def begin(argv: list[str] | None = None, module: str | None = None) -> Started:
    """Note the command, commit, time and machine before a benchmark runs."""
    args = sys.argv[1:] if argv is None else argv
    prog = f"python -m {module}" if module else shlex.quote(sys.argv[0])
    now = dt.datetime.now(dt.UTC).replace(microsecond=0)
    return Started(
        command=" ".join([prog, *map(shlex.quote, args)]),
        commit=commit(),
        date=now.isoformat().replace("+00:00", "Z"),
        machine=machine(),
        dirty=tuple(dirty_files()),
    )


def write(
    started: Started, name: str, figures: Any, out: Path | None = None, note: str = ""
) -> Path:
    """benches/results/<name>-<UTC time>.json (or under `out`); returns its path.
    `note`: what a reader should know about the run that the fields do not say."""
    directory = RESULTS if out is None else out
    directory.mkdir(parents=True, exist_ok=True)
    stamp = started.date.replace("-", "").replace(":", "")
    path = directory / f"{name}-{stamp}.json"
    record = {
        "name": path.stem,
        "command": started.command,
        "commit": started.commit,
        "date": started.date,
        "machine": started.machine,
        "figures": figures,
    }
    if started.dirty:
        record["dirty_files"] = list(started.dirty)
    if note:
        record["note"] = note
    path.write_text(json.dumps(record, indent=1, sort_keys=False) + "\n")
    print(f"record: {path}", file=sys.stderr)
    return path


REQUIRED = ("name", "command", "commit", "date", "machine", "figures")


def load(name: str) -> dict[str, Any]:
    """The record benches/results/<name>.json."""
    path = RESULTS / f"{name}.json"
    with open(path) as fh:
        record: dict[str, Any] = json.load(fh)
    return record


def problems(record: dict[str, Any], name: str) -> list[str]:
    """What this record lacks (backfilled records may leave machine fields null
    if their `note` says so)."""
    out = [f"{name}: no {k}" for k in REQUIRED if k not in record]
    if record.get("name") != name:
        out.append(f"{name}: its name field says {record.get('name')!r}")
    m = record.get("machine") or {}
    missing = [k for k in Machine.__annotations__ if m.get(k) is None]
    if missing and not record.get("note"):
        out.append(f"{name}: machine lacks {', '.join(missing)} and no note says why")
    return out
