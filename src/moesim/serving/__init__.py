"""Serving (docs/serving.md): requests arriving over time, served by replicas that batch continuously, with
step costs from moesim runs (``costs``), optionally disaggregated into prefill and decode replicas whose KV
caches move over the cluster's network (``disagg``); latency percentiles, throughput and goodput under an
SLO (``metrics``), and a search for the deployment with the most goodput per GPU (``search``)."""

from moesim.serving.costs import Grid, StepCache, StepCosts
from moesim.serving.deployment import Deployment, Replica, ReplicaKind
from moesim.serving.metrics import Slo, parse_duration_s
from moesim.serving.policies import POLICIES
from moesim.serving.requests import Requests, make_requests, parse_length, poisson, read_trace
from moesim.serving.scheduler import SchedulerConfig
from moesim.serving.search import SearchResult, SearchSpace, search
from moesim.serving.simulate import Executor, ServeResult, serve

__all__ = [
    "POLICIES", "Deployment", "Executor", "Grid", "Replica", "ReplicaKind", "Requests", "SchedulerConfig",
    "SearchResult", "SearchSpace", "ServeResult", "Slo", "StepCache", "StepCosts", "make_requests",
    "parse_duration_s", "parse_length", "poisson", "read_trace", "search", "serve",
]
