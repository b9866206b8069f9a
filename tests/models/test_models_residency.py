"""Weight residency: the table of docs/study.md §2, the criterion, and sizes read from real safetensors files and indexes."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

from moesim.errors import MoesimError
from moesim.models import STUDY_MODELS, get_model
from moesim.models.checkpoint import checkpoint_size, safetensors_tensor_bytes
from moesim.models.residency import (
    checkpoint_residency,
    model_residency,
    residency,
    residency_for,
)

# docs/study.md §2 "Weight residency": checkpoint GB and per-rank GB over 32 ranks (size / 32)
STUDY_RESIDENCY = {
    "kimi-k3": (1560, 48.75),
    "glm-5.3": (756, 23.625),
    "deepseek-v4-pro": (893, 27.90625),
    "deepseek-v4-flash": (166.9, 5.215625),
}


def _tensors() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    return {
        "embed.weight": rng.standard_normal((7, 5)).astype(np.float32),
        "layers.0.w": rng.standard_normal((3, 4)).astype(np.float16),
        "layers.0.idx": np.arange(6, dtype=np.int64),
        "layers.0.q": np.arange(16, dtype=np.int8).reshape(4, 4),
        "mask": np.array([True, False, True]),
        "empty": np.zeros((0, 3), dtype=np.float64),
    }


# --- the study table ------------------------------------------------------------------------------------


@pytest.mark.parametrize("key", STUDY_MODELS)
def test_study_table(key: str) -> None:
    size_gb, per_rank_gb = STUDY_RESIDENCY[key]
    r = model_residency(get_model(key))
    assert (r.total_bytes, r.ranks, r.capacity_bytes) == (round(size_gb * 1e9), 32, 64_000_000_000)
    assert r.per_rank_bytes == pytest.approx(per_rank_gb * 1e9, rel=1e-12)
    assert r.fits  # all four study models are below 64 GB per rank
    assert r.label == key


def test_report_says_what_it_leaves_out() -> None:
    note = model_residency(get_model("kimi-k3")).note
    assert "NOT included" in note and "KV cache" in note and "activations" in note and "buffers" in note


def test_criterion_is_capacity_at_least_requirement() -> None:
    """fits ⇔ capacity ≥ total / ranks, so a share exactly equal to the capacity fits."""
    assert residency(64 * 32, ranks=32, capacity_bytes=64, source="t").fits
    assert not residency(64 * 32 + 1, ranks=32, capacity_bytes=64, source="t").fits
    r = residency(1000, ranks=3, capacity_bytes=400, source="t")
    assert r.per_rank_bytes == pytest.approx(1000 / 3) and r.headroom_bytes == pytest.approx(400 - 1000 / 3)


def test_other_ranks_and_capacity() -> None:
    r = model_residency(get_model("kimi-k3"), ranks=16, capacity_bytes=80_000_000_000)
    assert r.per_rank_bytes == 1560e9 / 16 and not r.fits  # 97.5 GB > 80 GB


@pytest.mark.parametrize(
    ("kwargs", "field"), [({"ranks": 0}, "ranks"), ({"capacity_bytes": 0}, "capacity_bytes")]
)
def test_bad_inputs(kwargs: dict, field: str) -> None:
    with pytest.raises(MoesimError, match=field):
        residency(100, source="t", **kwargs)


def test_model_without_size(tmp_path: Path) -> None:
    from hf_config_samples import MIXTRAL_8X7B, write_config

    spec = get_model(str(write_config(tmp_path / "Mixtral", MIXTRAL_8X7B)))
    with pytest.raises(MoesimError, match="checkpoint_size_bytes"):
        model_residency(spec)


# --- real safetensors files ------------------------------------------------------------------------------


def test_file_written_by_safetensors(tmp_path: Path) -> None:
    tensors = _tensors()
    path = tmp_path / "model.safetensors"
    save_file(tensors, str(path), metadata={"format": "np"})
    expected = sum(t.nbytes for t in tensors.values())  # Σ elements × element size
    assert safetensors_tensor_bytes(path) == expected
    r = checkpoint_residency(path, ranks=4)
    assert (r.total_bytes, r.per_rank_bytes) == (expected, expected / 4)


def _hand_written(path: Path, entries: dict, data_bytes: int, pad_to: int = 8) -> None:
    """A safetensors file built byte by byte: u64 LE header length, JSON header (space-padded), data."""
    header = json.dumps(entries, separators=(",", ":")).encode()
    header += b" " * (-len(header) % pad_to)
    path.write_bytes(
        struct.pack("<Q", len(header))
        + header
        + bytes(range(256)) * (data_bytes // 256)
        + bytes(data_bytes % 256)
    )


def test_hand_written_file_is_real_safetensors(tmp_path: Path) -> None:
    entries = {
        "__metadata__": {"format": "pt"},
        "a": {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 24]},
        "b": {"dtype": "F16", "shape": [4], "data_offsets": [24, 32]},
        "c": {"dtype": "I8", "shape": [2, 2, 2], "data_offsets": [32, 40]},
    }
    path = tmp_path / "hand.safetensors"
    _hand_written(path, entries, 40)
    loaded = load_file(str(path))  # the reference reader accepts it
    assert sum(t.nbytes for t in loaded.values()) == 40
    assert safetensors_tensor_bytes(path) == 2 * 3 * 4 + 4 * 2 + 8 * 1


def test_hand_written_low_precision_dtypes(tmp_path: Path) -> None:
    """FP8 is 1 byte per element, FP4 half a byte, BF16 2: bytes = elements × bits / 8."""
    entries = {
        "w8": {"dtype": "F8_E4M3", "shape": [16, 2], "data_offsets": [0, 32]},
        "w4": {"dtype": "F4", "shape": [10, 2], "data_offsets": [32, 42]},
        "s": {"dtype": "BF16", "shape": [3], "data_offsets": [42, 48]},
    }
    path = tmp_path / "fp4.safetensors"
    _hand_written(path, entries, 48)
    assert safetensors_tensor_bytes(path) == 32 * 8 // 8 + 20 * 4 // 8 + 3 * 16 // 8


def test_offsets_must_match_dtype_and_shape(tmp_path: Path) -> None:
    path = tmp_path / "bad.safetensors"
    _hand_written(path, {"a": {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 20]}}, 24)
    with pytest.raises(MoesimError, match="corrupt header") as info:
        safetensors_tensor_bytes(path)
    assert str(path) in str(info.value) and "tensor 'a'" in str(info.value)


@pytest.mark.parametrize(
    "damage",
    ["truncated_data", "short_prefix", "huge_header_length", "not_json", "not_object"],
)
def test_corrupt_or_truncated_file_names_it(tmp_path: Path, damage: str) -> None:
    path = tmp_path / "model-00001-of-00002.safetensors"
    save_file(_tensors(), str(path))
    raw = path.read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    bad = {
        "truncated_data": raw[:-10],
        "short_prefix": raw[:5],
        "huge_header_length": struct.pack("<Q", 10**12) + raw[8:],
        "not_json": raw[:8] + b"\xff" * n + raw[8 + n :],
        "not_object": struct.pack("<Q", 2) + b"[]",
    }[damage]
    path.write_bytes(bad)
    with pytest.raises(MoesimError) as info:
        checkpoint_size(path)
    msg = str(info.value)
    assert str(path) in msg and "\n" not in msg
    assert "truncated" in msg or "corrupt" in msg


def test_large_declared_tensor_without_reading_data(tmp_path: Path) -> None:
    """A 6 GB tensor in a sparse file: only the header is read, so this is instant and exact."""
    size = 6_000_000_000
    entries = {"big": {"dtype": "BF16", "shape": [size // 2], "data_offsets": [0, size]}}
    header = json.dumps(entries).encode()
    path = tmp_path / "big.safetensors"
    with path.open("wb") as f:
        f.write(struct.pack("<Q", len(header)) + header)
        f.truncate(8 + len(header) + size)
    assert checkpoint_residency(path).total_bytes == size


# --- checkpoint directories and indexes ------------------------------------------------------------------


def _sharded(tmp_path: Path, metadata: bool = True) -> tuple[Path, int]:
    tmp_path.mkdir(parents=True, exist_ok=True)
    tensors = _tensors()
    names = sorted(tensors)
    shards = {"model-00001-of-00002.safetensors": names[:3], "model-00002-of-00002.safetensors": names[3:]}
    weight_map = {}
    for shard, keys in shards.items():
        save_file({k: tensors[k] for k in keys}, str(tmp_path / shard))
        weight_map.update({k: shard for k in keys})
    total = sum(t.nbytes for t in tensors.values())
    index = {"weight_map": weight_map}
    if metadata:
        index["metadata"] = {"total_size": total}
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps(index), encoding="utf-8")
    return tmp_path, total


def test_index_metadata_total_size(tmp_path: Path) -> None:
    directory, total = _sharded(tmp_path)
    size = checkpoint_size(directory)
    assert size.total_bytes == total and "metadata.total_size" in size.source


def test_index_alone_is_enough(tmp_path: Path) -> None:
    """Residency from the index file only (the shards need not be downloaded)."""
    (tmp_path / "model.safetensors.index.json").write_text(
        json.dumps(
            {
                "metadata": {"total_size": 1_560_000_000_000},
                "weight_map": {"w": "model-00001-of-00064.safetensors"},
            }
        )
    )
    r = checkpoint_residency(tmp_path)
    assert r.per_rank_bytes == 48.75e9 and r.fits


def test_index_without_metadata_sums_shard_headers(tmp_path: Path) -> None:
    directory, total = _sharded(tmp_path, metadata=False)
    size = checkpoint_size(directory / "model.safetensors.index.json")
    assert size.total_bytes == total and "2 shards" in size.source


def test_index_with_missing_shard(tmp_path: Path) -> None:
    directory, _ = _sharded(tmp_path, metadata=False)
    (directory / "model-00002-of-00002.safetensors").unlink()
    with pytest.raises(MoesimError, match="model-00002-of-00002.safetensors"):
        checkpoint_size(directory)


def test_index_with_bad_total_size(tmp_path: Path) -> None:
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps({"metadata": {"total_size": "big"}}))
    with pytest.raises(MoesimError, match="metadata.total_size"):
        checkpoint_size(tmp_path)


def test_directory_without_index_sums_all_files(tmp_path: Path) -> None:
    directory, total = _sharded(tmp_path)
    (directory / "model.safetensors.index.json").unlink()
    size = checkpoint_size(directory)
    assert size.total_bytes == total and "2 safetensors files" in size.source


def test_empty_directory(tmp_path: Path) -> None:
    with pytest.raises(MoesimError, match="no \\*.safetensors"):
        checkpoint_size(tmp_path)


def test_residency_for_a_model_directory(tmp_path: Path) -> None:
    """A Hugging Face directory (config.json + shards) is sized from its files and labelled from its config."""
    from hf_config_samples import MIXTRAL_8X7B, write_config

    directory, total = _sharded(tmp_path / "Mixtral-8x7B-v0.1")
    write_config(directory, MIXTRAL_8X7B)
    r = residency_for(str(directory))
    assert (r.label, r.total_bytes, r.per_rank_bytes) == ("mixtral-8x7b-v0.1", total, total / 32)
    assert residency_for("deepseek-v4-flash").per_rank_bytes == 5.215625e9


# --- data-parallel attention ----------------------------------------------------------------------------


def test_dp_groups_hold_the_weights_outside_the_routed_experts() -> None:
    """DeepSeek-V3, DP32EP32: routed experts are 256 per MoE layer × (58 + 1 MTP) layers × 3·7168·2048 parameters
    at 1 B; the rest R of the 688,586,727,753 B checkpoint is on every GPU: per rank = R + (total − R) / 32."""
    spec = get_model("deepseek-v3")
    routed = 256 * (58 + 1) * 3 * 7168 * 2048
    rest = 688_586_727_753 - routed
    r = model_residency(spec, ranks=32, dp_groups=32)
    assert (r.dp_groups, r.replicated_bytes, r.total_bytes) == (32, rest, 688_586_727_753)
    assert r.per_rank_bytes == (rest * 32 + 688_586_727_753 - rest) / 32
    # DP8TP4EP32: each of 8 groups holds the rest over its 4 ranks
    assert model_residency(spec, ranks=32, dp_groups=8).per_rank_bytes == (rest * 8 + 688_586_727_753 - rest) / 32
    assert model_residency(spec, ranks=32, dp_groups=1) == model_residency(spec, ranks=32)  # even sharding
    assert "dp_groups" not in model_residency(spec).to_dict() and r.to_dict()["replicated_bytes"] == rest


def test_dp_groups_must_divide_the_ranks_and_need_a_spec(tmp_path: Path) -> None:
    with pytest.raises(MoesimError, match="field 'dp_groups': 5 groups do not divide 32 ranks"):
        model_residency(get_model("deepseek-v3"), ranks=32, dp_groups=5)
    save_file(_tensors(), str(tmp_path / "model.safetensors"))
    with pytest.raises(MoesimError, match="redundant experts and dp_groups need a catalog key"):
        residency_for(str(tmp_path), dp_groups=2)
