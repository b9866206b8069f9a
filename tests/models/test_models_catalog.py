"""The built-in catalog against docs/study.md §2, the communication proxies, and lookup by key or path."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from hf_config_samples import MIXTRAL_8X7B, write_config

from moesim.errors import MoesimError
from moesim.models import STUDY_MODELS, get_model, list_models
from moesim.models.schema import spec_to_mapping

# docs/study.md §2 table: key, name, total params, h (comm. dim.), layers, leading dense, experts, top-k, width
STUDY_TABLE = [
    ("kimi-k3", "Kimi K3", 2.8e12, 3584, 93, 1, 896, 16, 3072),
    ("glm-5.3", "GLM-5.3", 753e9, 6144, 78, 3, 256, 8, 2048),
    ("deepseek-v4-pro", "DeepSeek V4 Pro 0813", 1.7e12, 7168, 61, 0, 384, 6, 3072),
    ("deepseek-v4-flash", "DeepSeek V4 Flash 0731", 284e9, 4096, 43, 0, 256, 6, 2048),
]
# docs/study.md §2 "Weight residency": checkpoint sizes in decimal GB
STUDY_CHECKPOINT_GB = {"kimi-k3": 1560, "glm-5.3": 756, "deepseek-v4-pro": 893, "deepseek-v4-flash": 166.9}
# Attention hidden sizes from the task brief (Kimi K3: 7168 with a 3584 latent MoE dimension)
HIDDEN = {"kimi-k3": 7168, "glm-5.3": 6144, "deepseek-v4-pro": 7168, "deepseek-v4-flash": 4096}


def test_study_models_order() -> None:
    assert STUDY_MODELS == ("kimi-k3", "glm-5.3", "deepseek-v4-pro", "deepseek-v4-flash")
    assert [m.key for m in list_models()][:4] == list(STUDY_MODELS)


@pytest.mark.parametrize("row", STUDY_TABLE, ids=[r[0] for r in STUDY_TABLE])
def test_study_table(row: tuple) -> None:
    key, name, params, h, layers, dense, experts, top_k, width = row
    m = get_model(key)
    assert (m.key, m.name, m.total_params) == (key, name, params)
    assert (m.comm_dim, m.num_layers, m.first_dense_layers) == (h, layers, dense)
    assert (m.routed_experts, m.top_k, m.expert_ffn_width) == (experts, top_k, width)
    assert m.hidden_size == HIDDEN[key]
    assert m.checkpoint_size_bytes == round(STUDY_CHECKPOINT_GB[key] * 1e9)
    assert m.bytes_per_activation == 2  # docs/study.md §3


def test_v4_flash_fully_specified() -> None:
    m = get_model("deepseek-v4-flash")
    a = m.attention
    assert (a.num_heads, a.num_kv_heads, a.head_dim, a.is_mla) == (64, 1, 128, False)
    assert (m.shared_experts, m.shared_expert_ffn_width) == (1, 2048)
    assert m.checkpoint_size_bytes == 166_900_000_000


def test_moe_layers_and_proxies() -> None:
    """MoE layers = layers − dense; TP proxy = h × layers; EP proxy = h × top-k × MoE layers (docs/study.md §2)."""
    assert get_model("kimi-k3").moe_layers == 92
    assert get_model("glm-5.3").moe_layers == 75
    for key, _, _, h, layers, dense, _, top_k, _ in STUDY_TABLE:
        m = get_model(key)
        assert m.tp_proxy == h * layers
        assert m.ep_proxy == h * top_k * (layers - dense)
    assert get_model("kimi-k3").tp_proxy == 333_312  # 3584 × 93, with h the latent dim, not 7168
    assert get_model("kimi-k3").ep_proxy == 5_275_648  # 3584 × 16 × 92


def test_every_builtin_documents_itself() -> None:
    models = list_models()
    assert {"deepseek-v3", "mixtral-8x7b", "qwen3-30b-a3b", "glm-4.5"} <= {m.key for m in models}
    for m in models:
        assert m.notes and m.source, m.key
    for key in STUDY_MODELS:  # every filled choice is explained in the notes
        text = " ".join(get_model(key).notes)
        assert "Filled" in text or "our choice" in text


def test_public_checkpoint_sizes_are_bf16_parameter_counts() -> None:
    """For the BF16 releases, index total_size = 2 bytes × parameters."""
    for key in ("mixtral-8x7b", "qwen3-30b-a3b"):
        m = get_model(key)
        assert m.checkpoint_size_bytes == 2 * m.total_params


def test_unknown_key_lists_allowed() -> None:
    with pytest.raises(MoesimError) as info:
        get_model("nope")
    msg = str(info.value)
    assert "\n" not in msg and "'nope'" in msg
    for m in list_models():
        assert m.key in msg


def test_get_model_from_yaml_path(tmp_path: Path) -> None:
    data = spec_to_mapping(get_model("glm-5.3"))
    data.update(key="my-glm", name="My GLM", top_k=4)
    path = tmp_path / "my-glm.yaml"
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    m = get_model(str(path))
    assert (m.key, m.top_k, m.ep_proxy) == ("my-glm", 4, 6144 * 4 * 75)
    assert (
        m.source
        == "docs/study.md §2 (table + weight residency); unlisted fields from the public GLM-5 config (glm_moe_dsa)"
    )


def test_get_model_from_hf_config_and_directory(tmp_path: Path) -> None:
    path = write_config(tmp_path / "Mixtral-8x7B-v0.1", MIXTRAL_8X7B)
    assert get_model(str(path)).routed_experts == 8
    assert get_model(str(path.parent)).key == "mixtral-8x7b-v0.1"


def test_get_model_missing_path(tmp_path: Path) -> None:
    with pytest.raises(MoesimError, match="not found"):
        get_model(str(tmp_path / "absent.yaml"))
    with pytest.raises(MoesimError, match="no config.json"):
        get_model(str(tmp_path))
