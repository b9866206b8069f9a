"""`moesim models list|show` and `moesim residency` through the real typer app (and one real subprocess)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hf_config_samples import QWEN3_30B_A3B, write_config
from safetensors.numpy import save_file
from typer.testing import CliRunner

from moesim.cli import app
from moesim.errors import MoesimError
from moesim.models import STUDY_MODELS, list_models

runner = CliRunner()


def _ok(*args: str) -> str:
    result = runner.invoke(app, list(args))
    assert result.exit_code == 0, (result.output, result.exception)
    return result.output


def test_models_list() -> None:
    out = _ok("models", "list")
    for m in list_models():
        assert m.key in out
    data = json.loads(_ok("models", "list", "--json"))
    assert [d["key"] for d in data] == [m.key for m in list_models()]


def test_models_show_json_has_fields_and_proxies() -> None:
    data = json.loads(_ok("models", "show", "deepseek-v4-flash", "--json"))
    assert (data["hidden_size"], data["num_layers"], data["attention"]["num_kv_heads"]) == (4096, 43, 1)
    assert data["moe_layers"] == 43
    assert data["tp_proxy"] == 4096 * 43  # h × layers
    assert data["ep_proxy"] == 4096 * 6 * 43  # h × top-k × MoE layers
    assert data["notes"] and data["source"]


def test_models_show_table() -> None:
    out = _ok("models", "show", "kimi-k3")
    for text in (
        "comm_dim",
        "3584",
        "moe_layers",
        "92",
        "tp_proxy",
        "333312",
        "ep_proxy",
        "5275648",
        "attention.kv_lora_rank",
    ):
        assert text in out


def test_models_show_hf_config(tmp_path: Path) -> None:
    path = write_config(tmp_path / "Qwen3-30B-A3B", QWEN3_30B_A3B)
    data = json.loads(_ok("models", "show", str(path), "--json"))
    assert (data["key"], data["routed_experts"], data["ep_proxy"]) == ("qwen3-30b-a3b", 128, 2048 * 8 * 48)


def test_residency_default_is_the_study_table() -> None:
    rows = json.loads(_ok("residency", "--json"))
    assert [r["label"] for r in rows] == list(STUDY_MODELS)
    # docs/study.md §2: size / 32 in decimal GB
    assert [r["per_rank_bytes"] / 1e9 for r in rows] == pytest.approx(
        [48.75, 23.625, 27.90625, 5.215625], rel=1e-12
    )
    assert all(r["fits"] and r["capacity_bytes"] == 64e9 and "NOT included" in r["note"] for r in rows)
    table = _ok("residency")
    for text in ("48.75", "23.625", "27.90625", "5.215625", "NOT included"):
        assert text in table


def test_residency_from_checkpoint_directory(tmp_path: Path) -> None:
    tensors = {"a": np.ones((10, 10), np.float32), "b": np.ones(6, np.int16)}
    save_file(tensors, str(tmp_path / "model.safetensors"))
    rows = json.loads(_ok("residency", "--checkpoint", str(tmp_path), "--ranks", "4", "--json"))
    assert rows[0]["total_bytes"] == 400 + 12 and rows[0]["per_rank_bytes"] == 412 / 4


def test_residency_stated_size_and_capacity() -> None:
    rows = json.loads(_ok("residency", "kimi-k3", "--size-gb", "100", "--capacity-gb", "3", "--json"))
    assert rows[0]["label"] == "kimi-k3"
    assert rows[0]["per_rank_bytes"] == 100e9 / 32 and not rows[0]["fits"]  # 3.125 GB > 3 GB


def test_residency_counts_redundant_experts() -> None:
    """DeepSeek-V3 with 32 replicas per MoE layer: 32 × 58 layers × 3·7168·2048 parameters at 1 byte more."""
    plain, more = (json.loads(_ok("residency", "deepseek-v3", *extra, "--json"))[0]
                   for extra in ((), ("--redundant-experts", "32")))
    assert more["total_bytes"] - plain["total_bytes"] == 32 * 58 * 3 * 7168 * 2048
    result = runner.invoke(app, ["residency", "deepseek-v3", "--size-gb", "10", "--redundant-experts", "1"])
    assert isinstance(result.exception, MoesimError) and "--redundant-experts" in str(result.exception)


def test_residency_public_models_with_other_ranks() -> None:
    rows = json.loads(_ok("residency", "glm-4.5", "mixtral-8x7b", "--ranks", "8", "--json"))
    assert [r["per_rank_bytes"] for r in rows] == [713_571_797_632 / 8, 93_405_585_408 / 8]


@pytest.mark.parametrize(
    "args",
    [
        ["residency", "kimi-k3", "glm-5.3", "--size-gb", "3"],
        ["residency", "--size-gb", "3", "--checkpoint", "."],
        ["residency", "--size-gb", "-1"],
        ["residency", "--ranks", "0"],
        ["models", "show", "nope"],
    ],
)
def test_user_errors_raise_moesim_error(args: list[str]) -> None:
    result = runner.invoke(app, args)
    assert isinstance(result.exception, MoesimError), result.output


def test_unknown_model_exits_2_with_one_line() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "moesim.cli", "models", "show", "nope"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "'nope'" in lines[0] and "kimi-k3" in lines[0]
    assert "Traceback" not in proc.stderr


def test_corrupt_checkpoint_exits_2_naming_the_file(tmp_path: Path) -> None:
    path = tmp_path / "model.safetensors"
    path.write_bytes(b"\x10\x00\x00")
    proc = subprocess.run(
        [sys.executable, "-m", "moesim.cli", "residency", "--checkpoint", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2
    assert len(proc.stderr.strip().splitlines()) == 1 and str(path) in proc.stderr
