"""What the node e2e suite runs as `<--k8s-bin-dir>/kubelet` for our kubelet:
`python -m kubelet` with the suite's flags.

Two stop-gaps, each announced on stderr (the kubelet's log) with the marker
below, which the harness reads back and records next to the results; each
does nothing once our kubelet no longer needs it:
- a flag our command line does not know yet would make it exit 1 (as it
  should): the shim drops it, so the rest of the suite still runs;
- the suite reads the kubelet's config back from /configz into Go's types,
  where registryPullQPS, eventRecordQPS and kubeAPIQPS are int32: a float
  there (5.0) fails the suite's set-up, so /configz serves them as integers.
"""

from __future__ import annotations

import dataclasses
import sys
import typing
from typing import Any

MARKER = "node-e2e shim:"
# int32 in Go's v1beta1.KubeletConfiguration.
INT32_FIELDS = ("registryPullQPS", "eventRecordQPS", "kubeAPIQPS")


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


def float_int32_fields() -> list[str]:
    """The INT32_FIELDS our KubeletConfiguration holds as floats."""
    from kubelet.apis.config.types import KubeletConfiguration
    from kubelet.apis.config.v1beta1 import json_name

    hints = typing.get_type_hints(KubeletConfiguration)
    return [
        json_name(f)
        for f in dataclasses.fields(KubeletConfiguration)
        if json_name(f) in INT32_FIELDS and hints[f.name] is float
    ]


def integral_configz(fields: list[str]) -> None:
    """/configz with fields as integers (before kubelet.cmd.run binds encode)."""
    from kubelet.apis.config import v1beta1

    encode = v1beta1.encode

    def encode_int32(cfg: Any) -> dict[str, Any]:
        out = encode(cfg)
        for name in fields:
            if isinstance(out.get(name), float):
                out[name] = int(out[name])
        return out

    v1beta1.encode = encode_int32


def main() -> int:
    keep, dropped = split_unknown(sys.argv[1:])
    if dropped:
        say(f"our kubelet does not accept {' '.join(dropped)} (dropped by the harness)")
    floats = float_int32_fields()
    if floats:
        say(
            f"our /configz serves {', '.join(floats)} as floats, Go's are int32 "
            "(the harness serves them as integers)"
        )
        integral_configz(floats)
    from kubelet.cmd.kubelet import main as kubelet_main

    return kubelet_main(keep)


def say(text: str) -> None:
    print(f"{MARKER} {text}", file=sys.stderr, flush=True)


if __name__ == "__main__":
    sys.exit(main())
