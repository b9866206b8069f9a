"""Scheduling policies: what a replica's next step holds (``moesim.serving.scheduler``). A policy is a function
``(state, now_s, scheduled_s) -> (prefill chunks, decoding sequences)``; each is one module that registers
itself in ``POLICIES`` (docs/serving-features.md, "Adding a scheduling policy")."""

from moesim.serving.policies import decode_first, prefill_first  # noqa: F401  (each registers its policy)
from moesim.serving.policies.base import POLICIES, Policy

__all__ = ["POLICIES", "Policy"]
