"""The last graceful shutdown's start and end (storage.go upstream): a JSON file
`graceful_node_shutdown_state` in the kubelet's root directory, in the shape
Go writes a time.Time (RFC 3339 with nanoseconds; the zero time when unset),
so a node switched between this kubelet and the Go one keeps its history."""

from __future__ import annotations

import contextlib
import datetime
import json
import os
import re
import tempfile
from dataclasses import dataclass

STATE_FILE = "graceful_node_shutdown_state"
GO_ZERO_TIME = "0001-01-01T00:00:00Z"
_RFC3339 = re.compile(
    r"^(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,9}))?(Z|[+-]\d{2}:\d{2})$"
)


@dataclass(frozen=True)
class State:
    start_time: float = 0.0  # seconds since the epoch; 0: not set
    end_time: float = 0.0


def go_time(t: float) -> str:
    """A time.Time as Go's encoding/json writes it (UTC here)."""
    if not t:
        return GO_ZERO_TIME
    whole = int(t)
    nanos = round((t - whole) * 1e9)
    if nanos >= 1_000_000_000:
        whole, nanos = whole + 1, nanos - 1_000_000_000
    base = datetime.datetime.fromtimestamp(whole, datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S")
    frac = f".{nanos:09d}".rstrip("0") if nanos else ""
    return f"{base}{frac}Z"


def parse_go_time(text: str) -> float:
    """Seconds since the epoch of an RFC 3339 time; 0 for Go's zero time."""
    m = _RFC3339.match(text)
    if m is None:
        raise ValueError(f"not an RFC 3339 time: {text!r}")
    year, mon, day, hh, mm, ss, frac, zone = m.groups()
    if int(year) <= 1:
        return 0.0
    tz = datetime.UTC
    if zone != "Z":
        sign = 1 if zone[0] == "+" else -1
        tz = datetime.timezone(
            sign * datetime.timedelta(hours=int(zone[1:3]), minutes=int(zone[4:6]))
        )
    t = datetime.datetime(int(year), int(mon), int(day), int(hh), int(mm), int(ss), tzinfo=tz)
    return t.timestamp() + (int(frac.ljust(9, "0")) / 1e9 if frac else 0.0)


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
