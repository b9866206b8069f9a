"""``moesim refine DIR``: rerun on a more exact backend exactly the runs that would settle the orderings the
error bands leave unresolved (``moesim.analysis.confidence``), into the same store.

The new rows are stored next to the old ones (a run's key includes its backend); from then on the report and
``moesim compare`` use, per configuration, the most exact backend stored. A run's cost is estimated from the
packets it moves and the cost of a packet measured on this machine (``moesim.analysis.refine_cost``); runs
with equal inputs are simulated once and counted once. When the budget settles no ordering, the plan names the
smallest budget that settles the cheapest one.

Stored rows first: a run whose input hash a stored packet reference holds (``moesim.analysis.refine_reuse``)
is copied from it, and the orderings are judged again with those rows before anything is planned.

Order (the most orderings per estimated second first): an ordering is settled only when all its runs are on
the target backend, so whole orderings are taken, greedily as a weighted set cover (``choose``): each step
takes the ordering whose runs not yet chosen cost least per ordering they complete, counting a run shared by
several orderings once; an ordering that does not fit in what is left of the budget is skipped and the next
one tried. The runs are executed in that order, so an interrupted refine has settled the orderings that
came cheapest. They go in rounds of one, two, four, ... runs per worker; after each round the plan is
made again with the measured costs, so a budget the estimate misjudged stops the refine early (the rounds
double, so there are few of them). When the chosen runs are done, the orderings are judged again (packet
rows move the means) and the runs that settle newly unresolved ones are added while the budget lasts. The
refine's command line enters the store's provenance once it stored a row. The runner makes it resumable:
kill it and rerun the same command, and only the missing runs are simulated.
"""

from __future__ import annotations

import math
import os
import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pyarrow as pa

from moesim.analysis.bands import ErrorBands, load_bands, row_spec
from moesim.analysis.confidence import Ordering, most_exact, orderings, unresolved
from moesim.analysis.refine_cost import CostModel, cost_model, family, simulated_share, work
from moesim.analysis.refine_reuse import NONE, StoredRows, adopt, store_row
from moesim.analysis.results import MODEL, as_table, load_results
from moesim.analysis.study import analyse
from moesim.errors import MoesimError
from moesim.experiments.inputs import input_hash
from moesim.system.ensemble import members
from moesim.system.spec import RunSpec


def parse_budget(text: str) -> float | None:
    """``30m``, ``2h``, ``1h30m``, ``90s`` or ``90`` (seconds) → seconds; ``none`` → no limit."""
    t = text.strip().lower()
    if t == "none":
        return None
    m = re.fullmatch(r"(?:(\d+(?:\.\d+)?)h)?(?:(\d+(?:\.\d+)?)m)?(?:(\d+(?:\.\d+)?)s?)?", t)
    if not t or m is None:
        raise MoesimError(f"--budget: '{text}' is not a duration (allowed: e.g. 90s, 30m, 2h, 1h30m, or none)")
    return sum(float(v) * unit for v, unit in zip(m.groups(), (3600.0, 60.0, 1.0), strict=True) if v)


def parallelism(executor: str, workers: int | None) -> int:
    """How many runs execute at once, for the budget's estimate: ``workers``, else one per CPU locally."""
    return workers or ((os.cpu_count() or 1) if executor == "local" else 1)


def check_options(backend: str | None, executor: str, progress: str) -> None:
    """One-line errors for a bad ``--backend``, ``--executor`` or ``--progress``, before any work."""
    from moesim.experiments.executors import EXECUTORS
    from moesim.experiments.progress import PROGRESS
    from moesim.network.base import BACKENDS

    for option, value, registry, extra in (("--backend", backend, BACKENDS, ()), ("--executor", executor, EXECUTORS, ()),
                                           ("--progress", progress, PROGRESS, ("auto",))):
        if value is not None and value not in registry and value not in extra:
            raise MoesimError(f"{option}: unknown {registry.kind} '{value}' (allowed: "
                              f"{', '.join([*extra, *registry.names()])})")


@dataclass(frozen=True)
class Candidate:
    """One run to redo on the target backend: its spec, simulation key and estimated cost (seconds)."""

    spec: RunSpec
    key: str
    cost_s: float
    group: str = ""
    """The simulation key of the run as specified: its ensemble members share it and run in the same round."""


