"""``moesim serve search``: the deployment with the most goodput per GPU under an SLO.

Candidates are every split, server count and mode asked for: colocated replicas of each split, and, when
disaggregation is searched, every prefill:decode division of the servers with a split per side
(DistServe searches each phase's parallelism the same way). All their step grids are filled in one
batch of runs on the executor (``local`` or ``ray``); the candidates' replays then run on the warm costs, in this
process or in local worker processes (``replay_workers``), with the same results.

A candidate's capacity is the highest arrival rate it sustains (``metrics``: throughput within
``SUSTAIN_TOLERANCE`` of the arrival rate over the steady-state window, TTFT not growing) while at least
``attainment`` of the window's completions meet the SLO (DistServe's goodput; Zhong et al., OSDI 2024):
the same requests (one seed, or the trace) are replayed with arrival times scaled, doubling or halving the
rate until a rate passes and one fails, then bisecting geometrically. The rate found must pass again on
a run CONFIRM_REPEATS times as long: a queue that grows too slowly to fail a short run fails a long one,
and near capacity the share meeting the SLO keeps falling with the run's length (long, rare busy
periods). The longer run is fresh requests from the same generator when the caller gives them (the
command line does for Poisson arrivals, so a lucky sample of lengths cannot carry the capacity), else the
requests repeated CONFIRM_REPEATS times in a row (a trace). A rate it does not confirm is lowered by
CONFIRM_BACKOFF until one is confirmed, then CONFIRM_BISECTIONS geometric bisections on the longer run
narrow the gap. The lowest failing rate above a capacity confirmed at once is
replayed the same way: if that passes, the short runs failed for their length (few requests in the
window), that rate is the capacity and the candidate is flagged ``conservative``. A rate that is not
sustained fails however many requests met the SLO: a finite run above capacity ends before its queue
fails them. A candidate that still passes after ``MAX_DOUBLINGS`` doublings has no upper bound found (its
figure is a lower bound). The candidate's figure is its goodput at capacity (SLO-meeting completions per second) per GPU.
"""

from __future__ import annotations

import hashlib
import json
import math
import multiprocessing
import os
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor, as_completed
from concurrent.futures.process import BrokenProcessPool
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import numpy as np
import pyarrow as pa

from moesim.errors import MoesimError, input_error
from moesim.experiments.executors.local import refuse_when_importing_main
from moesim.schema import default_of
from moesim.serving.costs import FillReport, Grid, StepCache, StepCosts, progress_lines
from moesim.serving.deployment import (
    BOTH,
    DECODE,
    PREFILL,
    ROLES,
    Deployment,
    ReplicaKind,
    cluster_shape,
    sub_topology,
)
from moesim.serving.disagg import check_kv_backend
from moesim.serving.metrics import Slo
from moesim.serving.requests import Requests
from moesim.serving.scheduler import SchedulerConfig
from moesim.serving.simulate import Executor, evaluate, grids, step_costs
from moesim.system.spec import RunSpec
from moesim.version import __version__
from moesim.workload.layout import ParallelLayout

CONFIRM_REPEATS = 10
"""The capacity found is replayed on a run this many times as long, and must pass again."""
CONFIRM_BACKOFF = 0.9
"""A capacity the longer run does not confirm is lowered by this factor until one is confirmed."""
CONFIRM_BISECTIONS = 2
"""Geometric bisections on the longer run between the confirmed rate and the one it failed (10 % → 2.7 %)."""
MAX_DOUBLINGS = 24
"""Above start × 2^24 a candidate that still passes is reported with no upper bound found."""
MAX_HALVINGS = 10
"""Below start / 2^10 a candidate is taken to have no capacity (each slower replay costs more steps)."""


