"""Fixtures of the serving tests: a one-layer MoE model file, one step-cost cache for the whole session, and
small scheduler settings, so every step simulation takes a few tens of milliseconds."""

from __future__ import annotations

from importlib import resources
from pathlib import Path

import pytest
import yaml

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "serving"
TRACE = FIXTURES / "trace.csv"


def write_tiny_model(folder: Path, layers: int = 1) -> Path:
    """DeepSeek V4 Flash with ``layers`` layers and a 2 GB checkpoint (so the KV cache has room)."""
    data = yaml.safe_load((resources.files("moesim.models") / "data" / "deepseek-v4-flash.yaml").read_text())
    data.update(key="tiny-moe", name="Tiny MoE (for tests)", num_layers=layers, first_dense_layers=0,
                checkpoint_size_bytes=2_000_000_000)
    data.pop("notes", None)
    path = folder / "tiny.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> str:
    return str(write_tiny_model(tmp_path_factory.mktemp("model")))


@pytest.fixture(scope="session")
def cache_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("step-costs")


@pytest.fixture()
def small_config():
    from moesim.serving import SchedulerConfig

    return SchedulerConfig(token_budget=2048, max_seqs=16)