@dataclass(frozen=True)
class Plan:
    """The runs a refine executes (in order), the orderings they settle and what the budget left out."""

    runs: tuple[Candidate, ...]
    unresolved: int
    settled: int
    estimated_s: float
    """Estimated simulation time of ``runs`` (runs with equal inputs counted once), summed over workers."""
    cheapest_s: float | None = None
    """Estimated simulation time of the cheapest ordering left out (None: none left out, or none can move)."""
    cost_source: str = ""
    """Where the cost estimate's figures come from (``CostModel.source``)."""
    reused: tuple[tuple[RunSpec, str, Mapping[str, Any]], ...] = ()
    """Runs taken from stored references (spec, simulation key, stored row): no simulation."""
    open_after_reuse: int | None = None
    """Orderings unresolved once ``reused`` is stored (None: as ``unresolved``)."""
    reuse_source: Mapping[str, str] = field(default_factory=dict)
    """The file each reused key comes from."""

    @property
    def still_open(self) -> int:
        """Orderings unresolved once the reused rows are stored, before any run."""
        return self.unresolved if self.open_after_reuse is None else self.open_after_reuse

    def lines(self, backend: str, parallel: int) -> list[str]:
        left = self.unresolved - self.settled
        workers = f"{parallel} worker{'s' if parallel > 1 else ''}"
        line = f"{self.unresolved} orderings unresolved at this fidelity; "
        if self.reused:
            files = ", ".join(sorted(set(self.reuse_source.values())))
            line += (f"{len(self.reused)} {backend} rows of stored references with the same inputs ({files}) "
                     f"leave {self.open_after_reuse}; ")
        line += (f"{len(self.runs)} {backend} runs settle {self.settled} of them (estimated "
                 f"{_duration(self.estimated_s / parallel)} on {workers}"
                 + (f", {self.cost_source})" if self.cost_source else ")"))
        if left:
            line += f"; {left} left: over the budget, or no run of them can move to {backend}"
        out = [line]
        if self.cheapest_s is not None:
            need = self.cheapest_s / parallel
            if self.runs:
                out.append(f"--budget {budget_text(need)} would also settle the cheapest ordering left out "
                           f"(about {_duration(need)} on {workers} in all)")
            else:
                out.append(f"the cheapest unresolved ordering needs about {_duration(need)} on {workers}: "
                           f"settle it with --budget {budget_text(need)}")
        return out


def _duration(s: float) -> str:
    return f"{s:.0f} s" if s < 120 else f"{s / 60:.1f} min" if s < 7200 else f"{s / 3600:.1f} h"


HINT_MARGIN = 1.1
"""A suggested budget is the estimate plus 10 %, so that the next plan (made with fresh measurements) fits it."""


def budget_text(seconds: float) -> str:
    """A round ``--budget`` at least HINT_MARGIN × ``seconds``: whole seconds below 2 min, else whole minutes."""
    s = seconds * HINT_MARGIN
    return f"{math.ceil(s)}s" if s < 120 else f"{math.ceil(s / 60)}m"


class _Costs:
    """Each candidate's estimated cost on ``target`` (the cost model of ``refine_cost``), computed once per run."""

    def __init__(self, target: str, model: CostModel) -> None:
        self.target, self.model = target, model
        self._seen: dict[str, float] = {}

    def __call__(self, spec: RunSpec, key: str, row: dict[str, Any]) -> float:
        if key not in self._seen:
            try:
                w, fam = work(spec), family(spec)
            except MoesimError:  # not runnable any more: costs nothing to plan, fails visibly when run
                self._seen[key] = 0.0
            else:
                self._seen[key] = self.model.estimate_s(fam, w, simulated_share(row, w.layers))
        return self._seen[key]


def _candidates(o: Ordering, rows: dict[tuple[str, ...], list[dict[str, Any]]], keys: tuple[str, ...],
                target: str, bands: ErrorBands, costs: _Costs, ensemble: int = 0) -> list[Candidate]:
    """The runs of ``o``'s settling configurations that are not yet on ``target`` or a more exact backend, each
    with its ensemble members 1..``ensemble``−1 (``moesim.system.ensemble``) when ``ensemble`` ≥ 2. A member is
    estimated at its run's cost."""
    out = []
    for config in o.settle:
        for r in rows.get(tuple(config.get(k, "") for k in keys), []):
            if bands.exactness(str(r["backend"])) <= bands.exactness(target):
                continue
            spec = replace(row_spec(r), backend=target)
            key = input_hash(spec)
            cost = costs(spec, key, r)
            out += [Candidate(m, input_hash(m), cost, key) for m in (members(spec, ensemble) if ensemble else [spec])]
    return out


