"""Fixtures of the serving tests: a one-layer MoE model file, one step-cost cache for the whole session, and
small scheduler settings, so every step simulation takes a few tens of milliseconds."""

from __future__ import annotations

from pathlib import Path

import pytest
from serve_helpers import write_tiny_model


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
