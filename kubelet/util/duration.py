"""Go time.Duration strings ("1m30s", "250ms", "1h0m0s") to and from seconds."""

from __future__ import annotations

import re

_UNITS = {
    "ns": 1e-9,
    "us": 1e-6,
    "µs": 1e-6,
    "μs": 1e-6,
    "ms": 1e-3,
    "s": 1.0,
    "m": 60.0,
    "h": 3600.0,
}
_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|μs|ms|s|m|h)")


def parse_duration(text: str) -> float:
    """Parse a Go duration string into seconds; raise ValueError like time.ParseDuration."""
    s = text.strip()
    if not s:
        raise ValueError(f'invalid duration "{text}"')
    sign = 1.0
    if s[0] in "+-":
        sign = -1.0 if s[0] == "-" else 1.0
        s = s[1:]
    if s == "0":
        return 0.0
    pos = 0
    total = 0.0
    while pos < len(s):
        m = _PART.match(s, pos)
        if not m:
            if re.match(r"(\d+(?:\.\d*)?|\.\d+)$", s[pos:]):
                raise ValueError(f'missing unit in duration "{text}"')
            raise ValueError(f'invalid duration "{text}"')
        total += float(m.group(1)) * _UNITS[m.group(2)]
        pos = m.end()
    return sign * total


def format_duration(seconds: float) -> str:
    """Format seconds the way Go's Duration.String() does (e.g. 60 -> "1m0s")."""
    ns = round(seconds * 1e9)
    if ns == 0:
        return "0s"
    neg = ns < 0
    ns = abs(ns)
    if ns < 1_000_000_000:
        # Sub-second values use the largest unit that keeps an integer part.
        for unit, size in (("ms", 1_000_000), ("µs", 1_000), ("ns", 1)):
            if ns >= size:
                out = _trim(ns / size, size) + unit
                break
    else:
        h, rem = divmod(ns, 3_600_000_000_000)
        m, rem = divmod(rem, 60_000_000_000)
        s = _trim(rem / 1e9, 1_000_000_000) + "s"
        out = (f"{h}h{m}m" if h else (f"{m}m" if m else "")) + s
    return ("-" if neg else "") + out


def _trim(value: float, size: int) -> str:
    text = f"{value:.9f}".rstrip("0").rstrip(".")
    return text or "0"
