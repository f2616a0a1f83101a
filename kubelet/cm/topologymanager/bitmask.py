"""NUMA affinity masks (pkg/kubelet/cm/topologymanager/bitmask): a set of NUMA
node IDs 0-63 held in an int. None stands for Go's nil mask ("no affinity"),
which differs from the empty mask 0 (an affinity nothing satisfies)."""

from __future__ import annotations

from collections.abc import Callable, Iterable

MAX_BITS = 64


def new_bitmask(bits: Iterable[int]) -> int:
    """ValueError for a bit outside 0-63, as NewBitMask."""
    mask = 0
    for b in bits:
        if not 0 <= b < MAX_BITS:
            raise ValueError("bit number must be in range 0-63")
        mask |= 1 << b
    return mask


def count(mask: int) -> int:
    return mask.bit_count()


def get_bits(mask: int) -> list[int]:
    return [i for i in range(MAX_BITS) if mask >> i & 1]


def is_set(mask: int, bit: int) -> bool:
    return 0 <= bit < MAX_BITS and bool(mask >> bit & 1)


def is_narrower_than(a: int, b: int) -> bool:
    """Fewer NUMA nodes; on a tie, the numerically lower mask (lower node IDs)."""
    ca, cb = a.bit_count(), b.bit_count()
    return a < b if ca == cb else ca < cb


def to_string(mask: int) -> str:
    """As BitMask.String: binary, zero-padded to a multiple of two digits."""
    for shift in range(MAX_BITS - 2, 0, -2):
        if mask > 1 << shift:
            return format(mask, f"0{shift + 2}b")
    return format(mask, "02b")


def iterate_bitmasks(bits: list[int], callback: Callable[[int], None]) -> None:
    """Every non-empty subset of `bits`, smallest subsets first, each size in
    lexicographic order of positions (IterateBitMasks)."""

    def walk(start: int, accum: int, left: int) -> None:
        if left == 0:
            callback(accum)
            return
        for i in range(start, len(bits)):
            walk(i + 1, accum | 1 << bits[i], left - 1)

    for size in range(1, len(bits) + 1):
        walk(0, 0, size)
