"""Checkpoint checksums as the Go kubelet computes them (checkpointmanager/checksum).

Upstream hashes the checkpoint struct, not its JSON: FNV-1a (32 bit) over
the text go-spew prints for it with `%#v` under the hash config of
k8s.io/apimachinery/pkg/util/dump (types shown, map keys sorted, methods and
pointer addresses off). A file is accepted when the stored checksum equals
that hash of the decoded struct with its Checksum field zeroed.

To print the same text, a checkpoint is first described as a tree of Go values
(GoStruct, GoMap, GoSlice, GoPtr, GoScalar) carrying their Go type names; the
printer below follows spew's formatter rule for rule, including that a nil
pointer met inside a map or slice leaves the "omit the next type" flag set.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import kubelet

# Go type names are those reflect prints: package name, not path ("v1.ResourceName").


@dataclass(frozen=True)
class GoScalar:
    type: str
    value: str | int | bool


@dataclass(frozen=True)
class GoSlice:
    type: str
    items: tuple[GoValue, ...] | None  # None: a nil slice


@dataclass(frozen=True)
class GoMap:
    type: str
    items: tuple[tuple[GoScalar, GoValue], ...] | None  # None: a nil map


@dataclass(frozen=True)
class GoStruct:
    type: str
    fields: tuple[tuple[str, GoValue], ...]


@dataclass(frozen=True)
class GoPtr:
    type: str  # the pointee's type, e.g. "state.MemoryTable"
    target: GoValue | None  # None: a nil pointer


GoValue = GoScalar | GoSlice | GoMap | GoStruct | GoPtr


def _key_order(key: GoScalar) -> tuple[int, str | int | bool]:
    v = key.value
    # Strings compare by UTF-8 bytes in Go; code point order is the same thing.
    return (0, v) if not isinstance(v, str) else (1, v)


class _Printer:
    """spew's formatState for `%#v`: one instance per top-level value."""

    def __init__(self) -> None:
        self.out: list[str] = []
        self.ignore_next_type = False

    def format(self, v: GoValue) -> None:
        if isinstance(v, GoPtr):
            self._format_ptr(v)
            return
        if not self.ignore_next_type:
            self.out.append(f"({v.type})")
        self.ignore_next_type = False
        if isinstance(v, GoScalar):
            sv = v.value
            self.out.append(("true" if sv else "false") if isinstance(sv, bool) else str(sv))
        elif isinstance(v, GoSlice):
            if v.items is None:
                self.out.append("<nil>")
                return
            self.out.append("[")
            for i, item in enumerate(v.items):
                if i:
                    self.out.append(" ")
                self.ignore_next_type = True
                self.format(item)
            self.out.append("]")
        elif isinstance(v, GoMap):
            if v.items is None:
                self.out.append("<nil>")
                return
            self.out.append("map[")
            for i, (key, val) in enumerate(sorted(v.items, key=lambda kv: _key_order(kv[0]))):
                if i:
                    self.out.append(" ")
                self.ignore_next_type = True
                self.format(key)
                self.out.append(":")
                self.ignore_next_type = True
                self.format(val)
            self.out.append("]")
        else:
            self.out.append("{")
            for i, (name, val) in enumerate(v.fields):
                if i:
                    self.out.append(" ")
                self.out.append(f"{name}:")
                self.format(val)
            self.out.append("}")

    def _format_ptr(self, p: GoPtr) -> None:
        if p.target is None:
            if self.ignore_next_type:
                self.out.append("<nil>")  # and the flag stays set, as in spew
                return
            self.out.append(f"(*{p.type})<nil>")
            return
        if not self.ignore_next_type:
            self.out.append(f"(*{p.type})")
        else:
            self.out.append("<*>")
        self.ignore_next_type = True
        self.format(p.target)


def spew_for_hash(v: GoValue) -> str:
    """dump.ForHash(v): spew's `%#v` text under the hash config."""
    p = _Printer()
    p.format(v)
    return "".join(p.out)


FNV32_OFFSET = 0x811C9DC5
FNV32_PRIME = 0x01000193


def reference_fnv32a(data: bytes) -> int:
    h = FNV32_OFFSET
    for b in data:
        h = ((h ^ b) * FNV32_PRIME) & 0xFFFFFFFF
    return h


def native_fnv32a(data: bytes) -> int:
    import kubelet_native

    return kubelet_native.fnv32a(data)


# A checkpoint of every pod is hashed on each write: byte by byte in Python
# that was most of the kubelet's start-up CPU at 1,000 pods.
fnv32a: Callable[[bytes], int] = native_fnv32a if kubelet.__impl__ == "native" else reference_fnv32a


def checksum(v: GoValue) -> int:
    """checksum.New(v): FNV-1a 32 of the spew text (stored as a uint64)."""
    return fnv32a(spew_for_hash(v).encode("utf-8", "surrogatepass"))
