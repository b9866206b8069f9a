"""The factors a sweep may vary, their allowed levels, and the canonical form of a level.

A factor is either a field of ``RunSpec`` (model, topology, strategy, algorithm, network, backend) or
the name of a parameter override (``RunSpec.overrides``: network parameters, system settings,
``tokens``, workload options). Levels are checked here, before anything runs, and written in one
canonical form (``tp4ep8`` → ``TP4EP8``, YAML ``1`` → topology ``"1"``, ``"4e11"`` → ``4e11``) so the
same configuration always gets the same input hash.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import types
import typing
from pathlib import Path
from typing import Any

from moesim.errors import MoesimError, input_error

SPEC_FACTORS = ("model", "topology", "strategy", "algorithm", "network", "backend")
"""Factors that are ``RunSpec`` fields; every other factor is a parameter override."""

PLURALS = {f + "s": f for f in SPEC_FACTORS}
"""Command-line spellings (``--models``) of the spec factors."""

Level = str | int | float | bool | None | tuple


@functools.cache
def override_types() -> dict[str, Any]:
    """Override name → declared type, from the dataclasses the run resolves them into.

    Mirrors ``moesim.system.run.split_overrides`` (which stays the authority on which names exist).
    """
    from moesim.network.params import NetworkParams
    from moesim.system.settings import SystemSettings
    from moesim.workload.generator import WorkloadOptions

    out: dict[str, Any] = {"tokens": int}
    skip = {"name", "extra", "all_reduce", "all_to_all", "all_gather", "reduce_scatter"}
    for cls in (WorkloadOptions, SystemSettings, NetworkParams):
        hints = typing.get_type_hints(cls)
        for f in dataclasses.fields(cls):
            if f.name not in skip:
                out.setdefault(f.name, hints.get(f.name, Any))
    from moesim.system.run import LINK_BANDWIDTH_KEYS

    out.update(dict.fromkeys(LINK_BANDWIDTH_KEYS, float))
    return out


def _is_known_override(name: str) -> bool:
    from moesim.system.run import split_overrides

    try:
        split_overrides({name: 1.0})  # a value every known name accepts here
    except MoesimError:
        return False
    return True


def check_factor_name(name: object, source: str) -> str:
    """Return ``name`` if it is a spec field or a known override; else a one-line error listing both."""
    if isinstance(name, str) and (name in SPEC_FACTORS or _is_known_override(name)):
        return name
    allowed = [*SPEC_FACTORS, *sorted(override_types())]
    raise input_error(source, str(name), "unknown factor", allowed)


def allowed_levels(factor: str) -> list[str]:
    """Human-readable allowed levels of a spec factor (for error messages and ``--help``)."""
    if factor == "model":
        from moesim.models.catalog import model_keys

        return [*model_keys(), "a path to a model .yaml or a Hugging Face config.json"]
    if factor == "topology":
        from moesim.topology import TOPOLOGIES

        return [*TOPOLOGIES.names(), "a path to a topology .yaml"]
    if factor == "strategy":
        return ["TP<n>EP<m>, e.g. TP2EP16"]
    if factor == "algorithm":
        from moesim.system.spec import ALGORITHMS

        return list(ALGORITHMS)
    if factor == "network":
        from moesim.network.params import NETWORK_MODES, REFERENCE_PRESETS

        return [*NETWORK_MODES, *REFERENCE_PRESETS]
    if factor == "backend":
        import moesim.network  # noqa: F401  (registers the built-in backends)
        from moesim.network.base import BACKENDS

        return BACKENDS.names()
    t = override_types().get(factor, Any)
    return [getattr(t, "__name__", str(t))]


def _resolve_path(value: str, base_dir: Path | None) -> Path:
    p = Path(value).expanduser()
    if not p.is_absolute():
        p = (base_dir or Path.cwd()) / p
    return p.resolve()


def _model_level(value: str, source: str, base_dir: Path | None) -> str:
    from moesim.models.catalog import get_model, model_keys

    if value in model_keys():
        return value
    if value.endswith((".yaml", ".yml", ".json")) or "/" in value:
        path = _resolve_path(value, base_dir)
        if not path.exists():
            raise input_error(source, "model", f"model file '{value}' not found", allowed_levels("model"))
        get_model(str(path))  # a malformed file is reported here, naming that file
        return str(path)
    raise input_error(source, "model", f"unknown level '{value}'", allowed_levels("model"))


def _topology_level(value: str, source: str, base_dir: Path | None) -> str:
    from moesim.topology import TOPOLOGIES, get_cluster_spec

    if value in TOPOLOGIES:
        return value
    if value.endswith((".yaml", ".yml")):
        path = _resolve_path(value, base_dir)
        if not path.is_file():
            raise input_error(source, "topology", f"topology file '{value}' not found", allowed_levels("topology"))
        get_cluster_spec(str(path))  # a malformed file is reported here, naming that file
        return str(path)
    raise input_error(source, "topology", f"unknown level '{value}'", allowed_levels("topology"))


def _strategy_level(value: str, source: str) -> str:
    from moesim.workload.layout import ParallelLayout

    try:
        return ParallelLayout.parse(value).name
    except MoesimError:
        raise input_error(source, "strategy", f"unknown level '{value}'", allowed_levels("strategy")) from None


def _named_level(factor: str, value: str, source: str) -> str:
    allowed = allowed_levels(factor)
    if value not in allowed:
        raise input_error(source, factor, f"unknown level '{value}'", allowed)
    return value


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


def _coerce(factor: str, t: Any, value: Any, source: str) -> Level:
    """Bring an override level to its field's declared type (int, float, bool, str, optional, tuple)."""
    origin = typing.get_origin(t)
    if origin in (typing.Union, types.UnionType):
        args = typing.get_args(t)
        if value is None or (isinstance(value, str) and value.lower() in ("none", "null")):
            if type(None) in args:
                return None
        inner = [a for a in args if a is not type(None)]
        return _coerce(factor, inner[0], value, source) if len(inner) == 1 else value
    if t is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in ("true", "false"):
            return value.lower() == "true"
        raise input_error(source, factor, f"expected true or false, got {value!r}")
    if t is int:
        v = _number(value)
        if isinstance(v, float) and v.is_integer():
            v = int(v)
        if isinstance(v, int) and not isinstance(v, bool):
            return v
        raise input_error(source, factor, f"expected an integer, got {value!r}")
    if t is float:
        v = _number(value)
        if isinstance(v, int | float) and not isinstance(v, bool):
            return float(v)
        raise input_error(source, factor, f"expected a number, got {value!r}")
    if t is str:
        if isinstance(value, str):
            return value
        raise input_error(source, factor, f"expected a string, got {value!r}")
    return _freeze(value)


