"""One serving simulation as a library call: deployment + requests + scheduler → step costs → replay → figures."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from moesim.errors import input_error
from moesim.experiments.executors import EXECUTORS
from moesim.serving.costs import (
    FillReport,
    Grid,
    Progress,
    StepCache,
    StepCosts,
    batch_axis,
    context_axis,
    fill,
    step_spec,
)
from moesim.serving.deployment import DECODE, PREFILL, Deployment, ReplicaKind
from moesim.serving.disagg import KV_BACKEND, KvTransfers, check_kv_backend
from moesim.serving.metrics import Slo, aggregates, request_table
from moesim.serving.replay import replay
from moesim.serving.requests import Requests
from moesim.serving.scheduler import SchedulerConfig
from moesim.version import __version__


@dataclass(frozen=True)
class Executor:
    """Where missing steps are simulated: ``local`` with one worker is this process."""

    name: str = "local"
    workers: int | None = 1
    address: str | None = None

    def __post_init__(self) -> None:
        """Checked when made, before the cache is read: a wrong name is an error even when every step is cached."""
        if self.name not in EXECUTORS.names():
            raise input_error("--executor", "executor", f"unknown executor {self.name!r}", EXECUTORS.names())


def grids(deployment: Deployment, requests: Iterable[Requests], config: SchedulerConfig) -> dict[ReplicaKind, Grid]:
    """The step grid of each replica kind: prefill passes up to the token budget where replicas prefill,
    decode steps up to ``max_seqs`` sequences and the longest request where they decode."""
    longest = max(int((r.prompt_tokens + r.output_tokens).max()) for r in requests)
    out: dict[ReplicaKind, Grid] = {}
    for rep in deployment.replicas():
        g = Grid(prefill_tokens=batch_axis(config.token_budget)) if rep.role != DECODE else Grid()
        if rep.role != PREFILL:
            tokens = config.max_seqs * (config.mtp_draft_tokens + 1)  # a step verifies k drafts per sequence
            g = g.union(Grid(decode_batch=batch_axis(tokens), decode_context=context_axis(longest)))
        out[rep.kind] = out[rep.kind].union(g) if rep.kind in out else g
    return out


def step_costs(kind_grids: dict[ReplicaKind, Grid], cache: StepCache, executor: Executor = Executor(),
               progress: Progress | None = None) -> tuple[dict[ReplicaKind, StepCosts], FillReport]:
    """Fill every grid (one batch of runs, simulated where the cache lacks them) and build the costs."""
    specs = [step_spec(kind, *point) for kind, g in kind_grids.items() for point in g.points()]
    walls, report = fill(specs, cache, executor.name, executor.workers, executor.address, progress)
    return {kind: StepCosts(kind, g, walls) for kind, g in kind_grids.items()}, report


def interpolation_check(costs: dict[ReplicaKind, StepCosts], per_phase: int, cache: StepCache,
                        executor: Executor = Executor()) -> list[dict[str, Any]]:
    """Simulate the mean point of the ``per_phase`` most used grid cells of each phase and kind; one record
    each with the interpolated and simulated step times and the relative error."""
    points = [(kind, p) for kind, c in costs.items() for p in c.check_points(per_phase)]
    if not points:
        return []
    walls, _ = fill([step_spec(kind, *p) for kind, p in points], cache, executor.name, executor.workers,
                    executor.address)
    out = []
    for kind, (phase, x, context) in points:
        simulated = walls[step_spec(kind, phase, x, context).key()]
        interpolated = costs[kind].interpolated(phase, x, context)
        out.append({"strategy": kind.strategy, "topology": kind.topology, "phase": phase,
                    "tokens_or_batch": x, "context_tokens": context, "simulated_s": simulated,
                    "interpolated_s": interpolated, "error": interpolated / simulated - 1.0})
    return out


@dataclass(frozen=True, eq=False)
class ServeResult:
    """A serving simulation: its inputs, the per-request table, the aggregate figures and how the step
    costs were obtained (grid, cache use, interpolation error)."""

    deployment: Deployment
    requests: Requests
    config: SchedulerConfig
    slo: Slo
    kv_backend: str
    table: pa.Table
    summary: dict[str, Any]
    grids: dict[ReplicaKind, Grid]
    fill: FillReport
    interpolation: list[dict[str, Any]] = field(default_factory=list)
    replay_s: float = 0.0

    @property
    def serve_id(self) -> str:
        return serve_id(self.deployment, self.requests, self.config, self.slo, self.kv_backend)

    def record(self) -> dict[str, Any]:
        """One flat JSON-able record: the deployment, the scheduler, the SLO, the figures, the step grid."""
        errors = [abs(e["error"]) for e in self.interpolation]
        return {
            "serve_id": self.serve_id, **self.deployment.as_dict(), "gpus": self.deployment.num_gpus,
            "requests_source": self.requests.source, "scheduler": self.config.key(),
            "kv_backend": self.kv_backend, **self.summary,
            "step_grid": [{"strategy": k.strategy, "topology": k.topology, **g.describe()} for k, g in self.grids.items()],
            "step_costs": dataclasses.asdict(self.fill), "interpolation": self.interpolation,
            "interpolation_error_max": max(errors) if errors else None, "replay_s": self.replay_s,
            "version": __version__,
        }


def serve_id(deployment: Deployment, requests: Requests, config: SchedulerConfig, slo: Slo, kv_backend: str) -> str:
    """sha256 of every input of a serving simulation (the requests by their arrays)."""
    data = {"deployment": deployment.as_dict(), "requests": requests.fingerprint(),
            "scheduler": config.key(), "slo": dataclasses.asdict(slo), "kv_backend": kv_backend,
            "version": __version__}
    return hashlib.sha256(json.dumps(data, sort_keys=True, default=repr).encode()).hexdigest()


def evaluate(deployment: Deployment, requests: Requests, config: SchedulerConfig, slo: Slo,
             costs: dict[ReplicaKind, StepCosts], kv_backend: str = KV_BACKEND,
             offered_rate_rps: float | None = None) -> tuple[pa.Table, dict[str, Any]]:
    """Replay ``requests`` on warm step costs: the per-request table and the aggregates (``offered_rate_rps``:
    the rate the arrivals were drawn at, if known)."""
    transfers = None
    if deployment.disaggregate is not None:
        transfers = KvTransfers(deployment.topology, deployment.run.network, kv_backend, deployment.run.overrides)
    result = replay(requests, deployment.replicas(), costs, config, transfers)
    table = request_table(requests, result, slo)
    return table, aggregates(table, result, slo, deployment.num_gpus, offered_rate_rps)


def serve(deployment: Deployment, requests: Requests, config: SchedulerConfig = SchedulerConfig(),
          slo: Slo = Slo(), *, cache: StepCache | None = None, executor: Executor = Executor(),
          check_points: int = 2, kv_backend: str = KV_BACKEND, progress: Progress | None = None) -> ServeResult:
    """Simulate serving ``requests`` on ``deployment``: fill the step costs (cached), replay, check the
    interpolation at the ``check_points`` most used cells per phase (0: no check)."""
    check_kv_backend(kv_backend)
    cache = cache or StepCache()
    kind_grids = grids(deployment, [requests], config)
    costs, report = step_costs(kind_grids, cache, executor, progress)
    t0 = time.perf_counter()
    table, summary = evaluate(deployment, requests, config, slo, costs, kv_backend)
    replay_s = time.perf_counter() - t0
    checked = interpolation_check(costs, check_points, cache, executor) if check_points > 0 else []
    return ServeResult(deployment, requests, config, slo, kv_backend, table, summary,
                       kind_grids, report, checked, replay_s)
