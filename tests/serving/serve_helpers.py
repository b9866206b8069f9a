"""Helpers of the serving tests (a module of its own: every test folder has a ``conftest``)."""

from __future__ import annotations

from importlib import resources
from pathlib import Path

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
