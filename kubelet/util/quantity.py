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


BINARY_SI, DECIMAL_SI, DECIMAL_EXPONENT = "BinarySI", "DecimalSI", "DecimalExponent"
_DECIMAL_SUFFIX = {-9: "n", -6: "u", -3: "m", 0: "", 3: "k", 6: "M", 9: "G", 12: "T",
                   15: "P", 18: "E"}  # fmt: skip
_BINARY_SUFFIX = {0: "", 1: "Ki", 2: "Mi", 3: "Gi", 4: "Ti", 5: "Pi", 6: "Ei"}


def quantity_format(text: str | int | float) -> str:
    """The format a quantity was written in (a binary suffix, an exponent, or decimal)."""
    s = str(text).strip()
    if s[-2:] in ("Ki", "Mi", "Gi", "Ti", "Pi", "Ei"):
        return BINARY_SI
    if "e" in s.lower():
        return DECIMAL_EXPONENT
    return DECIMAL_SI


def _strip_factors(n: int, base: int) -> tuple[int, int]:
    times = 0
    while n and n % base == 0:
        n //= base
        times += 1
    return n, times


def format_quantity(value: Decimal | int, fmt: str) -> str:
    """A quantity's canonical text, as the API prints it (Quantity.String): the
    largest suffix of its format that keeps the number whole, "1Mi", "1500M",
    "500m"; a binary one below 1024 or with a fraction shows as decimal."""
    v = Decimal(value)
    if fmt == BINARY_SI and (abs(v) < 1024 or v != v.to_integral_value()):
        fmt = DECIMAL_SI
    if fmt == BINARY_SI:
        amount, times = _strip_factors(int(v), 1024)
        if times in _BINARY_SUFFIX:
            return f"{amount}{_BINARY_SUFFIX[times]}"
        return f"{amount * 1024 ** (times - 6)}Ei"
    sign, digits, exp = v.normalize().as_tuple()
    mantissa = int("".join(map(str, digits)) or "0") * (-1 if sign else 1)
    exponent = int(exp)
    if mantissa == 0:
        return "0"
    exponent_mod = exponent % 3  # make it a multiple of 3, growing the mantissa
    mantissa *= 10**exponent_mod
    exponent -= exponent_mod
    if fmt == DECIMAL_SI and exponent in _DECIMAL_SUFFIX:
        return f"{mantissa}{_DECIMAL_SUFFIX[exponent]}"
    return f"{mantissa}e{exponent}" if exponent else str(mantissa)


def format_binary(n: int) -> str:
    """A byte count with the largest binary suffix that divides it ("2Mi",
    "1536Mi"); below 1Ki the plain number."""
    return str(n) if abs(n) < 1024 else format_quantity(n, BINARY_SI)