@dataclass(frozen=True)
class SearchSpace:
    """What to try: server counts of ``topology``'s kind, splits, modes, prefill:decode server ratios
    (None: every division of the servers); the rest is every candidate's."""

    model: str
    topology: str
    strategies: tuple[str, ...]
    servers: tuple[int, ...] = ()
    modes: tuple[str, ...] = ("colocated",)
    ratios: tuple[tuple[int, int], ...] | None = None
    algorithm: str = default_of(RunSpec, "algorithm")
    network: str = default_of(RunSpec, "network")
    backend: str = default_of(RunSpec, "backend")
    overrides: tuple[tuple[str, Any], ...] = ()

    def candidates(self) -> tuple[list[Deployment], list[str]]:
        """Every candidate that fits, and one line per combination left out (and why)."""
        out: list[Deployment] = []
        skipped: list[str] = []
        def run(topology: str, strategy: str) -> RunSpec:
            return RunSpec(self.model, topology, strategy, self.algorithm, self.network, self.backend, self.overrides)

        for n in self.servers or (cluster_shape(self.topology)[0],):
            topology = sub_topology(self.topology, n)
            tries: list[Deployment] = []
            if "colocated" in self.modes:
                tries += [Deployment(run(topology, s)) for s in self.strategies]
            if "disaggregated" in self.modes:
                ratios = self.ratios if self.ratios is not None else tuple((p, n - p) for p in range(1, n))
                tries += [Deployment(run(topology, sd), prefill_strategy=sp, disaggregate=r)
                          for r in ratios if sum(r) == n for sp in self.strategies for sd in self.strategies]
                skipped += [f"--ratios {p}:{d}: {p + d} servers, {topology} has {n}" for p, d in ratios if p + d != n]
            for d in tries:
                try:
                    d.replicas()
                    out.append(d)
                except MoesimError as exc:
                    skipped.append(str(exc))
        if not out:
            raise MoesimError("serve search: no candidate fits: " + "; ".join(skipped[:3]))
        return out, skipped


@dataclass(frozen=True, eq=False)
class Evaluation:
    """One replay of a candidate at one arrival rate."""

    rate_rps: float
    summary: dict[str, Any]
    table: pa.Table
    confirmation: bool = False
    """A replay of the longer run (``CONFIRM_REPEATS`` times as many requests) checking a capacity."""

    @property
    def attainment(self) -> float:
        """The share of the steady-state window's completions that met the SLO."""
        return float(self.summary["window_attainment"] or 0.0)

    def passes(self, attainment: float) -> bool:
        """Sustained, with at least ``attainment`` of the window's completions within the SLO."""
        return bool(self.summary["sustained"]) and self.attainment >= attainment


@dataclass(frozen=True, eq=False)
class Candidate:
    """A candidate's capacity search: every evaluation, and the best rate passing (None: none did);
    ``unbounded``: no rate tried failed, so the capacity is only known to be above ``best``'s rate."""

    deployment: Deployment
    evaluations: tuple[Evaluation, ...]
    best: Evaluation | None
    unbounded: bool = False
    conservative: bool = False
    """A rate that failed on the requests passed on the longer run: the runs are too short to bound the
    capacity tightly (more requests may give a higher figure); ``best`` is that longer run."""
    cpu_s: float = 0.0
    """CPU seconds the search took in the process that ran it (``time.process_time``; 0 when not measured)."""

    def limited_by(self, slo: Slo, attainment: float) -> str | None:
        """What stops the capacity from being higher, at the lowest failing rate above it: ``throughput`` (the
        deployment does not sustain the rate), or the SLO limit fewer requests meet (``TTFT``, ``TPOT``), with
        the shares; None when no rate tried failed."""
        floor = self.best.rate_rps if self.best is not None else 0.0
        failed = [e for e in self.evaluations if e.rate_rps > floor and not e.passes(attainment)]
        if not failed:
            return None
        e = min(failed, key=lambda e: (e.rate_rps, e.confirmation))
        at = f"at {e.rate_rps:.4g} req/s"
        if not e.summary["sustained"]:
            return f"throughput (not sustained {at})"
        ttft = e.table.column("ttft_s").to_numpy(zero_copy_only=False)
        tpot = e.table.column("tpot_s").to_numpy(zero_copy_only=False)
        shares = {name: float(np.mean(Slo(**{f"{name.lower()}_s": limit}).met(ttft, tpot)))
                  for name, limit in (("TTFT", slo.ttft_s), ("TPOT", slo.tpot_s)) if limit is not None}
        name = min(shares, key=lambda k: shares[k])
        met = ", ".join(f"{k} {100 * v:.0f} %" for k, v in shares.items())
        return f"{name} ({met} of requests met {at})"

    @property
    def goodput_per_gpu_rps(self) -> float:
        return float(self.best.summary["goodput_per_gpu_rps"] or 0.0) if self.best is not None else 0.0


