"""Search rank → GPU mappings for the fastest run of one configuration (``moesim place``).

The search is a randomised local search from the named placement rules: each round proposes mappings one
or two rank swaps away from the best few found so far, skips those equivalent to a mapping already seen
under the topology's symmetries (``moesim.topology.symmetry``), prunes those whose traffic-balance bound
(``moesim.system.traffic``) cannot beat the best simulated communication time, and simulates the rest in
parallel on a fast backend. The best few are then simulated again on a second backend (``rescore``) before
the report. The same inputs and seed give the same search.
"""

from __future__ import annotations

import contextlib
import dataclasses
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from moesim.errors import MoesimError
from moesim.experiments.executors import EXECUTORS
from moesim.experiments.inputs import plan_runs, work_units
from moesim.network import BACKENDS
from moesim.schema import MAX_COUNT, MAX_DURATION_S, check_fields, default_of, param
from moesim.system.run import PreparedRun, prepare, simulate_run
from moesim.system.spec import RunResult, RunSpec
from moesim.system.traffic import Traffic, TrafficModel
from moesim.topology.placement import PLACEMENT_RULES
from moesim.topology.symmetry import Symmetry

Mapping = tuple[int, ...]


@dataclass(frozen=True)
class SearchSpec:
    """What to search: ``run`` (its backend scores candidates; its own ``placement`` is ignored) and budgets."""

    run: RunSpec
    evaluations: int = param(64, low=1, high=MAX_COUNT)
    """At most this many simulations on the search backend (the named rules included)."""
    time_s: float | None = param(None, low=0, low_open=True, high=MAX_DURATION_S)
    """Stop proposing after this many seconds of wall time (None: no limit)."""
    seed: int = param(0, low=0, high=2**32 - 1)
    rescore_backend: str | None = default_of(RunSpec, "backend")
    """Backend that re-scores the best few before the report (None: no re-scoring); default: a run's."""
    rescore_top: int = param(3, low=1, high=MAX_COUNT)
    batch: int = param(8, low=1, high=MAX_COUNT)
    """Candidates simulated per round (in parallel on the executor)."""

    def __post_init__(self) -> None:
        check_fields(self, "placement search")
        if self.rescore_backend is not None and self.rescore_backend not in BACKENDS:
            raise MoesimError(f"placement search: field 'rescore': unknown backend '{self.rescore_backend}' "
                              f"(allowed: {', '.join(BACKENDS.names())}, none)")


@dataclass(frozen=True)
class Scored:
    """A mapping with its balance bound and, once simulated, its result on the search backend."""

    rank_to_gpu: Mapping
    origin: str
    """A rule name, or ``search`` for a mapping found by swaps."""
    bound_s: float
    result: RunResult | None = None

    @property
    def wall_s(self) -> float:
        return self.result.wall_s if self.result is not None else float("inf")

    @property
    def inline(self) -> str:
        """The mapping as ``moesim run --placement`` takes it."""
        return ",".join(map(str, self.rank_to_gpu))


@dataclass(frozen=True)
class SearchResult:
    """The default mapping against the best found, what the search did, and the re-scored best few."""

    default: Scored
    best: Scored
    evaluated: int
    skipped_symmetric: int
    pruned: int
    exhausted: bool
    """True when a round found no new mapping to try (every proposal was seen or pruned)."""
    rescored: tuple[tuple[Scored, RunResult], ...]
    """The best few and the default, simulated on the re-scoring backend, fastest first."""
    traffic_default: Traffic
    traffic_best: Traffic
    symmetry_classes: tuple[int, int]
    elapsed_s: float

    @property
    def gain(self) -> float:
        """Relative wall-time gain of the best mapping over the default on the search backend (≥ 0)."""
        return 1.0 - self.best.wall_s / self.default.wall_s

    @property
    def rescored_gain(self) -> float | None:
        """The same gain on the re-scoring backend: its fastest re-scored mapping against the default."""
        if not self.rescored:
            return None
        default = next(r for s, r in self.rescored if s.rank_to_gpu == self.default.rank_to_gpu)
        return 1.0 - self.rescored[0][1].wall_s / default.wall_s


Progress = Callable[[int, int, float], None]
"""Called after each round: (evaluations done, budget, best wall s)."""


class _Evaluator:
    """Simulates batches of mappings: in this process for one worker, else on an executor."""

    def __init__(self, executor: str, workers: int | None, address: str | None) -> None:
        self.inline = executor == "local" and workers == 1 and address is None
        self.exe = None if self.inline else EXECUTORS.get(executor)(workers, address, 1)

    def __enter__(self) -> _Evaluator:
        if self.exe is not None:
            self.exe.connect()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.exe is not None:
            self.exe.close()

    def run(self, specs: Sequence[RunSpec]) -> list[RunResult]:
        if self.exe is None:
            return [simulate_run(s) for s in specs]
        planned = plan_runs(specs, source="placement search")
        by_id: dict[str, RunResult] = {}
        with contextlib.closing(self.exe.execute(work_units(planned))) as outcomes:
            for outcome in outcomes:
                if outcome.result is None:
                    raise MoesimError(f"placement search: a candidate failed: {(outcome.error or '').splitlines()[0]}")
                by_id[outcome.run_id] = outcome.result
        return [by_id[p.run_id] for p in planned]


