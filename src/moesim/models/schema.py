"""The model file schema: a strict mapping → ModelSpec conversion and the consistency checks every spec passes.

A model YAML has exactly the fields of :class:`ModelSpec` (``attention`` is a nested mapping with the
fields of :class:`AttentionSpec`). Unknown keys, missing required fields and wrong types are one-line
errors naming the file and the field. The same :func:`check_spec` runs on specs read from Hugging Face
configs, so every spec in moesim satisfies the same invariants.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Mapping
from typing import Any

from moesim.errors import input_error
from moesim.models.spec import AttentionSpec, ModelSpec
from moesim.schema import check_fields

# Field kinds of the schema, derived from the dataclasses so that a field added there is accepted here.
_MODEL_FIELDS = {f.name: f for f in dataclasses.fields(ModelSpec)}
_ATTENTION_FIELDS = {f.name: f for f in dataclasses.fields(AttentionSpec)}
_MODEL_HINTS = typing.get_type_hints(ModelSpec)
_ATTENTION_HINTS = typing.get_type_hints(AttentionSpec)


def _required(fields: Mapping[str, dataclasses.Field[Any]]) -> list[str]:
    return [
        n
        for n, f in fields.items()
        if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
    ]


def _base_types(hint: Any) -> tuple[set[type], bool]:
    """(allowed python types, None allowed) for a field annotation such as ``int | None``."""
    if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union:
        args = typing.get_args(hint)
        return {a for a in args if a is not type(None)}, type(None) in args
    origin = typing.get_origin(hint)
    return {origin or hint}, False


def _convert(value: Any, hint: Any, source: str, field: str) -> Any:
    """Check one scalar/list value against its annotation; ints are accepted where floats are."""
    allowed, nullable = _base_types(hint)
    if value is None:
        if nullable:
            return None
        raise input_error(source, field, "must not be null")
    if tuple in allowed:  # notes: a list of strings
        if isinstance(value, str) or not isinstance(value, list | tuple):
            raise input_error(source, field, f"must be a list of strings, got {type(value).__name__}")
        for item in value:
            if not isinstance(item, str):
                raise input_error(source, field, f"must be a list of strings, got an item {item!r}")
        return tuple(value)
    if isinstance(value, bool):  # bool is an int subclass: never accept it for a number
        raise input_error(source, field, f"must be {_type_name(allowed)}, got a boolean")
    if int in allowed and isinstance(value, int):
        return value
    if float in allowed and isinstance(value, int | float):
        return float(value)
    if str in allowed and isinstance(value, str):
        return value
    raise input_error(source, field, f"must be {_type_name(allowed)}, got {type(value).__name__} {value!r}")


def _type_name(allowed: set[type]) -> str:
    names = {int: "an integer", float: "a number", str: "a string"}
    return " or ".join(names.get(t, t.__name__) for t in sorted(allowed, key=lambda t: t.__name__))


def _check_keys(data: Mapping[str, Any], fields: Mapping[str, Any], source: str, prefix: str) -> None:
    for k in data:
        if k not in fields:
            raise input_error(source, f"{prefix}{k}", "unknown field", allowed=sorted(fields))
    for k in _required(fields):
        if k not in data:
            raise input_error(source, f"{prefix}{k}", "missing required field")


def spec_from_mapping(data: Any, source: str) -> ModelSpec:
    """Build and check a ModelSpec from a parsed model file. ``source`` names the file in errors.

    ``source`` becomes ``ModelSpec.source`` unless the file states its own ``source`` (built-ins cite
    the public config or docs/study.md section they follow).
    """
    if not isinstance(data, Mapping):
        raise input_error(source, "<top level>", f"must be a mapping of fields, got {type(data).__name__}")
    _check_keys(data, _MODEL_FIELDS, source, "")
    att = data["attention"]
    if not isinstance(att, Mapping):
        raise input_error(source, "attention", f"must be a mapping, got {type(att).__name__}")
    _check_keys(att, _ATTENTION_FIELDS, source, "attention.")
    att_kwargs = {k: _convert(v, _ATTENTION_HINTS[k], source, f"attention.{k}") for k, v in att.items()}
    kwargs = {k: _convert(v, _MODEL_HINTS[k], source, k) for k, v in data.items() if k != "attention"}
    kwargs.setdefault("source", source)
    spec = ModelSpec(attention=AttentionSpec(**att_kwargs), **kwargs)
    return check_spec(spec, source)


def spec_to_mapping(spec: ModelSpec) -> dict[str, Any]:
    """The inverse of :func:`spec_from_mapping` (plain dict, ``notes`` as a list), for YAML/JSON output."""
    data = dataclasses.asdict(spec)
    data["notes"] = list(spec.notes)
    order = [n for n in _MODEL_FIELDS if n not in ("shared_expert_ffn_width", "source", "notes")]
    order.insert(order.index("shared_experts") + 1, "shared_expert_ffn_width")
    return {k: data[k] for k in (*order, "source", "notes")}


def check_spec(spec: ModelSpec, source: str) -> ModelSpec:
    """Consistency checks shared by every way of building a spec; returns the spec unchanged. Each field's
    range is declared on ``ModelSpec`` and ``AttentionSpec`` (``moesim.schema``); the rest relates fields."""
    a = spec.attention
    check_fields(spec, source)
    check_fields(a, source, prefix="attention.")
    if not 0 <= spec.first_dense_layers < spec.num_layers:
        raise input_error(
            source,
            "first_dense_layers",
            f"must leave at least one MoE layer, got {spec.first_dense_layers} of {spec.num_layers} layers",
            allowed=[f"0..{spec.num_layers - 1}"],
        )
    if spec.dense_ffn_width < 0 or (spec.first_dense_layers > 0 and spec.dense_ffn_width == 0):
        raise input_error(
            source,
            "dense_ffn_width",
            f"must be > 0 when there are dense layers (0 only if first_dense_layers is 0), got {spec.dense_ffn_width}",
        )
    if spec.top_k > spec.routed_experts:
        raise input_error(
            source,
            "top_k",
            f"{spec.top_k} exceeds routed_experts={spec.routed_experts}",
            allowed=[f"1..{spec.routed_experts}"],
        )
    if a.num_kv_heads > a.num_heads or a.num_heads % a.num_kv_heads:
        raise input_error(
            source,
            "attention.num_kv_heads",
            f"must divide num_heads={a.num_heads}, got {a.num_kv_heads}",
        )
    if a.kv_lora_rank is not None:
        for name in ("qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim"):
            if getattr(a, name) is None:
                raise input_error(source, f"attention.{name}", "required when kv_lora_rank is set (MLA)")
    return spec
