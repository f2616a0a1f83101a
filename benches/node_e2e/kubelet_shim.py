"""What the node e2e suite runs as `<--k8s-bin-dir>/kubelet` for our kubelet:
`python -m kubelet` with the suite's flags.

A flag our command line does not know yet would make it exit 1 (as it
should). So that the rest of the suite still runs, this shim drops such flags
and says so, on stderr (the kubelet's log) with the marker below; the harness
reads the marker back and records the dropped flags next to the results. With
every flag known, it is a plain exec.
"""

from __future__ import annotations

import os
import sys

MARKER = "node-e2e shim: our kubelet does not accept"


def split_unknown(argv: list[str]) -> tuple[list[str], list[str]]:
    """(argv without the flags ours does not know, the dropped flags with values)."""
    from kubelet.cmd.options import parse_args

    unknown = set()
    for problem in parse_args(argv).problems:
        if problem.startswith("unknown flag: "):
            unknown.add(problem.removeprefix("unknown flag: ").split("=", 1)[0])
    keep: list[str] = []
    dropped: list[str] = []
    i = 0
    while i < len(argv):
        arg = argv[i]
        i += 1
        name = arg.split("=", 1)[0]
        if name not in unknown:
            keep.append(arg)
            continue
        dropped.append(arg)
        # `--flag value`: the suite never passes a bare boolean it does not define.
        if "=" not in arg and i < len(argv) and not argv[i].startswith("-"):
            dropped.append(argv[i])
            i += 1
    return keep, dropped


def main() -> None:
    keep, dropped = split_unknown(sys.argv[1:])
    if dropped:
        print(f"{MARKER} {' '.join(dropped)} (dropped by the harness)", file=sys.stderr, flush=True)
    os.execv(sys.executable, [sys.executable, "-m", "kubelet", *keep])


if __name__ == "__main__":
    main()