@dataclass(frozen=True, eq=False)
class SearchResult:
    """Candidates best first (goodput per GPU), the combinations left out, how the step costs were filled."""

    search_id: str
    candidates: tuple[Candidate, ...]
    skipped: tuple[str, ...]
    fill: FillReport
    elapsed_s: float
    settings: dict[str, Any] = field(default_factory=dict)

    def records(self) -> list[tuple[dict[str, Any], pa.Table | None]]:
        """One serving record per evaluation (``ServeResult.record``'s keys), with the per-request table of
        each candidate's best rate; a record's ``serve_id`` hashes the search and the candidate's rate."""
        out: list[tuple[dict[str, Any], pa.Table | None]] = []
        for c in self.candidates:
            for e in c.evaluations:
                key = json.dumps([self.search_id, c.deployment.as_dict(), e.rate_rps]
                                 + ([CONFIRM_REPEATS] if e.confirmation else []), sort_keys=True, default=repr)
                record = {"serve_id": hashlib.sha256(key.encode()).hexdigest(), **c.deployment.as_dict(),
                          "gpus": c.deployment.num_gpus, "requests_source": self.settings.get("requests_source"),
                          "scheduler": self.settings.get("scheduler"), "kv_backend": self.settings.get("kv_backend"),
                          **e.summary, "confirmation": e.confirmation, "capacity": e is c.best,
                          "capacity_conservative": e is c.best and c.conservative, "capacity_unbounded": e is c.best and c.unbounded,
                          "version": __version__}
                out.append((record, e.table if e is c.best else None))
        return out


def search_id(space: SearchSpace, base: Requests, config: SchedulerConfig, slo: Slo, attainment: float,
              kv_backend: str, confirm: Requests | None = None) -> str:
    data = {"space": asdict(space), "requests": base.fingerprint(), "scheduler": config.key(), "slo": asdict(slo),
            "attainment": attainment, "kv_backend": kv_backend, "version": __version__}
    if confirm is not None:
        data["confirm"] = confirm.fingerprint()
    return hashlib.sha256(json.dumps(data, sort_keys=True, default=repr).encode()).hexdigest()


def rough_capacity_rps(deployment: Deployment, base: Requests, config: SchedulerConfig,
                       costs: dict[ReplicaKind, StepCosts]) -> float:
    """A first guess of a deployment's capacity, where the rate search starts: each replica's requests per
    second with full steps (a full token budget of prefill, ``max_seqs`` decoding sequences) and no waiting."""
    prompt, out = float(base.prompt_tokens.mean()), float(base.output_tokens.mean())
    context = prompt + out / 2
    sides = dict.fromkeys(ROLES, 0.0)
    for rep in deployment.replicas():
        c = costs[rep.kind]
        seconds = 0.0
        if rep.role != DECODE:
            seconds += prompt * c.interpolated("prefill", config.token_budget, 0) / config.token_budget
        if rep.role != PREFILL:
            steps = out / config.decode_tokens_per_step  # fewer steps with multi-token prediction
            seconds += steps * c.interpolated("decode", config.max_seqs, int(context)) / config.max_seqs
        sides[rep.role] += 1.0 / seconds
    return sides[BOTH] if deployment.disaggregate is None else min(sides[PREFILL], sides[DECODE])


