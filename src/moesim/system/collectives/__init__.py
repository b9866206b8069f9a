"""Collective algorithms: one module per algorithm, each registered in ``COLLECTIVES``."""

from moesim.system.collectives import dbt, direct, halving_doubling, hierarchical, ring  # noqa: F401  (registration)
from moesim.system.collectives.base import (
    COLLECTIVES,
    Members,
    Plan,
    StepTiming,
    Transfer,
    chunk_sizes,
    expert_all_to_all_algorithms,
    plan_for,
    resolve,
)

__all__ = ["COLLECTIVES", "Members", "Plan", "StepTiming", "Transfer", "chunk_sizes", "expert_all_to_all_algorithms", "plan_for", "resolve"]
