"""Fixtures of the experiments tests: a one-layer MoE model file and a 24-run matrix on it.

The model is the built-in DeepSeek V4 Flash with one layer (a real user model file, so the sweep also
exercises model paths); a run takes a fraction of a second, so a 24-run sweep fits in a test.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

import pytest
import yaml

SMALL_MATRIX = """\
name: small
factors:
  model: tiny.yaml
  topology: [1, 2, 3, 4, 5, 6]
  strategy: [TP2EP16, TP4EP8]
  algorithm: ring_direct
  network: [ib_cc0, roce_dcqcn]
"""
SMALL_RUNS = 24


def write_tiny_model(folder: Path) -> Path:
    data = yaml.safe_load((resources.files("moesim.models") / "data" / "deepseek-v4-flash.yaml").read_text())
    data.update(key="tiny-moe", name="Tiny MoE (1 layer, for tests)", num_layers=1)
    data.pop("notes", None)
    path = folder / "tiny.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


@pytest.fixture(scope="session")
def small_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder with ``tiny.yaml`` (the model) and ``small.yaml`` (24 runs: 6 topologies × 2 × 2)."""
    d = tmp_path_factory.mktemp("small")
    write_tiny_model(d)
    (d / "small.yaml").write_text(SMALL_MATRIX)
    return d


@pytest.fixture(scope="session")
def small_specs(small_dir: Path) -> list:
    from moesim.experiments import load_matrix

    specs = load_matrix(small_dir / "small.yaml").runs()
    assert len(specs) == SMALL_RUNS
    return specs


@pytest.fixture(scope="session")
def alone_results(small_specs: list) -> dict:
    """Every small run simulated alone in this process: spec key → RunResult (the reference)."""
    from moesim.system.run import simulate_run

    return {s.key(): simulate_run(s) for s in small_specs}


@pytest.fixture(scope="session")
def reference_store(small_specs: list, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An uninterrupted 2-worker local sweep of the small matrix."""
    from moesim.experiments import run_sweep

    out = tmp_path_factory.mktemp("reference")
    summary = run_sweep(small_specs, out, workers=2, progress="none")
    assert summary.ran == SMALL_RUNS and not summary.failures
    return out
