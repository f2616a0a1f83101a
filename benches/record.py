"""A benchmark's figures as a record in benches/results/: what ran (command),
at which commit, when, and on what machine (cores, memory, kernel, load average
when it started), so that every published figure can be traced and compared.

    python -m benches.record NAME -- python -m benches.streaming --execs 100
    python -m benches.record NAME --result OUT/result.json [--result OUT/ceiling.json] \
        -- python -m benches.density --out OUT ...

runs the command and writes benches/results/NAME-<date>.json with, as its result,
the JSON object the command printed last on stdout, or the JSON files named by
--result (one: its content; several: {file name: content}). Benchmarks may also
call `record()`.
"""

from __future__ import annotations

import datetime
import json
import os
import platform
import subprocess
import sys
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results"


def machine() -> dict[str, Any]:
    mem_kib = 0
    with open("/proc/meminfo") as fh:
        for line in fh:
            if line.startswith("MemTotal:"):
                mem_kib = int(line.split()[1])
    return {
        "cores": os.cpu_count(),
        "memory_gib": round(mem_kib / 1024 / 1024, 1),
        "kernel": platform.release(),
        "python": platform.python_version(),
    }


def commit() -> str:
    here = Path(__file__).resolve().parent
    try:
        out = subprocess.run(["git", "-C", str(here), "rev-parse", "HEAD"],
                             capture_output=True, text=True, check=True).stdout.strip()  # fmt: skip
        dirty = subprocess.run(["git", "-C", str(here), "status", "--porcelain", "--", "kubelet", "rust", "pyx"],
                               capture_output=True, text=True).stdout.strip()  # fmt: skip
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return out + ("-dirty" if dirty else "")


def start() -> dict[str, Any]:
    """What a record says about the start of its run; call before measuring."""
    return {
        "commit": commit(),
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "machine": machine(),
        "load_avg_start": [round(x, 2) for x in os.getloadavg()],
    }


def record(name: str, command: str, head: dict[str, Any], result: Any, **extra: Any) -> Path:
    """Write benches/results/NAME-<date>.json; `head` is what start() returned."""
    day = head["date"][:10]
    path = RESULTS / f"{name}-{day}.json"
    n = 2
    while path.exists():
        path = RESULTS / f"{name}-{day}-{n}.json"
        n += 1
    doc = {"name": name, "command": command, **head,
           "load_avg_end": [round(x, 2) for x in os.getloadavg()], **extra, "result": result}  # fmt: skip
    RESULTS.mkdir(exist_ok=True)
    path.write_text(json.dumps(doc, indent=1) + "\n")
    return path


def _last_json(text: str) -> Any:
    """The last top-level JSON object or array printed."""
    dec = json.JSONDecoder()
    found: Any = None
    i = 0
    while i < len(text):
        j = min((k for k in (text.find("{", i), text.find("[", i)) if k >= 0), default=-1)
        if j < 0:
            break
        try:
            found, end = dec.raw_decode(text, j)
            i = end
        except ValueError:
            i = j + 1
    return found


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if "--" not in args or not args or args[0].startswith("-"):
        print("usage: python -m benches.record NAME [--result FILE]... -- COMMAND...",
              file=sys.stderr)  # fmt: skip
        return 2
    split = args.index("--")
    name, opts, cmd = args[0], args[1:split], args[split + 1 :]
    files = [opts[i + 1] for i, o in enumerate(opts) if o == "--result" and i + 1 < len(opts)]
    head = start()
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, text=True)
    sys.stdout.write(proc.stdout)
    result: Any
    try:
        if len(files) == 1:
            result = json.loads(Path(files[0]).read_text())
        elif files:
            result = {Path(f).name: json.loads(Path(f).read_text()) for f in files}
        else:
            result = _last_json(proc.stdout)
    except (OSError, ValueError) as err:
        print(f"not recorded: {err}", file=sys.stderr)
        return proc.returncode or 1
    if result is None:
        print(f"not recorded: exit {proc.returncode}, no result", file=sys.stderr)
        return proc.returncode or 1
    path = record(name, " ".join(cmd), head, result, exit_code=proc.returncode)
    print(f"record: {path}", file=sys.stderr)
    return proc.returncode


if __name__ == "__main__":
    raise SystemExit(main())