def choose(todo: Mapping[str, Sequence[Candidate]], limit_s: float | None
           ) -> tuple[tuple[Candidate, ...], float, int, float | None]:
    """Greedy weighted set cover: the runs to take, in order, for the orderings ``todo`` (name → the runs that
    settle it) within ``limit_s`` estimated seconds (None: no limit). Each step takes the runs of the ordering
    whose runs not yet chosen cost least per ordering they complete (itself and every other ordering whose runs
    are then all chosen; a run shared by several orderings is paid once); ties go to the cheaper, then to the
    first name. An ordering that does not fit in what is left is passed over and the next one tried. Returns
    the runs (each once, each with its ensemble members), their estimated seconds, the orderings they settle,
    and the estimate with the cheapest ordering left out also taken (None: none left out)."""
    runs: dict[str, dict[str, float]] = {}  # per ordering, the cost of each of its simulations
    specs: dict[str, dict[str, Candidate]] = {}  # per simulation, every run of it (by spec) any ordering names
    for name, v in todo.items():
        for c in v:
            runs.setdefault(name, {})[c.key] = c.cost_s
            specs.setdefault(c.key, {}).setdefault(c.spec.key(), c)
    left = {name: set(v) for name, v in runs.items()}  # each open ordering's simulations not yet chosen
    pickable = set(runs)
    chosen: dict[tuple[str, str], Candidate] = {}
    spent, settled = 0.0, 0

    def value(name: str) -> tuple[float, float, str]:
        new = left[name]
        cost = sum(runs[name][k] for k in new)
        done = sum(1 for rest in left.values() if len(rest) <= len(new) and rest <= new)
        return cost / done, cost, name

    while pickable:
        _, cost, name = min(value(n) for n in pickable)
        if limit_s is not None and spent + cost > limit_s:
            pickable.discard(name)
            continue
        new = set(left[name])
        for key in sorted(new, key=list(runs[name]).index):  # in the order the ordering names them
            chosen.update({(spec, key): c for spec, c in specs[key].items()})
        spent += cost
        for other in list(left):
            left[other] -= new
            if not left[other]:
                settled += 1
                del left[other]
                pickable.discard(other)
    rest = [sum(runs[name][k] for k in keys) for name, keys in left.items()]
    return tuple(chosen.values()), spent, settled, spent + min(rest) if rest else None


def _judged(table: pa.Table, bands: ErrorBands) -> tuple[list[Ordering], dict[tuple[str, ...], list[dict[str, Any]]],
                                                         tuple[str, ...]]:
    """The unresolved orderings of ``table`` (most exact backend per configuration), and its runs by
    configuration (the model and the factors) under the factor names ``keys``."""
    a = analyse(most_exact(table, bands), with_architecture=False)
    open_ = unresolved(orderings(a, bands))
    runs = a.seed_runs if a.seed_runs is not None else a.table
    keys = tuple(c for c in (MODEL, *a.factors) if c in runs.column_names)
    rows: dict[tuple[str, ...], list[dict[str, Any]]] = {}
    for r in runs.to_pylist():
        rows.setdefault(tuple(str(r[k]) for k in keys), []).append(r)
    return open_, rows, keys


def _with_stored(raw: pa.Table, bands: ErrorBands, backend: str, costs: _Costs, stored: StoredRows, ensemble: int
                 ) -> tuple[pa.Table, list[tuple[RunSpec, str, Mapping[str, Any]]]]:
    """``raw`` (the store's rows) with the stored references' rows of the runs that settle its unresolved
    orderings, judged again until no more are found; and those (spec, key, stored row)."""
    taken: dict[tuple[str, str], tuple[RunSpec, str, Mapping[str, Any]]] = {}  # by spec and simulation key
    table = as_table(raw)
    while stored.rows:
        open_, rows, keys = _judged(table, bands)
        new = {(c.spec.key(), c.key): (c.spec, c.key, row) for o in open_
               for c in _candidates(o, rows, keys, backend, bands, costs, ensemble)
               if (c.spec.key(), c.key) not in taken and (row := stored.get(c.key)) is not None}
        if not new:
            break
        taken.update(new)
        extra = pa.Table.from_pylist([store_row(s, k, r, raw.column_names) for s, k, r in taken.values()],
                                     schema=raw.schema)
        table = as_table(pa.concat_tables([raw, extra]))
    return table, list(taken.values())


