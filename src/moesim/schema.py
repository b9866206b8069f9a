"""Parameters as data: every parameter has a name, a type, a unit and an allowed range or set of values.

Each layer declares its parameters as fields of its own frozen dataclass (``WorkloadOptions``,
``SystemSettings``, the ``NetworkParams`` sections, ``ModelSpec``, ...); ``Param.of`` reads them. The
unit follows the field's name (``_s`` seconds, ``_bps`` bits per second, ``_bytes`` bytes, ...) and so
does the default range (durations in [0, ``MAX_DURATION_S``], rates in (0, ``MAX_RATE_BPS``], counts
in [0, ``MAX_COUNT``]); a field narrows or names it in its metadata with ``constraint(...)``.

``Param.check`` is the one validation path of a value, whether it comes from ``moesim run --set``,
``moesim sweep --set``, a matrix YAML, an input file or the Python API: a wrong type, a value out of
range, NaN or an infinity is a one-line error naming the source, the parameter and what is allowed.
A dataclass checks its own fields the same way in ``__post_init__`` with ``check_fields``, so a value
that reaches it by another path (a constructor call, an ASTRA-sim file) is refused alike.
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
MAX_DURATION_S = 2 ** 53 * 1e-9
"""The longest duration a parameter accepts (about 104 days): simulated times are integer nanoseconds
held in float64, exact below 2^53 ns."""
MAX_RATE_BPS = 1e15
"""The largest rate (bit/s) a parameter accepts, as for link bandwidths (1000 Tbit/s)."""


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


def param(default: Any = dataclasses.MISSING, *, note: str = "", tags: tuple[str, ...] = (), **allowed: Any) -> Any:
    """A declared dataclass field: its default (none: required), the values it allows (the keywords of
    ``constraint``), a ``note`` for values no range or list describes, and boolean ``tags`` a layer
    reads (e.g. ``cc_only``)."""
    metadata: dict[str, Any] = dict(constraint(**allowed)) if allowed else {}
    if note:
        metadata["note"] = note
    metadata.update(dict.fromkeys(tags, True))
    return dataclasses.field(default=default, metadata=metadata)


def default_of(cls: type, name: str) -> Any:
    """The declared default of the dataclass field ``name`` of ``cls`` (``RunSpec``'s ``backend``, a scheduler
    knob): written once, on the dataclass, for the command line, the API and serving to read."""
    for f in dataclasses.fields(cls):
        if f.name == name:
            if f.default is not dataclasses.MISSING:
                return f.default
            break
    raise KeyError(f"{cls.__name__} has no default for '{name}'")


def unit_of(name: str) -> str:
    best = max((s for s, _ in UNITS if name.endswith(s)), key=len, default="")
    return dict(UNITS).get(best, "")


def _default_constraint(name: str, kind: Any) -> Constraint:
    """The range a field's unit implies: rates > 0, durations and sizes ≥ 0, counts ≥ 0, each up to the
    largest value moesim computes with exactly."""
    if name.endswith("_bps"):
        return Constraint(low=0.0, low_open=True, high=MAX_RATE_BPS)
    if kind is int:
        return Constraint(low=0, high=MAX_COUNT)
    if name.endswith("_s"):
        return Constraint(low=0.0, high=MAX_DURATION_S)
    if name.endswith(("_bytes", "_kb")):
        return Constraint(low=0.0, high=MAX_COUNT)
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
        """The parameters of a frozen dataclass (its fields but ``skip`` and those not compared, such as
        notes, or holding another dataclass)."""
        hints = typing.get_type_hints(cls)
        out = []
        for f in dataclasses.fields(cls):
            kind = hints.get(f.name, Any)
            if f.name in skip or not f.compare or dataclasses.is_dataclass(_base(kind)):
                continue
            given = f.metadata.get("constraint")
            out.append(Param(f.name, section, kind, unit_of(f.name), given or _default_constraint(f.name, _item(kind)),
                             f.metadata.get("note", "")))
        return out

    def describe(self) -> str:
        """``type unit in range`` (or ``one of ...``) for error messages and listings."""
        base = _base(self.kind)
        kind = getattr(base, "__name__", str(self.kind))
        if typing.get_origin(base) is tuple:
            kind = f"list of {getattr(_item(base), '__name__', 'values')}"
        if self.note:
            return f"{kind}: {self.note}"
        if self.allowed.choices:
            return f"one of {self.allowed.describe()}"
        if _item(self.kind) not in (int, float):
            return kind
        unit = f" {self.unit}" if self.unit else ""
        return f"{kind}{unit} in {self.allowed.describe()}"

    @property
    def item(self) -> Any:
        """The scalar type: ``int`` of ``int | None``, ``float`` of a list of [float, float] pairs."""
        return _item(self.kind)

    @property
    def is_list(self) -> bool:
        """A list of values (its range applies to each number in it)."""
        return typing.get_origin(_base(self.kind)) is tuple

    def check(self, value: Any, source: str, strict: bool = False, label: str | None = None) -> Any:
        """``value`` in this parameter's type, or a one-line error naming ``source``, the parameter (or
        ``label``, e.g. the key of the file it came from) and what is allowed. Numbers spelled as strings
        are parsed (not when ``strict``: a dataclass checking its own fields); an integral float is an int
        where an int is wanted; booleans are only ``true``/``false``; NaN and infinities are refused; the
        range of a list of numbers applies to each."""
        name = label or self.name
        v = _coerce(name, self.kind, value, source, strict)
        numbers = _numbers(v)
        if any(isinstance(x, float) and not math.isfinite(x) or not self.allowed.allows(x) for x in numbers) \
                or (not numbers and v is not None and not self.allowed.allows(v)):  # None: an optional left unset
            raise self._error(source, value, name)
        return v

    def _error(self, source: str, value: Any, name: str) -> MoesimError:
        return MoesimError(f"{source}: field '{name}': {value!r} is not allowed ({self.describe()})")


_FIELD_PARAMS: dict[type, list[Param]] = {}


def check_fields(obj: Any, source: str, prefix: str = "") -> None:
    """Check every declared field of the dataclass instance ``obj`` (``Param.of``) strictly: the type it
    declares, its range or choices; the first wrong one is a one-line MoesimError naming ``source`` and the
    field (after ``prefix``, e.g. ``attention.``)."""
    cls = type(obj)
    params = _FIELD_PARAMS.get(cls)
    if params is None:
        params = _FIELD_PARAMS[cls] = Param.of(cls, "")
    for p in params:
        p.check(getattr(obj, p.name), source, strict=True, label=prefix + p.name)


def _numbers(value: Any) -> list[Any]:
    """The numbers in a value (itself, or those of a list, at any depth); bools are not numbers."""
    if isinstance(value, bool):
        return []
    if isinstance(value, int | float):
        return [value]
    if isinstance(value, tuple):
        return [x for item in value for x in _numbers(item)]
    return []


def _base(kind: Any) -> Any:
    """The non-None type of an optional."""
    if typing.get_origin(kind) in (typing.Union, types.UnionType):
        inner = [a for a in typing.get_args(kind) if a is not type(None)]
        return inner[0] if len(inner) == 1 else kind
    return kind


def _item(kind: Any) -> Any:
    """The scalar type of a field: ``int`` of ``int | None``, ``float`` of ``tuple[tuple[float, float], ...]``."""
    kind = _base(kind)
    while typing.get_origin(kind) is tuple:
        kind = _base(typing.get_args(kind)[0])
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


def _coerce(name: str, kind: Any, value: Any, source: str, strict: bool = False) -> Any:
    def bad(expected: str) -> MoesimError:
        return MoesimError(f"{source}: field '{name}': expected {expected}, got {value!r}")

    if typing.get_origin(kind) in (typing.Union, types.UnionType):
        args = typing.get_args(kind)
        if value is None or (not strict and isinstance(value, str) and value.lower() in ("none", "null")):
            if type(None) in args:
                return None
        return _coerce(name, _base(kind), value, source, strict)
    if typing.get_origin(kind) is tuple:  # a list of the declared items, as deep as declared
        args = typing.get_args(kind)
        if len(args) == 2 and args[1] is ...:
            if not isinstance(value, list | tuple):
                raise bad(f"a list of {getattr(_item(kind), '__name__', 'value')}s")
            return tuple(_coerce(name, args[0], x, source, strict) for x in value)
        if not isinstance(value, list | tuple) or len(value) != len(args):
            raise bad(f"a list of {len(args)} numbers")
        return tuple(_coerce(name, a, x, source, strict) for a, x in zip(args, value, strict=True))
    if kind is bool:
        if isinstance(value, bool):
            return value
        if not strict and isinstance(value, str) and value.lower() in ("true", "false"):
            return value.lower() == "true"
        raise bad("true or false")
    if kind is int:
        v = value if strict else _number(value)
        if isinstance(v, float) and math.isfinite(v) and v.is_integer() and abs(v) <= MAX_COUNT:
            v = int(v)
        if isinstance(v, int) and not isinstance(v, bool):
            return v
        raise bad("an integer")
    if kind is float:
        v = value if strict else _number(value)
        if isinstance(v, int | float) and not isinstance(v, bool):
            try:
                return float(v)
            except OverflowError:  # an int beyond float range
                raise bad("a number") from None
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