def capacity(deployment: Deployment, base: Requests, config: SchedulerConfig, slo: Slo,
             costs: dict[ReplicaKind, StepCosts],
             attainment: float, start_rps: float | None, iterations: int, kv_backend: str,
             longer: Requests | None = None) -> Candidate:
    """The highest rate (module docstring) at which ``attainment`` of ``base``'s requests meet ``slo``, from
    ``start_rps`` (None: half of ``rough_capacity_rps``), confirmed on ``longer`` (None: ``base`` repeated)."""
    evaluations: list[Evaluation] = []
    longer = longer if longer is not None else base.repeated(CONFIRM_REPEATS)

    def run(rate: float, requests: Requests = base) -> Evaluation:
        own = requests.offered_rate_rps if math.isfinite(requests.offered_rate_rps) else 1.0
        table, summary = evaluate(deployment, requests.scaled(rate / own), config, slo, costs, kv_backend, rate)
        ev = Evaluation(rate, summary, table, requests is longer)
        evaluations.append(ev)
        return ev

    ok: Evaluation | None = None
    bad: Evaluation | None = None
    start = start_rps if start_rps is not None else rough_capacity_rps(deployment, base, config, costs) / 2
    ev = run(start)
    doublings = halvings = 0
    while True:
        if ev.passes(attainment):
            ok = ev
            if bad is not None or doublings == MAX_DOUBLINGS:
                break
            doublings += 1
            ev = run(ev.rate_rps * 2)
        else:
            bad = ev
            if ok is not None or halvings == MAX_HALVINGS:
                break
            halvings += 1
            ev = run(ev.rate_rps / 2)
    if ok is not None and bad is not None:
        for _ in range(iterations):
            ev = run(math.sqrt(ok.rate_rps * bad.rate_rps))
            if ev.passes(attainment):
                ok = ev
            else:
                bad = ev
    rate = ok.rate_rps if ok is not None and CONFIRM_REPEATS > 1 else None
    unconfirmed: Evaluation | None = None
    while rate is not None:
        ev = run(rate, longer)
        if ev.passes(attainment):
            ok = ev
            break
        bad = unconfirmed = ev
        rate *= CONFIRM_BACKOFF
        if rate < start / 2 ** MAX_HALVINGS:
            ok = rate = None
    if ok is not None and unconfirmed is not None:
        for _ in range(CONFIRM_BISECTIONS):  # narrow the backoff's bracket on the longer run
            ev = run(math.sqrt(ok.rate_rps * unconfirmed.rate_rps), longer)
            if ev.passes(attainment):
                ok = ev
            else:
                unconfirmed = ev
    conservative = False
    if ok is not None and not any(e.confirmation and not e.passes(attainment) for e in evaluations):
        # confirmed at once: did the failure just above come from the runs' length rather than the rate?
        above = [e.rate_rps for e in evaluations if not e.confirmation and e.rate_rps > ok.rate_rps
                 and not e.passes(attainment)]
        if above:
            ev = run(min(above), longer)
            if ev.passes(attainment):
                ok, conservative = ev, True
    return Candidate(deployment, tuple(evaluations), ok, unbounded=ok is not None and bad is None,
                     conservative=conservative)


Progress = Callable[[str], None]


def replay_workers(executor: Executor) -> int:
    """Processes replaying candidates at once: the local executor's workers (None: one per CPU); one (this
    process) for a cluster executor, whose workers simulate steps."""
    if executor.name != "local":
        return 1
    return executor.workers or os.cpu_count() or 1


@dataclass(frozen=True, eq=False)
class _CapacityTask:
    """Every candidate's capacity search (``capacity``) on the same warm step costs: in this process, or spread
    over worker processes (spawned, each receiving the costs and requests once), the costliest candidates first
    (disaggregated, then more servers: KV transfers and more replicas lengthen a replay). Each search is the
    same computation wherever it runs, so the results do not depend on the workers."""

    candidates: list[Deployment]
    base: Requests
    config: SchedulerConfig
    slo: Slo
    costs: dict[ReplicaKind, StepCosts]
    attainment: float
    start_rps: float | None
    iterations: int
    kv_backend: str
    longer: Requests

    def one(self, i: int) -> Candidate:
        cpu0 = time.process_time()
        found = capacity(self.candidates[i], self.base, self.config, self.slo, self.costs, self.attainment,
                         self.start_rps, self.iterations, self.kv_backend, self.longer)
        return replace(found, cpu_s=time.process_time() - cpu0)

    def run(self, workers: int) -> Iterator[tuple[int, Candidate]]:
        """Each candidate's index and search, as each finishes."""
        n = len(self.candidates)
        if workers <= 1 or n <= 1:
            yield from ((i, self.one(i)) for i in range(n))
            return
        refuse_when_importing_main()  # a script without a main guard, imported again by a spawned worker
        order = sorted(range(n), key=lambda i: (self.candidates[i].disaggregate is None,
                                                -self.candidates[i].num_gpus, i))
        pool = ProcessPoolExecutor(min(workers, n), mp_context=multiprocessing.get_context("spawn"),
                                   initializer=_hold_task, initargs=(self,))
        try:
            futures = {pool.submit(_capacity_of, i): i for i in order}
            for future in as_completed(futures):
                try:
                    yield futures[future], future.result()
                except BrokenProcessPool:
                    raise MoesimError("serve search: a worker process replaying candidates died (killed or out of "
                                      "memory; or a script calling moesim.serve_search without an `if __name__ == "
                                      "\"__main__\":` guard: workers are spawned and import it again); --workers 1 "
                                      "replays in this process") from None
        finally:
            pool.shutdown(wait=True, cancel_futures=True)


