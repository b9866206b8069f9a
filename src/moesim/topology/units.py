"""Bandwidths and delays written with units ("512Gbps", "0.2us"), parsed, range-checked and printed exactly.

Values are scaled with ``decimal`` so that "0.2us" gives the same float as the literal ``0.2e-6`` and
printing then parsing a value gives it back bit for bit (the YAML round trip relies on this).
Every link bandwidth lies in 1 Mbps .. 1000 Tbps and every delay in 0 .. 1 s: wide enough for any
real link, narrow enough that transfer times stay finite and a path's delay stays far below the
1000 s at which routing's "hop count first, then delay" cost would stop holding.
"""

from __future__ import annotations

import re
from decimal import Decimal

from moesim.errors import input_error

_RATE_UNITS = {"bps": 0, "kbps": 3, "mbps": 6, "gbps": 9, "tbps": 12}
_TIME_UNITS = {"s": 0, "ms": -3, "us": -6, "µs": -6, "ns": -9, "ps": -12}
_NUMBER_UNIT = re.compile(r"^\s*([0-9.]+(?:[eE][+-]?[0-9]+)?)\s*([A-Za-zµ/]*)\s*$")

BANDWIDTH_RANGE_BPS = (1e6, 1e15)
DELAY_RANGE_S = (0.0, 1.0)
BANDWIDTH_RANGE_TEXT = "1Mbps..1000Tbps"
DELAY_RANGE_TEXT = "0s..1s"


def _parse(value: object, units: dict[str, int], default_unit: str, source: str, field: str) -> float:
    example = "400Gbps" if units is _RATE_UNITS else "0.2us"
    if isinstance(value, bool):
        raise input_error(source, field, f"expected a number with a unit, got {value!r}", units)
    if isinstance(value, int | float):
        try:
            return float(value)
        except OverflowError:
            raise input_error(source, field, f"the number {value} is too large") from None
    if not isinstance(value, str):
        raise input_error(source, field, f"expected a number with a unit, got {type(value).__name__}", units)
    m = _NUMBER_UNIT.match(value)
    unit = (m.group(2) if m else "").replace("b/s", "bps").lower() or default_unit
    if not m or unit not in units:
        raise input_error(source, field, f"cannot read {value!r} (write e.g. {example})", units)
    try:
        return float(Decimal(m.group(1)).scaleb(units[unit]))
    except ArithmeticError:  # decimal's InvalidOperation and Overflow
        raise input_error(source, field, f"cannot read the number in {value!r}") from None


def check_bandwidth_bps(bps: float, source: str, field: str) -> float:
    """``bps`` if it is a link bandwidth in ``BANDWIDTH_RANGE_BPS``, else a one-line error."""
    lo, hi = BANDWIDTH_RANGE_BPS
    if isinstance(bps, bool) or not isinstance(bps, int | float) or not lo <= bps <= hi:
        raise input_error(source, field, f"bandwidth {bps!r} bit/s is out of range", [BANDWIDTH_RANGE_TEXT])
    return bps


def check_delay_s(delay_s: float, source: str, field: str) -> float:
    """``delay_s`` if it is a link delay in ``DELAY_RANGE_S``, else a one-line error."""
    lo, hi = DELAY_RANGE_S
    if isinstance(delay_s, bool) or not isinstance(delay_s, int | float) or not lo <= delay_s <= hi:
        raise input_error(source, field, f"delay {delay_s!r} s is out of range", [DELAY_RANGE_TEXT])
    return delay_s


def parse_bandwidth_bps(value: object, source: str, field: str) -> float:
    """``"400Gbps"`` → 4e11, range-checked. A bare number is bits per second."""
    return check_bandwidth_bps(_parse(value, _RATE_UNITS, "bps", source, field), source, field)


def parse_time_s(value: object, source: str, field: str) -> float:
    """``"50ms"`` (or ``s``, ``us``, ``µs``, ``ns``, ``ps``) → 0.05, not range-checked (a duration of any length;
    ``parse_delay_s`` checks a link's). A bare number is seconds."""
    return _parse(value, _TIME_UNITS, "s", source, field)


def parse_delay_s(value: object, source: str, field: str) -> float:
    """``"0.2us"`` (or ``µs``, ``ns``, ``ms``, ``s``) → 2e-7, range-checked. A bare number is seconds."""
    return check_delay_s(parse_time_s(value, source, field), source, field)


def _format(value: float, exponent: int, unit: str) -> str:
    text = format(Decimal(repr(value)).scaleb(-exponent).normalize(), "f")
    return f"{text}{unit}"


def format_bandwidth(bps: float) -> str:
    """4e11 → ``"400Gbps"`` (exact: parsing the text gives ``bps`` back)."""
    return _format(bps, 9, "Gbps")


def format_delay(delay_s: float) -> str:
    """2e-7 → ``"0.2us"`` (exact: parsing the text gives ``delay_s`` back)."""
    return _format(delay_s, -6, "us")


def human_bandwidth(bps: float) -> str:
    """For labels: ``"512 Gbps"``."""
    return f"{bps / 1e9:.4g} Gbps"


def human_delay(delay_s: float) -> str:
    """For labels: ``"0.2 µs"``."""
    return f"{delay_s * 1e6:.4g} µs"
