"""Collective algorithms: one module per algorithm, each registered in ``COLLECTIVES``."""

from moesim.system.collectives import (  # noqa: F401  (registration)
    dbt,
    direct,
    halving_doubling,
    hierarchical,
    low_latency,
    ring,
)
from moesim.system.collectives.base import (
    COLLECTIVES,
    Members,
    Plan,
    StepTiming,
    Transfer,
    chunk_sizes,
    expert_all_to_all_algorithms,
    occupies_sms,
    plan_for,
    resolve,
)

__all__ = ["COLLECTIVES", "Members", "Plan", "StepTiming", "Transfer", "chunk_sizes", "expert_all_to_all_algorithms", "occupies_sms", "plan_for", "resolve"]
