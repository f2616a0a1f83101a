"""A Go time.Time as encoding/json writes and reads it: RFC 3339 with up to
nanoseconds (trailing zeros dropped), "Z" for UTC; the zero time for unset."""

from __future__ import annotations

import datetime
import re

GO_ZERO_TIME = "0001-01-01T00:00:00Z"
_RFC3339 = re.compile(
    r"^(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,9}))?(Z|[+-]\d{2}:\d{2})$"
)


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


def meta_time(t: float) -> str:
    """A metav1.Time as the API writes it: RFC 3339 to the second, UTC."""
    return datetime.datetime.fromtimestamp(t, datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def meta_now() -> str:
    """The current time as a metav1.Time."""
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def meta_time_ns(unix_ns: int) -> str | None:
    """A runtime's nanosecond timestamp as a metav1.Time; None when unset (0)."""
    return meta_time(unix_ns / 1e9) if unix_ns > 0 else None
