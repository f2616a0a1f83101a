"""Checkpoint files as the Go kubelet keeps them (pkg/kubelet/checkpointmanager).

One file per key in a directory (the kubelet's root dir for the CPU and memory
managers), replaced atomically on every write, read back whole. The JSON is
written the way Go's encoding/json writes it (compact, HTML characters
escaped), and read the way Go reads it into a struct (field names matched
case-insensitively, unknown fields dropped, numbers checked against the Go
field's type), so the checksum (see checksum.py) is computed over the same
values the Go kubelet would see.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from kubelet.util.atomicfile import write_atomic

_KEY = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?")
_KEY_MAX = 250
UINT64_MAX = 2**64 - 1
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1


class CheckpointError(Exception):
    """A checkpoint that cannot be used."""


class CorruptCheckpointError(CheckpointError):
    def __init__(self, actual: int, expected: int) -> None:
        super().__init__("checkpoint is corrupted")
        self.actual = actual
        self.expected = expected


class CheckpointStore:
    """The file store under one directory (utilstore.FileStore)."""

    def __init__(self, directory: str) -> None:
        self.directory = directory

    def _path(self, key: str) -> str:
        if len(key) > _KEY_MAX or not _KEY.fullmatch(key):
            raise ValueError(f"invalid checkpoint key {key!r}")
        return os.path.join(self.directory, key)

    def read(self, key: str) -> bytes | None:
        """The file's bytes, or None when there is none."""
        try:
            with open(self._path(key), "rb") as fh:
                return fh.read()
        except FileNotFoundError:
            return None

    def write(self, key: str, data: bytes) -> None:
        os.makedirs(self.directory, mode=0o755, exist_ok=True)
        write_atomic(self._path(key), data, mode=0o600)

    def remove(self, key: str) -> None:
        try:
            os.unlink(self._path(key))
        except FileNotFoundError:
            pass


def restore_checkpoint(
    store: CheckpointStore, key: str, what: str, load: Callable[[bytes], None]
) -> bool:
    """Hand the checkpoint's bytes to `load` (False: there is none). Anything
    wrong with it is upstream's restore error, naming the file to delete."""
    try:
        blob = store.read(key)
        if blob is None:
            return False
        load(blob)
        return True
    except (CheckpointError, OSError, ValueError) as err:
        path = os.path.join(store.directory, key)
        raise ValueError(
            f"could not restore state from checkpoint: {err}, please drain this node and "
            f'delete the {what} checkpoint file "{path}" before restarting Kubelet'
        ) from None


def check_policy(configured: str, stored: str, prefix: str = "") -> None:
    if configured != stored:
        raise CheckpointError(
            f'{prefix}configured policy "{configured}" differs from state checkpoint policy "{stored}"'
        )


# ---------------------------------------------------------------- Go JSON out


def go_string(s: str) -> str:
    """A JSON string as encoding/json writes it (HTML-safe, U+2028/9 escaped)."""
    out = json.dumps(s, ensure_ascii=False)
    for ch, esc in (("<", "\\u003c"), (">", "\\u003e"), ("&", "\\u0026")):
        out = out.replace(ch, esc)
    return out.replace("\u2028", "\\u2028").replace("\u2029", "\\u2029")


def go_object(fields: Iterable[tuple[str, str]]) -> str:
    """A struct: (json name, encoded value) pairs in declaration order."""
    return "{" + ",".join(f"{go_string(k)}:{v}" for k, v in fields) + "}"


def go_map(items: Mapping[str, str] | None) -> str:
    """A map with its encoded values; keys sorted as Go sorts them; nil is null."""
    if items is None:
        return "null"
    return "{" + ",".join(f"{go_string(k)}:{items[k]}" for k in sorted(items)) + "}"


def go_list(items: Iterable[str] | None) -> str:
    return "null" if items is None else "[" + ",".join(items) + "]"


# ----------------------------------------------------------------- Go JSON in


def clean_string(v: object, where: str) -> str:
    if not isinstance(v, str):
        raise CheckpointError(f"{where}: want a string, got {type(v).__name__}")
    # Go decodes a lone surrogate escape to U+FFFD.
    return v.encode("utf-16", "surrogatepass").decode("utf-16", "replace")


def opt_strings(v: object, where: str) -> list[str] | None:
    """A []string field: null stays None (Go's nil slice)."""
    if v is None:
        return None
    if not isinstance(v, list):
        raise CheckpointError(f"{where}: want a list")
    return [clean_string(s, where) for s in v]


def go_uint(v: object, where: str) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v <= UINT64_MAX:
        raise CheckpointError(f"{where}: want an unsigned 64-bit integer, got {v!r}")
    return v


def go_int(v: object, where: str) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or not INT64_MIN <= v <= INT64_MAX:
        raise CheckpointError(f"{where}: want a 64-bit integer, got {v!r}")
    return v


def struct_fields(obj: object, names: Iterable[str], where: str) -> dict[str, Any]:
    """The JSON object's values for a Go struct's fields: exact name first,
    else a case-insensitive match, later keys winning, unknown keys ignored."""
    if not isinstance(obj, dict):
        raise CheckpointError(f"{where}: want an object")
    wanted = list(names)
    folded = {n.lower(): n for n in wanted}
    out: dict[str, Any] = {}
    for key, value in obj.items():
        name = key if key in wanted else folded.get(key.lower())
        if name is not None:
            out[name] = value
    return out


def load_json(blob: bytes) -> Any:
    try:
        return json.loads(blob)
    except (ValueError, UnicodeDecodeError) as err:
        raise CheckpointError(f"invalid JSON: {err}") from None