def _with_placement(spec: RunSpec, mapping: Mapping, backend: str | None = None) -> RunSpec:
    over = dict(spec.overrides)
    over["placement"] = ",".join(map(str, mapping))
    return dataclasses.replace(spec, backend=backend or spec.backend, overrides=tuple(sorted(over.items())))


def search_placement(search: SearchSpec, executor: str = "local", workers: int | None = None,
                     address: str | None = None, progress: Progress | None = None) -> SearchResult:
    """Run the search of the module docstring."""
    t0 = time.monotonic()
    base = dataclasses.replace(search.run, overrides=tuple(kv for kv in search.run.overrides if kv[0] != "placement"))
    prepared: PreparedRun = prepare(base)
    topology, layout = prepared.topology, prepared.layout
    workload = prepared.workload()
    symmetry = Symmetry.of(topology)
    rng = random.Random(search.seed)

    traffic = TrafficModel(workload, topology)

    def scored(mapping: Mapping, origin: str) -> Scored:
        return Scored(mapping, origin, traffic.traffic(mapping).bound_s())

    seen: set[object] = set()
    pending: list[Scored] = []
    for entry in PLACEMENT_RULES:
        mapping = entry.obj(topology, *layout.grid)
        key = symmetry.canonical_key(mapping)
        if key not in seen:
            seen.add(key)
            pending.append(scored(mapping, entry.name))
    done: list[Scored] = []
    skipped = pruned = 0
    exhausted = False
    with _Evaluator(executor, workers, address) as evaluator:
        while pending and len(done) < search.evaluations:
            batch = pending[: search.evaluations - len(done)]
            results = evaluator.run([_with_placement(base, s.rank_to_gpu) for s in batch])
            done += [dataclasses.replace(s, result=r) for s, r in zip(batch, results, strict=True)]
            done.sort(key=lambda s: (s.wall_s, s.rank_to_gpu))
            if progress is not None:
                progress(len(done), search.evaluations, done[0].wall_s)
            if search.time_s is not None and time.monotonic() - t0 > search.time_s:
                break
            pending, s_skip, s_prune, exhausted = _propose(done, seen, symmetry, rng, search.batch, scored)
            skipped += s_skip
            pruned += s_prune
        default = next(s for s in done if s.origin == "contiguous")
        rescored: list[tuple[Scored, RunResult]] = []
        if search.rescore_backend is not None:
            top = done[: search.rescore_top]
            top += [default] if default not in top else []
            again = evaluator.run([_with_placement(base, s.rank_to_gpu, search.rescore_backend) for s in top])
            rescored = sorted(zip(top, again, strict=True), key=lambda p: (p[1].wall_s, p[0].rank_to_gpu))
    best = done[0]
    return SearchResult(
        default=default, best=best, evaluated=len(done), skipped_symmetric=skipped, pruned=pruned,
        exhausted=exhausted, rescored=tuple(rescored),
        traffic_default=traffic.traffic(default.rank_to_gpu), traffic_best=traffic.traffic(best.rank_to_gpu),
        symmetry_classes=symmetry.count_classes(), elapsed_s=time.monotonic() - t0)


MAX_PROPOSALS_PER_CANDIDATE = 50
"""Proposals drawn per wanted candidate before a round gives up (the distinct neighbours are exhausted)."""


def _propose(done: list[Scored], seen: set[object], symmetry: Symmetry, rng: random.Random, want: int,
             scored: Callable[[Mapping, str], Scored]) -> tuple[list[Scored], int, int, bool]:
    """Up to ``want`` new mappings one or two swaps from the best few, best balance bound first:
    (candidates, skipped as symmetric, pruned by the bound, exhausted)."""
    parents = done[: max(1, min(4, len(done)))]
    best_comm_s = min(s.result.comm_s for s in done if s.result is not None)
    out: list[Scored] = []
    skipped = pruned = 0
    n = len(parents[0].rank_to_gpu)
    for _ in range(want * MAX_PROPOSALS_PER_CANDIDATE):
        if len(out) >= want:
            break
        mapping = list(rng.choice(parents).rank_to_gpu)
        for _swap in range(rng.choice((1, 1, 2))):
            a, b = rng.sample(range(n), 2)
            mapping[a], mapping[b] = mapping[b], mapping[a]
        key = symmetry.canonical_key(tuple(mapping))
        if key in seen:
            skipped += 1
            continue
        seen.add(key)
        candidate = scored(tuple(mapping), "search")
        if candidate.bound_s >= best_comm_s:
            pruned += 1
            continue
        out.append(candidate)
    out.sort(key=lambda s: (s.bound_s, s.rank_to_gpu))
    return out, skipped, pruned, not out
