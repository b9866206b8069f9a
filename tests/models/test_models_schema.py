"""load_model_file: the strict model YAML schema (unknown keys, missing fields, wrong types, contradictions)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from moesim.errors import MoesimError
from moesim.models import get_model, list_models, load_model_file
from moesim.models.schema import spec_to_mapping


def _write(tmp_path: Path, data: Any) -> Path:
    path = tmp_path / "model.yaml"
    path.write_text(data if isinstance(data, str) else yaml.safe_dump(data), encoding="utf-8")
    return path


def _base() -> dict[str, Any]:
    return spec_to_mapping(get_model("deepseek-v4-flash"))


def _error(tmp_path: Path, data: Any) -> str:
    path = _write(tmp_path, data)
    with pytest.raises(MoesimError) as info:
        load_model_file(path)
    msg = str(info.value)
    assert "\n" not in msg and str(path) in msg
    return msg


@pytest.mark.parametrize("key", [m.key for m in list_models()])
def test_round_trip_of_every_builtin(tmp_path: Path, key: str) -> None:
    spec = get_model(key)
    loaded = load_model_file(_write(tmp_path, spec_to_mapping(spec)))
    assert loaded == spec and loaded.notes == spec.notes


def test_source_defaults_to_the_file(tmp_path: Path) -> None:
    data = _base()
    del data["source"]
    path = _write(tmp_path, data)
    assert load_model_file(path).source == str(path)


def test_optional_fields_take_defaults(tmp_path: Path) -> None:
    data = _base()
    for k in (
        "total_params",
        "checkpoint_size_bytes",
        "bytes_per_activation",
        "notes",
        "shared_expert_ffn_width",
    ):
        del data[k]
    for k in ("q_lora_rank", "kv_lora_rank", "qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim"):
        del data["attention"][k]
    spec = load_model_file(_write(tmp_path, data))
    assert (spec.checkpoint_size_bytes, spec.bytes_per_activation, spec.notes) == (None, 2, ())


def test_unknown_key(tmp_path: Path) -> None:
    msg = _error(tmp_path, {**_base(), "experts": 8})
    assert "'experts'" in msg and "unknown" in msg and "routed_experts" in msg  # lists the allowed fields


def test_unknown_attention_key(tmp_path: Path) -> None:
    data = _base()
    data["attention"]["heads"] = 4
    assert "'attention.heads'" in _error(tmp_path, data)


@pytest.mark.parametrize("field", ["key", "hidden_size", "top_k", "attention"])
def test_missing_field(tmp_path: Path, field: str) -> None:
    data = _base()
    del data[field]
    msg = _error(tmp_path, data)
    assert f"'{field}'" in msg and "missing" in msg


@pytest.mark.parametrize(
    ("field", "value", "words"),
    [
        ("hidden_size", "4096", "integer"),
        ("hidden_size", 4096.0, "integer"),
        ("top_k", True, "boolean"),
        ("total_params", "2.8e12", "number"),  # PyYAML reads 2.8e12 (no sign in the exponent) as a string
        ("notes", "one note", "list of strings"),
        ("name", 3, "string"),
    ],
)
def test_wrong_type(tmp_path: Path, field: str, value: Any, words: str) -> None:
    msg = _error(tmp_path, {**_base(), field: value})
    assert f"'{field}'" in msg and words in msg


def test_null_for_required(tmp_path: Path) -> None:
    assert "null" in _error(tmp_path, {**_base(), "num_layers": None})


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"top_k": 300}, "top_k"),
        ({"first_dense_layers": 43}, "first_dense_layers"),
        ({"first_dense_layers": 2}, "dense_ffn_width"),  # dense layers need a dense FFN width
        ({"hidden_size": 0}, "hidden_size"),
        ({"checkpoint_size_bytes": -1}, "checkpoint_size_bytes"),
    ],
)
def test_contradictions(tmp_path: Path, changes: dict, field: str) -> None:
    assert f"'{field}'" in _error(tmp_path, {**_base(), **changes})


def test_kv_heads_must_divide_heads(tmp_path: Path) -> None:
    data = _base()
    data["attention"]["num_kv_heads"] = 3
    assert "'attention.num_kv_heads'" in _error(tmp_path, data)


def test_mla_needs_its_head_dims(tmp_path: Path) -> None:
    data = _base()
    data["attention"]["kv_lora_rank"] = 512
    assert "attention.qk_rope_head_dim" in _error(tmp_path, data)


def test_duplicate_key(tmp_path: Path) -> None:
    text = yaml.safe_dump(_base()) + "top_k: 8\n"
    assert "duplicate key 'top_k'" in _error(tmp_path, text)


def test_invalid_yaml_and_top_level(tmp_path: Path) -> None:
    assert "line 2" in _error(tmp_path, "key: a\n  bad: [\n")
    assert "mapping" in _error(tmp_path, "- 1\n- 2\n")


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(MoesimError, match="not found"):
        load_model_file(tmp_path / "absent.yaml")
