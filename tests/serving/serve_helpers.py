"""Helpers of the serving tests (a module of its own: every test folder has a ``conftest``)."""

from __future__ import annotations

from importlib import resources
from pathlib import Path

import numpy as np
import yaml

from moesim.serving import Deployment, Requests

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


def one_replica(model: str) -> Deployment:
    return Deployment(model, "star:2", "TP1EP2", backend="flow")


def requests(arrival, prompt, output) -> Requests:
    """Requests at the given arrival times, every prompt and output of the given lengths (or arrays)."""
    n = len(arrival)
    return Requests(np.asarray(arrival, dtype=float), np.full(n, prompt, dtype=np.int64) if np.isscalar(prompt)
                    else np.asarray(prompt, dtype=np.int64), np.full(n, output, dtype=np.int64) if np.isscalar(output)
                    else np.asarray(output, dtype=np.int64), np.arange(n, dtype=np.int64), "test")


def column(result, name: str) -> np.ndarray:
    return result.table.column(name).to_numpy(zero_copy_only=False)
