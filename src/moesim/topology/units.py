"""Bandwidths and delays written with units ("512Gbps", "0.2us"), parsed and printed exactly.

Values are scaled with ``decimal`` so that "0.2us" gives the same float as the literal ``0.2e-6`` and
printing then parsing a value gives it back bit for bit (the YAML round trip relies on this).
"""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation

from moesim.errors import input_error

_RATE_UNITS = {"bps": 0, "kbps": 3, "mbps": 6, "gbps": 9, "tbps": 12}
_TIME_UNITS = {"s": 0, "ms": -3, "us": -6, "µs": -6, "ns": -9, "ps": -12}
_NUMBER_UNIT = re.compile(r"^\s*([0-9.]+(?:[eE][+-]?[0-9]+)?)\s*([A-Za-zµ/]*)\s*$")


def _parse(value: object, units: dict[str, int], default_unit: str, source: str, field: str) -> float:
    if isinstance(value, bool):
        raise input_error(source, field, f"expected a number with a unit, got {value!r}", units)
    if isinstance(value, int | float):
        return float(value)
    m = _NUMBER_UNIT.match(str(value))
    unit = (m.group(2) if m else "").replace("b/s", "bps").lower() or default_unit
    if not m or unit not in units:
        raise input_error(source, field, f"cannot read {value!r} (write e.g. 400Gbps, 0.2us)", units)
    try:
        number = Decimal(m.group(1))
    except InvalidOperation:
        raise input_error(source, field, f"cannot read the number in {value!r}") from None
    return float(number.scaleb(units[unit]))


def parse_bandwidth_bps(value: object, source: str, field: str) -> float:
    """``"400Gbps"`` → 4e11. A bare number is bits per second."""
    return _parse(value, _RATE_UNITS, "bps", source, field)


def parse_delay_s(value: object, source: str, field: str) -> float:
    """``"0.2us"`` (or ``µs``, ``ns``, ``ms``, ``s``) → 2e-7. A bare number is seconds."""
    return _parse(value, _TIME_UNITS, "s", source, field)


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