_TASK: _CapacityTask | None = None
"""A worker process's ``_CapacityTask`` (set once by the pool's initializer)."""


def _hold_task(task: _CapacityTask) -> None:
    global _TASK
    _TASK = task


def _capacity_of(i: int) -> Candidate:
    assert _TASK is not None
    return _TASK.one(i)


def search(space: SearchSpace, base: Requests, config: SchedulerConfig, slo: Slo, *, attainment: float = 0.9,
           start_rps: float | None = None, iterations: int = 6, cache: StepCache | None = None,
           executor: Executor = Executor(workers=None), kv_backend: str = "flow",
           progress: Progress | None = None, confirm: Requests | None = None) -> SearchResult:
    """Fill every candidate's step costs on ``executor``, then find each one's capacity (module docstring);
    ``confirm``: the longer run confirming a capacity (None: ``base`` repeated CONFIRM_REPEATS times)."""
    if not slo.given:
        raise MoesimError("serve search: give an SLO (--slo-ttft and/or --slo-tpot): goodput counts the requests "
                          "that meet it")
    if not 0 < attainment <= 1:
        raise MoesimError(f"--attainment: must be in (0, 1], got {attainment}")
    if start_rps is not None and not 0 < start_rps < math.inf:
        raise input_error("--rate", "rate", f"the first rate tried must be a finite number of requests per second "
                          f"> 0, got {start_rps!r}")
    check_kv_backend(kv_backend)
    t0 = time.monotonic()
    for s in space.strategies:
        ParallelLayout.parse(s)
    candidates, skipped = space.candidates()
    longer = confirm if confirm is not None else base.repeated(CONFIRM_REPEATS)
    kind_grids: dict[ReplicaKind, Grid] = {}
    for d in candidates:
        for kind, g in grids(d, [base, longer], config).items():
            kind_grids[kind] = kind_grids[kind].union(g) if kind in kind_grids else g
    say = progress or (lambda _line: None)
    say(f"serve search: {len(candidates)} candidates, {len(kind_grids)} replica kinds to cost")
    costs, report = step_costs(kind_grids, cache or StepCache(), executor, progress_lines(say))
    found: dict[int, Candidate] = {}
    task = _CapacityTask(candidates, base, config, slo, costs, attainment, start_rps, iterations, kv_backend, longer)
    for i, c in task.run(replay_workers(executor)):
        found[i] = c
        d = c.deployment
        say(f"{d.label()}: {c.goodput_per_gpu_rps:.4g} goodput/s per GPU "
            f"({len(c.evaluations)} rates tried{'; no upper bound found' if c.unbounded else ''}"
            f"{'; runs too short to bound it' if c.conservative else ''})")
    results = [found[i] for i in range(len(candidates))]  # candidate order, then ranked (a stable sort)
    results.sort(key=lambda c: (-c.goodput_per_gpu_rps, c.deployment.num_gpus, c.deployment.label()))
    settings = {"attainment": attainment, "start_rps": start_rps, "iterations": iterations, "kv_backend": kv_backend,
                "requests": len(base), "requests_source": base.source, "scheduler": config.key(), "slo": asdict(slo)}
    return SearchResult(search_id(space, base, config, slo, attainment, kv_backend, confirm), tuple(results),
                        tuple(skipped),
                        report, time.monotonic() - t0, settings)
