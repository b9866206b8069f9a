"""Parameters as data: every overridable parameter has a name, a type, a unit and an allowed range.

Each layer declares its parameters as fields of its own frozen dataclass (``WorkloadOptions``,
``SystemSettings``, ``NetworkParams``); ``Param.of`` reads them. The unit follows the field's name
(``_s`` seconds, ``_bps`` bits per second, ``_bytes`` bytes, ...) and so does the default range
(durations ≥ 0, rates > 0, sizes ≥ 0); a field narrows or names it in its metadata with
``constraint(...)``. ``Param.check`` is the one validation path of a value, whether it comes from
``moesim run --set``, ``moesim sweep --set``, a matrix YAML or the Python API: a wrong type, a value
out of range, NaN or an infinity is a one-line error naming the source, the parameter and what is
allowed.
"""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from dataclasses import dataclass
from typing import Any

from moesim.errors import MoesimError

UNITS = (("_bps", "bit/s"), ("_bytes", "B"), ("_kb", "KB"), ("_s", "s"), ("_flops", "FLOP/s"),
         ("_bytes_per_s", "B/s"), ("_per_param", "B per parameter"))
"""Name suffix → unit (the longest matching suffix wins)."""

MAX_COUNT = 2 ** 40
"""The largest integer any count or size parameter accepts: products of sizes stay exact in float64."""


@dataclass(frozen=True)
class Constraint:
    """Allowed values of a parameter: a closed or open numeric interval, or a list of choices."""

    low: float | None = None
    high: float | None = None
    low_open: bool = False
    high_open: bool = False
    choices: tuple[Any, ...] = ()

    def describe(self) -> str:
        if self.choices:
            return ", ".join(str(c) for c in self.choices)
        lo = "-inf" if self.low is None else f"{self.low:g}"
        hi = "inf" if self.high is None else f"{self.high:g}"
        return f"{'(' if self.low_open or self.low is None else '['}{lo}, {hi}{')' if self.high_open or self.high is None else ']'}"

    def allows(self, value: Any) -> bool:
        if self.choices:
            return value in self.choices
        if not isinstance(value, int | float) or isinstance(value, bool):
            return True
        if self.low is not None and (value < self.low or (self.low_open and value == self.low)):
            return False
        return not (self.high is not None and (value > self.high or (self.high_open and value == self.high)))


def constraint(*, low: float | None = None, high: float | None = None, low_open: bool = False,
               high_open: bool = False, choices: tuple[Any, ...] = ()) -> dict[str, Constraint]:
    """Field metadata: ``field(default=0.95, metadata=constraint(low=0, high=1, low_open=True))``."""
    return {"constraint": Constraint(low, high, low_open, high_open, choices)}


def unit_of(name: str) -> str:
    best = max((s for s, _ in UNITS if name.endswith(s)), key=len, default="")
    return dict(UNITS).get(best, "")


def _default_constraint(name: str, kind: Any) -> Constraint:
    """The range a field's unit implies: rates and bandwidths > 0, durations and sizes ≥ 0, counts ≥ 0."""
    if name.endswith(("_bps", "_flops", "_bytes_per_s")):
        return Constraint(low=0.0, low_open=True)
    if kind is int:
        return Constraint(low=0, high=MAX_COUNT)
    if name.endswith(("_s", "_bytes", "_kb", "_per_param")):
        return Constraint(low=0.0)
    return Constraint()


@dataclass(frozen=True)
class Param:
    """One overridable parameter: its name, the layer section that owns it, its type, unit and range."""

    name: str
    section: str
    kind: Any
    unit: str
    allowed: Constraint
    note: str = ""
    """What a value may be, for parameters whose values no range or list describes (e.g. a rule or a file)."""

    @staticmethod
    def of(cls: type, section: str, skip: frozenset[str] = frozenset()) -> list[Param]:
        """The parameters of a frozen dataclass (its fields but ``skip``)."""
        hints = typing.get_type_hints(cls)
        out = []
        for f in dataclasses.fields(cls):
            if f.name in skip:
                continue
            kind = hints.get(f.name, Any)
            given = f.metadata.get("constraint")
            out.append(Param(f.name, section, kind, unit_of(f.name), given or _default_constraint(f.name, _base(kind))))
        return out

    def describe(self) -> str:
        """``name (type, unit, allowed range)`` for error messages and listings."""
        kind = getattr(_base(self.kind), "__name__", str(self.kind))
        if self.note:
            return f"{kind}: {self.note}"
        if _base(self.kind) not in (int, float) and not self.allowed.choices:
            return kind
        unit = f" {self.unit}" if self.unit else ""
        return f"{kind}{unit} in {self.allowed.describe()}" if not self.allowed.choices else \
            f"one of {self.allowed.describe()}"

    def check(self, value: Any, source: str) -> Any:
        """``value`` in this parameter's type, or a one-line error naming ``source``, the parameter and
        what is allowed. Numbers spelled as strings are parsed; an integral float is an int where an int
        is wanted; booleans are only ``true``/``false``; NaN and infinities are refused."""
        v = _coerce(self.name, self.kind, value, source)
        if isinstance(v, float) and not math.isfinite(v):
            raise self._error(source, value)
        if not self.allowed.allows(v):
            raise self._error(source, value)
        return v

    def _error(self, source: str, value: Any) -> MoesimError:
        return MoesimError(f"{source}: field '{self.name}': {value!r} is not allowed ({self.describe()})")


def _base(kind: Any) -> Any:
    """The non-None type of an optional."""
    if typing.get_origin(kind) in (typing.Union, types.UnionType):
        inner = [a for a in typing.get_args(kind) if a is not type(None)]
        return inner[0] if len(inner) == 1 else kind
    return kind


def _number(value: Any) -> Any:
    """Parse a string that spells a number (YAML 1.1 reads ``4e11`` as a string)."""
    if isinstance(value, str):
        try:
            return int(value)
        except ValueError:
            try:
                return float(value)
            except ValueError:
                return value
    return value


def _coerce(name: str, kind: Any, value: Any, source: str) -> Any:
    def bad(expected: str) -> MoesimError:
        return MoesimError(f"{source}: field '{name}': expected {expected}, got {value!r}")

    if typing.get_origin(kind) in (typing.Union, types.UnionType):
        args = typing.get_args(kind)
        if type(None) in args and (value is None or (isinstance(value, str) and value.lower() in ("none", "null"))):
            return None
        return _coerce(name, _base(kind), value, source)
    if kind is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in ("true", "false"):
            return value.lower() == "true"
        raise bad("true or false")
    if kind is int:
        v = _number(value)
        if isinstance(v, float) and math.isfinite(v) and v.is_integer() and abs(v) <= MAX_COUNT:
            v = int(v)
        if isinstance(v, int) and not isinstance(v, bool):
            return v
        raise bad("an integer")
    if kind is float:
        v = _number(value)
        if isinstance(v, int | float) and not isinstance(v, bool):
            return float(v)
        raise bad("a number")
    if kind is str:
        if isinstance(value, str):
            return value
        raise bad("a string")
    if isinstance(value, dict):
        raise bad("a value, not a mapping")
    if isinstance(value, list | tuple):
        return tuple(value)
    return value
