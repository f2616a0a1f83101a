"""Kubernetes resource quantities ("100m", "1.5Gi", "2e3") as numbers."""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation

_SUFFIX = {
    "": Decimal(1),
    "n": Decimal("1e-9"),
    "u": Decimal("1e-6"),
    "m": Decimal("1e-3"),
    "k": Decimal(10**3),
    "M": Decimal(10**6),
    "G": Decimal(10**9),
    "T": Decimal(10**12),
    "P": Decimal(10**15),
    "E": Decimal(10**18),
    "Ki": Decimal(2**10),
    "Mi": Decimal(2**20),
    "Gi": Decimal(2**30),
    "Ti": Decimal(2**40),
    "Pi": Decimal(2**50),
    "Ei": Decimal(2**60),
}
_RE = re.compile(
    r"^([+-]?(?:\d+\.?\d*|\.\d+))(?:([eE][+-]?\d+)|(Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E))?$"
)


def parse_quantity(text: str | int | float) -> Decimal:
    """Parse a quantity; raise ValueError for anything the API server would reject."""
    if isinstance(text, int | float) and not isinstance(text, bool):
        return Decimal(str(text))
    s = str(text).strip()
    m = _RE.match(s)
    if not m:
        raise ValueError(f'quantities must match the regular expression: invalid quantity "{text}"')
    try:
        number = Decimal(m.group(1))
        if m.group(2):
            return number * (Decimal(10) ** int(m.group(2)[1:]))
        return number * _SUFFIX[m.group(3) or ""]
    except InvalidOperation as err:
        raise ValueError(f'invalid quantity "{text}"') from err


def cpu_millis(text: str | int | float) -> int:
    """CPU quantity in millicores, rounded up as the API does."""
    v = parse_quantity(text) * 1000
    return int(v.to_integral_value(rounding="ROUND_CEILING"))


def to_bytes(text: str | int | float) -> int:
    v = parse_quantity(text)
    return int(v.to_integral_value(rounding="ROUND_CEILING"))


_BINARY = (("Ei", 2**60), ("Pi", 2**50), ("Ti", 2**40), ("Gi", 2**30), ("Mi", 2**20), ("Ki", 2**10))


def format_binary(n: int) -> str:
    """A byte count with the largest binary suffix that divides it ("2Mi", "1536Mi")."""
    for unit, factor in _BINARY:
        if n and n % factor == 0:
            return f"{n // factor}{unit}"
    return str(n)
