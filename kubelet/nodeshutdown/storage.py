"""The last graceful shutdown's start and end (storage.go upstream): a JSON file
`graceful_node_shutdown_state` in the kubelet's root directory, in the shape
Go writes a time.Time (RFC 3339 with nanoseconds; the zero time when unset),
so a node switched between this kubelet and the Go one keeps its history."""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from dataclasses import dataclass

from kubelet.util.gotime import GO_ZERO_TIME, go_time, parse_go_time

STATE_FILE = "graceful_node_shutdown_state"


@dataclass(frozen=True)
class State:
    start_time: float = 0.0  # seconds since the epoch; 0: not set
    end_time: float = 0.0


class LocalStorage:
    def __init__(self, path: str) -> None:
        self.path = path

    def store(self, state: State) -> None:
        """Written to a temporary file, synced, then renamed over the old one."""
        data = json.dumps(
            {"startTime": go_time(state.start_time), "endTime": go_time(state.end_time)}
        ).encode()
        fd, tmp = tempfile.mkstemp(
            dir=os.path.dirname(self.path) or ".", prefix=".tmp-" + STATE_FILE
        )
        try:
            os.fchmod(fd, 0o644)
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, self.path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise

    def load(self) -> State:
        """The stored state; an empty one when the file does not exist. Raises
        OSError or ValueError for a file that cannot be read."""
        try:
            with open(self.path, "rb") as fh:
                raw = fh.read(64 * 1024)
        except FileNotFoundError:
            return State()
        doc = json.loads(raw)
        if not isinstance(doc, dict):
            raise ValueError("graceful shutdown state must be a JSON object")
        return State(
            parse_go_time(str(doc.get("startTime") or GO_ZERO_TIME)),
            parse_go_time(str(doc.get("endTime") or GO_ZERO_TIME)),
        )
