"""The factors a sweep may vary, their allowed levels, and the canonical form of a level.

A factor is either a field of ``RunSpec`` (model, topology, strategy, algorithm, network, backend) or
the name of a parameter override (``RunSpec.overrides``: network parameters, system settings,
``tokens``, workload options). Levels are checked here, before anything runs, and written in one
canonical form (``tp4ep8`` → ``TP4EP8``, YAML ``1`` → topology ``"1"``, ``"4e11"`` → ``4e11``) so the
same configuration always gets the same input hash.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from moesim.errors import MoesimError, input_error

SPEC_FACTORS = ("model", "topology", "strategy", "algorithm", "network", "backend")
"""Factors that are ``RunSpec`` fields; every other factor is a parameter override."""

Level = str | int | float | bool | None | tuple


def _overrides() -> dict[str, Any]:
    from moesim.system.run import OVERRIDES

    return OVERRIDES


def check_factor_name(name: object, source: str) -> str:
    """Return ``name`` if it is a spec field or a known override; else a one-line error listing both."""
    if isinstance(name, str) and (name in SPEC_FACTORS or name in _overrides()):
        return name
    allowed = [*SPEC_FACTORS, *sorted(_overrides())]
    raise input_error(source, str(name), "unknown factor", allowed)


def allowed_levels(factor: str) -> list[str]:
    """Human-readable allowed levels of a spec factor (for error messages and ``--help``)."""
    if factor == "model":
        from moesim.models.catalog import model_keys

        return [*model_keys(), "a path to a model .yaml or a Hugging Face config.json"]
    if factor == "topology":
        from moesim.topology import TOPOLOGIES
        from moesim.topology.templates import template_names

        return [*TOPOLOGIES.names(), *template_names(), "star:N", "a path to a topology .yaml"]
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
    param = _overrides().get(factor)
    return [param.describe()] if param else []


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
    from moesim.topology.catalog import star_hosts
    from moesim.topology.templates import template_spec

    if value in TOPOLOGIES:
        return value
    try:
        if star_hosts(value) is not None or template_spec(value) is not None:  # hgx-h100:4 (templates.py)
            return value
    except MoesimError as e:
        raise input_error(source, "topology", str(e), allowed_levels("topology")) from None
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


def _placement_level(value: Any, source: str, base_dir: Path | None) -> str:
    """A placement rule name as is; a rank → GPU file as an absolute path (it is read when the run is planned,
    against the run's topology)."""
    from moesim.topology.placement import INLINE, PLACEMENT_RULES

    text = str(_overrides()["placement"].check(value, source)).strip().replace(" ", "")
    if text in PLACEMENT_RULES.names() or INLINE.fullmatch(text):
        return text
    if text.lower().endswith((".yaml", ".yml", ".json")):
        path = _resolve_path(text, base_dir)
        if not path.is_file():
            raise input_error(source, "placement", f"placement file '{text}' not found",
                              [*PLACEMENT_RULES.names(), "a path to a .yaml/.json rank → GPU file"])
        return str(path)
    raise input_error(source, "placement", f"unknown level '{text}'",
                      [*PLACEMENT_RULES.names(), "a comma-separated GPU list", "a path to a .yaml/.json rank → GPU file"])


def _routing_file_level(factor: str, value: Any, source: str, base_dir: Path | None) -> str:
    """``routing_table`` (a path) or ``expert_placement`` (a rule name or a path): a file becomes an absolute
    path, so every worker finds it (it is read when the run is planned)."""
    from moesim.workload.routing import PLACEMENT_RULES

    text = str(_overrides()[factor].check(value, source)).strip()
    if factor == "expert_placement" and text in PLACEMENT_RULES:
        return text
    path = _resolve_path(text, base_dir)
    if not path.is_file():
        allowed = ["a path to a CSV/Parquet routing table"] if factor == "routing_table" else [
            *PLACEMENT_RULES, "a path to an expert placement file"]
        raise input_error(source, factor, f"file '{text}' not found", allowed)
    return str(path)


def canonical_level(factor: str, value: Any, source: str, base_dir: Path | None = None) -> Level:
    """Validate one level of ``factor`` and return its canonical form.

    ``base_dir`` resolves relative model/topology/placement paths (the matrix file's folder; the current
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
    if factor == "placement":
        return _placement_level(value, source, base_dir)
    if factor in ("routing_table", "expert_placement"):
        return _routing_file_level(factor, value, source, base_dir)
    return _overrides()[factor].check(value, source) if factor in _overrides() else value


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
