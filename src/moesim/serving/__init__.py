"""Serving (docs/serving.md): requests arriving over time, served by replicas that batch continuously, with
step costs from moesim runs (``costs``), optionally disaggregated into prefill and decode replicas whose KV
caches move over the cluster's network (``disagg``); latency percentiles, throughput and goodput under an
SLO (``metrics``), and a search for the deployment with the most goodput per GPU (``search``).

Names are loaded on first use (PEP 562), so ``moesim.serving.config`` can be read without the simulator.
"""

from __future__ import annotations

import importlib
import sys
import types
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from moesim.serving.config import SchedulerConfig
    from moesim.serving.costs import Grid, StepCache, StepCosts
    from moesim.serving.deployment import Deployment, Replica, ReplicaKind
    from moesim.serving.metrics import Slo, parse_duration_s
    from moesim.serving.policies import POLICIES
    from moesim.serving.requests import Requests, make_requests, parse_length, poisson, read_trace
    from moesim.serving.search import SearchResult, SearchSpace, search
    from moesim.serving.simulate import Executor, ServeResult, serve

_HOME = {
    "SchedulerConfig": "config", "Grid": "costs", "StepCache": "costs", "StepCosts": "costs",
    "Deployment": "deployment", "Replica": "deployment", "ReplicaKind": "deployment", "Slo": "metrics",
    "parse_duration_s": "metrics", "POLICIES": "policies", "Requests": "requests", "make_requests": "requests",
    "parse_length": "requests", "parse_arrivals": "requests", "poisson": "requests", "read_trace": "requests", "SearchResult": "search",
    "SearchSpace": "search", "search": "search", "Executor": "simulate", "ServeResult": "simulate",
    "serve": "simulate",
}
"""Public name → the module of this package that defines it."""

__all__ = [
    "POLICIES", "Deployment", "Executor", "Grid", "Replica", "ReplicaKind", "Requests", "SchedulerConfig",
    "SearchResult", "SearchSpace", "ServeResult", "Slo", "StepCache", "StepCosts", "make_requests",
    "parse_arrivals", "parse_duration_s", "parse_length", "poisson", "read_trace", "search", "serve",
]


def __getattr__(name: str) -> Any:
    if name not in _HOME:
        raise AttributeError(f"module 'moesim.serving' has no attribute '{name}'")
    value = getattr(importlib.import_module(f"moesim.serving.{_HOME[name]}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


class _Package(types.ModuleType):
    """The package, whose ``search`` stays the function when the module ``moesim.serving.search`` loads (the
    import system sets a package's attribute to each submodule it loads)."""

    def __setattr__(self, name: str, value: Any) -> None:
        if name in _HOME and isinstance(value, types.ModuleType):
            value = getattr(value, name)
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package
