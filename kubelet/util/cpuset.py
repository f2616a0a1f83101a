"""CPU sets in the Linux list format ("0-3,8,10-11"), as k8s.io/utils/cpuset.

A set is a frozenset[int]; these functions read and write the text form the
kernel (cpuset.cpus), the CRI (cpuset_cpus) and the CPU manager's state file use.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

CPUSet = frozenset[int]
EMPTY: CPUSet = frozenset()

# Go's strconv.Atoi: an optional sign and ASCII digits, nothing else.
_INT = re.compile(r"[+-]?[0-9]+", re.ASCII)
# No machine has this many CPUs; a range past it is a corrupt file, not a set to build.
MAX_CPU_ID = 1 << 16


def _atoi(text: str) -> int:
    if not _INT.fullmatch(text):
        raise ValueError(f'strconv.Atoi: parsing "{text}": invalid syntax')
    return int(text)


def parse(text: str) -> CPUSet:
    """Parse "0-5,34,46-48"; "" is the empty set. ValueError as cpuset.Parse."""
    if text == "":
        return EMPTY
    out: set[int] = set()
    for part in text.split(","):
        lo, sep, hi = part.partition("-")
        if not sep:
            out.add(_atoi(lo))
            continue
        start, end = _atoi(lo), _atoi(hi)
        if start > end:
            raise ValueError(f'invalid range "{part}" ({start} > {end})')
        if end - start > MAX_CPU_ID:
            raise ValueError(f'invalid range "{part}": more than {MAX_CPU_ID} CPUs')
        out.update(range(start, end + 1))
    return frozenset(out)


def format_cpus(cpus: Iterable[int]) -> str:
    """The shortest list form, ascending: {0,1,2,5} -> "0-2,5"."""
    elems = sorted(set(cpus))
    if not elems:
        return ""
    ranges: list[list[int]] = [[elems[0], elems[0]]]
    for e in elems[1:]:
        if e == ranges[-1][1] + 1:
            ranges[-1][1] = e
        else:
            ranges.append([e, e])
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in ranges)