def plan(directory: str | Path, backend: str, budget_s: float | None, parallel: int, bands: ErrorBands,
         skip: frozenset[str] = frozenset(), model: CostModel | None = None,
         announce: Callable[[str], object] | None = None, ensemble: int = 0, stored: StoredRows = NONE) -> Plan:
    """Which runs of the store in ``directory`` to redo on ``backend`` (module docstring: the order), leaving
    out the simulation keys in ``skip`` (runs this refine already tried). ``model`` (default: measured from
    the store's rows on ``backend``, else calibrated on this machine) estimates each run's cost. With
    ``ensemble`` ≥ 2 every run comes with its ensemble members (``--ensemble K``). A run whose key ``stored``
    holds is taken from it (``Plan.reused``), and the orderings are judged with those rows before the rest
    is planned."""
    raw = load_results(directory, include_failed=True)
    every = as_table(raw)
    first = unresolved_count = len(_judged(every, bands)[0])
    if model is None and first:
        model = cost_model(backend, [*every.to_pylist(), *stored.rows.values()], announce,
                           "this store and the stored references" if stored.rows else "this store")
    costs = _Costs(backend, model or CostModel(0.0, 0.0, ""))
    every, reused = _with_stored(raw, bands, backend, costs, stored, ensemble) if first else (every, [])
    open_, rows, keys = _judged(every, bands)
    todo = {o.statistic: [c for c in _candidates(o, rows, keys, backend, bands, costs, ensemble) if c.key not in skip]
            for o in open_}
    todo = {k: v for k, v in todo.items() if v}
    ordered, spent, settled, cheapest = choose(todo, None if budget_s is None else budget_s * parallel)
    return Plan(ordered, unresolved_count, unresolved_count - len(open_) + settled, spent, cheapest, model.source if model else "",
                tuple(reused), len(open_), {k: stored.source[k] for _, k, _ in reused})


@dataclass(frozen=True)
class RefineSummary:
    """Runs simulated, the failed ones (label, error), and the orderings still unresolved at the end."""

    ran: int
    failures: tuple[tuple[str, str], ...]
    remaining: int


def refine(directory: str | Path, backend: str | None = None, budget_s: float | None = 1800.0,
           executor: str = "local", workers: int | None = None, address: str | None = None,
           progress: str = "auto", command: str | None = None, bands: ErrorBands | None = None,
           announce: Callable[[str], object] | None = None, ensemble: int = 0,
           stored: StoredRows = NONE) -> RefineSummary:
    """Rerun on ``backend`` (default: the bands' reference, packet) the runs that settle the unresolved
    orderings of the store in ``directory``, within ``budget_s`` of estimated wall time; rounds repeat while
    new orderings turn unresolved and budget is left. ``announce`` (a callable) receives progress lines. With
    ``ensemble`` ≥ 2 each run is joined by its ensemble members 1..ensemble−1, in the same round. Runs whose
    key ``stored`` holds are copied from it (``moesim.analysis.refine_reuse``), not simulated."""
    from moesim.experiments.runner import command_line, run_sweep
    from moesim.network.base import BACKENDS

    bands = bands or load_bands()
    target = backend or bands.reference
    BACKENDS.get(target)  # an unknown backend is a one-line error naming the registered ones
    parallel = parallelism(executor, workers)
    say = announce or (lambda line: None)
    t0 = time.monotonic()
    tried: set[str] = set()
    ran = rounds = 0
    failures: list[tuple[str, str]] = []
    while True:
        left = None if budget_s is None else budget_s - (time.monotonic() - t0)
        p = plan(directory, target, left, parallel, bands, frozenset(tried), announce=say, ensemble=ensemble,
                 stored=stored)
        if not tried or p.runs:
            say("\n".join(p.lines(target, parallel)))
        if p.reused:
            n = adopt(directory, p.reused, command or command_line())
            say(f"{n} {target} row{'s' if n != 1 else ''} copied from stored references with the same inputs")
        if not p.runs:
            return RefineSummary(ran, tuple(failures), p.still_open)
        batch = _first(p.runs, parallel * 2 ** rounds)
        rounds += 1
        if len(batch) < len(p.runs):
            say(f"the first {len(batch)} run{'s' if len(batch) > 1 else ''} of them, then planned again with "
                "their measured cost")
        summary = run_sweep([c.spec for c in batch], directory, executor=executor, workers=workers,
                            address=address, progress=progress, source=f"refine on {target}", command=command,
                            command_when="stored")
        for line in summary.lines():
            say(line)
        tried |= {c.key for c in batch}
        ran += summary.ran
        failures += summary.failures


def _first(runs: tuple[Candidate, ...], simulations: int) -> tuple[Candidate, ...]:
    """The runs of the first ``simulations`` simulation keys (runs with equal inputs share one), each with its
    ensemble members."""
    groups = list(dict.fromkeys(c.group or c.key for c in runs))[:simulations]
    return tuple(c for c in runs if (c.group or c.key) in groups)
