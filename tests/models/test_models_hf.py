"""ModelSpec.from_hf_config on real public config.json files written to disk, and on broken ones."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from hf_config_samples import (
    DEEPSEEK_V2,
    DEEPSEEK_V2_LITE,
    DEEPSEEK_V3,
    GLM_5,
    GLM_45,
    KIMI_K2,
    MIXTRAL_8X7B,
    QWEN3_30B_A3B,
    QWEN15_MOE_A27B,
    write_config,
)

from moesim.errors import MoesimError
from moesim.models.catalog import get_model
from moesim.models.hf_families import HF_FAMILIES
from moesim.models.spec import AttentionSpec, ModelSpec


def _load(tmp_path: Path, dirname: str, config: dict) -> ModelSpec:
    return ModelSpec.from_hf_config(write_config(tmp_path / dirname, config))


def _error(tmp_path: Path, config: dict) -> str:
    path = write_config(tmp_path / "Broken-Model", config)
    with pytest.raises(MoesimError) as info:
        ModelSpec.from_hf_config(path)
    msg = str(info.value)
    assert "\n" not in msg, "user errors are one line"
    assert str(path) in msg, "the error names the file"
    return msg


def test_deepseek_v3(tmp_path: Path) -> None:
    spec = _load(tmp_path, "DeepSeek-V3", DEEPSEEK_V3)
    assert (spec.key, spec.name) == ("deepseek-v3", "DeepSeek-V3")
    assert (spec.hidden_size, spec.comm_dim, spec.num_layers, spec.first_dense_layers) == (7168, 7168, 61, 3)
    assert (spec.routed_experts, spec.shared_experts, spec.top_k, spec.expert_ffn_width) == (256, 1, 8, 2048)
    assert (spec.dense_ffn_width, spec.vocab_size) == (18432, 129280)
    # MLA: query/key head width = qk_nope_head_dim + qk_rope_head_dim = 128 + 64
    assert spec.attention == AttentionSpec(128, 128, 192, 1536, 512, 64, 128, 128)
    assert spec.attention.is_mla
    assert spec.moe_layers == 61 - 3
    assert spec.checkpoint_size_bytes is None and spec.total_params is None


def test_deepseek_v2_and_lite(tmp_path: Path) -> None:
    v2 = _load(tmp_path, "DeepSeek-V2", DEEPSEEK_V2)
    assert (v2.hidden_size, v2.num_layers, v2.first_dense_layers) == (5120, 60, 1)
    assert (v2.routed_experts, v2.shared_experts, v2.top_k, v2.expert_ffn_width) == (160, 2, 6, 1536)
    assert v2.shared_expert_ffn_width == 1536
    lite = _load(tmp_path, "DeepSeek-V2-Lite", DEEPSEEK_V2_LITE)
    assert lite.attention.q_lora_rank is None  # null in the config: no query compression
    assert (lite.attention.kv_lora_rank, lite.attention.num_heads) == (512, 16)
    assert (lite.routed_experts, lite.top_k, lite.expert_ffn_width, lite.num_layers) == (64, 6, 1408, 27)


def test_kimi_k2_uses_the_deepseek_layout(tmp_path: Path) -> None:
    spec = _load(tmp_path, "Kimi-K2-Instruct", KIMI_K2)
    assert (spec.routed_experts, spec.top_k, spec.first_dense_layers, spec.attention.num_heads) == (
        384,
        8,
        1,
        64,
    )
    assert spec.vocab_size == 163840


def test_mixtral(tmp_path: Path) -> None:
    spec = _load(tmp_path, "Mixtral-8x7B-v0.1", MIXTRAL_8X7B)
    # head_dim absent: hidden_size / num_attention_heads = 4096 / 32
    assert spec.attention == AttentionSpec(num_heads=32, num_kv_heads=8, head_dim=128)
    assert (spec.routed_experts, spec.top_k, spec.expert_ffn_width) == (8, 2, 14336)
    assert (spec.shared_experts, spec.first_dense_layers, spec.dense_ffn_width) == (0, 0, 0)
    assert spec.moe_layers == 32


def test_qwen3_moe(tmp_path: Path) -> None:
    spec = _load(tmp_path, "Qwen3-30B-A3B", QWEN3_30B_A3B)
    # head_dim is given and differs from hidden / heads (2048 / 32 = 64)
    assert spec.attention == AttentionSpec(num_heads=32, num_kv_heads=4, head_dim=128)
    assert (spec.routed_experts, spec.top_k, spec.expert_ffn_width, spec.shared_experts) == (128, 8, 768, 0)
    assert (spec.first_dense_layers, spec.num_layers) == (0, 48)


def test_qwen2_moe_shared_expert(tmp_path: Path) -> None:
    spec = _load(tmp_path, "Qwen1.5-MoE-A2.7B", QWEN15_MOE_A27B)
    assert (spec.shared_experts, spec.shared_expert_ffn_width) == (1, 5632)
    assert (spec.routed_experts, spec.top_k, spec.expert_ffn_width) == (60, 4, 1408)
    assert spec.attention.head_dim == 2048 // 16


def test_qwen_leading_mlp_only_layers(tmp_path: Path) -> None:
    spec = _load(tmp_path, "q", {**QWEN3_30B_A3B, "mlp_only_layers": [0, 1]})
    assert (spec.first_dense_layers, spec.moe_layers, spec.dense_ffn_width) == (2, 46, 6144)


def test_glm45(tmp_path: Path) -> None:
    spec = _load(tmp_path, "GLM-4.5", GLM_45)
    assert spec.attention == AttentionSpec(num_heads=96, num_kv_heads=8, head_dim=128)  # 96 × 128 ≠ 5120
    assert (spec.first_dense_layers, spec.moe_layers, spec.dense_ffn_width) == (3, 89, 12288)
    assert (spec.routed_experts, spec.shared_experts, spec.top_k, spec.expert_ffn_width) == (160, 1, 8, 1536)


def test_glm5_mla(tmp_path: Path) -> None:
    spec = _load(tmp_path, "GLM-5", GLM_5)
    assert spec.attention == AttentionSpec(64, 64, 192 + 64, 2048, 512, 64, 192, 256)
    assert (spec.hidden_size, spec.num_layers, spec.first_dense_layers, spec.routed_experts) == (
        6144,
        78,
        3,
        256,
    )


def test_every_registered_family_is_exercised() -> None:
    covered = {c["model_type"] for c in (DEEPSEEK_V2, DEEPSEEK_V3, KIMI_K2, MIXTRAL_8X7B, QWEN3_30B_A3B,
                                          QWEN15_MOE_A27B, GLM_45, GLM_5)}  # fmt: skip
    assert set(HF_FAMILIES.names()) == covered


@pytest.mark.parametrize(
    ("config", "key"),
    [
        (DEEPSEEK_V3, "deepseek-v3"),
        (MIXTRAL_8X7B, "mixtral-8x7b"),
        (QWEN3_30B_A3B, "qwen3-30b-a3b"),
        (GLM_45, "glm-4.5"),
    ],
)
def test_catalog_entries_agree_with_the_public_configs(tmp_path: Path, config: dict, key: str) -> None:
    """The hand-written catalog YAML and the config.json reader are two independent paths to the same facts."""
    from_config = ModelSpec.from_hf_config(write_config(tmp_path, config))
    builtin = get_model(key)
    architecture = {f.name for f in dataclasses.fields(ModelSpec)} - {
        "key", "name", "total_params", "checkpoint_size_bytes", "notes", "source", "dense_ffn_width",
        "shared_expert_ffn_width",
    }  # fmt: skip
    for name in sorted(architecture):
        assert getattr(from_config, name) == getattr(builtin, name), name
    if builtin.first_dense_layers:
        assert from_config.dense_ffn_width == builtin.dense_ffn_width
    if builtin.shared_experts:
        assert from_config.shared_expert_ffn_width == builtin.shared_expert_ffn_width


def test_key_override_and_file_stem(tmp_path: Path) -> None:
    path = write_config(tmp_path, MIXTRAL_8X7B, name="mixtral.json")
    assert ModelSpec.from_hf_config(path).key == "mixtral"
    assert ModelSpec.from_hf_config(path, key="mx").key == "mx"


# --- broken configs: one line, naming the file and the field --------------------------------------------


def test_top_k_above_expert_count(tmp_path: Path) -> None:
    msg = _error(tmp_path, {**MIXTRAL_8X7B, "num_experts_per_tok": 9})
    assert "num_experts_per_tok" in msg and "num_local_experts=8" in msg


def test_heads_not_dividing_hidden_without_head_dim(tmp_path: Path) -> None:
    msg = _error(tmp_path, {**MIXTRAL_8X7B, "num_attention_heads": 48})
    assert "num_attention_heads" in msg and "head_dim" in msg


def test_unknown_model_type_lists_supported(tmp_path: Path) -> None:
    msg = _error(tmp_path, {**MIXTRAL_8X7B, "model_type": "llama"})
    assert "model_type" in msg and "'llama'" in msg
    for family in ("deepseek_v3", "mixtral", "qwen3_moe", "glm4_moe"):
        assert family in msg


def test_missing_model_type(tmp_path: Path) -> None:
    config = dict(MIXTRAL_8X7B)
    del config["model_type"]
    assert "model_type" in _error(tmp_path, config)


@pytest.mark.parametrize("field", ["n_routed_experts", "kv_lora_rank", "num_experts_per_tok", "hidden_size"])
def test_missing_required_field(tmp_path: Path, field: str) -> None:
    config = dict(DEEPSEEK_V3)
    del config[field]
    msg = _error(tmp_path, config)
    assert f"'{field}'" in msg and "missing" in msg


def test_wrong_type(tmp_path: Path) -> None:
    msg = _error(tmp_path, {**DEEPSEEK_V3, "hidden_size": "7168"})
    assert "'hidden_size'" in msg and "integer" in msg


def test_kv_heads_not_dividing_heads(tmp_path: Path) -> None:
    assert "num_key_value_heads" in _error(tmp_path, {**MIXTRAL_8X7B, "num_key_value_heads": 6})


def test_dense_layers_cover_the_whole_model(tmp_path: Path) -> None:
    assert "first_k_dense_replace" in _error(tmp_path, {**DEEPSEEK_V3, "first_k_dense_replace": 61})


def test_interleaved_moe_is_rejected(tmp_path: Path) -> None:
    assert "moe_layer_freq" in _error(tmp_path, {**DEEPSEEK_V3, "moe_layer_freq": 2})
    assert "decoder_sparse_step" in _error(tmp_path, {**QWEN3_30B_A3B, "decoder_sparse_step": 2})
    assert "mlp_only_layers" in _error(tmp_path, {**QWEN3_30B_A3B, "mlp_only_layers": [5]})


def test_not_json(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_text('{"model_type": "mixtral",', encoding="utf-8")
    with pytest.raises(MoesimError, match="not valid JSON") as info:
        ModelSpec.from_hf_config(path)
    assert str(path) in str(info.value)


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(MoesimError, match="not found"):
        ModelSpec.from_hf_config(tmp_path / "nope" / "config.json")


def test_a_key_given_twice_is_refused_as_yaml_duplicates_are(tmp_path: Path) -> None:
    path = write_config(tmp_path / "Twice", DEEPSEEK_V3)
    text = path.read_text()
    path.write_text(text.replace('"hidden_size"', '"hidden_size": 1, "hidden_size"', 1))
    with pytest.raises(MoesimError, match="field 'hidden_size': given twice") as e:
        ModelSpec.from_hf_config(path)
    assert "\n" not in str(e.value)
    nested = write_config(tmp_path / "Nested", {**DEEPSEEK_V3, "rope_scaling": {"factor": 40}})
    nested.write_text(nested.read_text().replace('"factor"', '"factor": 1, "factor"', 1))
    with pytest.raises(MoesimError, match="field 'factor': given twice"):
        ModelSpec.from_hf_config(nested)
