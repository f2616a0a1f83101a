"""What the node e2e suite runs as `<--k8s-bin-dir>/kubelet` for our kubelet:
`python -m kubelet` with the suite's flags.

One stop-gap, announced on stderr (the kubelet's log) with the marker
below, which the harness reads back and records next to the results; it does
nothing once our kubelet no longer needs it: a flag our command line does not
know yet would make it exit 1 (as it should): the shim drops it, so the rest
of the suite still runs. (A second one, /configz's QPS fields made integers,
went when the configuration held them as upstream's int32.)
"""

from __future__ import annotations

import sys

MARKER = "node-e2e shim:"


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


def main() -> int:
    keep, dropped = split_unknown(sys.argv[1:])
    if dropped:
        say(f"our kubelet does not accept {' '.join(dropped)} (dropped by the harness)")
    from kubelet.cmd.kubelet import main as kubelet_main

    return kubelet_main(keep)


def say(text: str) -> None:
    print(f"{MARKER} {text}", file=sys.stderr, flush=True)


if __name__ == "__main__":
    sys.exit(main())