def _freeze(value: Any) -> Any:
    """Lists (from YAML) become tuples so a level is hashable and compares by value."""
    if isinstance(value, list | tuple):
        return tuple(_freeze(v) for v in value)
    if isinstance(value, dict):
        raise MoesimError(f"a mapping is not a valid level: {value!r}")
    return value


def canonical_level(factor: str, value: Any, source: str, base_dir: Path | None = None) -> Level:
    """Validate one level of ``factor`` and return its canonical form.

    ``base_dir`` resolves relative model/topology paths (the matrix file's folder; the current
    directory for the command line); path levels become absolute so every worker finds them.
    """
    if factor in SPEC_FACTORS:
        if isinstance(value, bool) or not isinstance(value, str | int):
            raise input_error(source, factor, f"level must be a string, got {value!r}", allowed_levels(factor))
        text = str(value).strip()
        if factor == "model":
            return _model_level(text, source, base_dir)
        if factor == "topology":
            return _topology_level(text, source, base_dir)
        if factor == "strategy":
            return _strategy_level(text, source)
        return _named_level(factor, text, source)
    return _coerce(factor, override_types().get(factor, Any), value, source)


def level_label(value: Level) -> str:
    """A short text form of a level: the results-store column value of an override factor."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "none"
    if isinstance(value, float):
        short = f"{value:g}"
        return short if float(short) == value else repr(value)
    if isinstance(value, int | str):
        return str(value)
    return json.dumps(value)
