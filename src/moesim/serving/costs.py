"""Step costs from the simulator: each grid step of a replica is one moesim run, simulated once and cached.

A replica's step runs ``N`` tokens through the model. The grid holds two kinds of runs
(``moesim.workload``: docs/workload.md):

* ``prefill`` at ``T`` tokens (context 0): one prefill pass of T tokens, T on a ×2 grid from 1 to the
  scheduler's token budget;
* ``decode`` at batch ``B`` and context ``C``: one decode step of B sequences over a C-token cache, B on a
  ×2 grid from 1 to the most sequences a step may hold, C in 0, 1024, 4096, … (×4) up to the longest
  request.

Between grid points costs are interpolated linearly (bilinearly for decode). A decode step's cost is linear
in the total context Σ C_i (attention FLOPs and cache bytes both are), so B sequences of mean context C̄
cost what B sequences of context C̄ cost. A step holding prefill tokens (chunks of prompts, perhaps with
decode tokens: continuous batching) costs

    t = [t_prefill(N) − A(N, N², 0)] + A(N, Σ c_i (c_i + o_i), Σ o_i) + [t_decode(B, C̄) − t_decode(B, 0)]

where ``N`` = prefill tokens + B, chunk i has c_i tokens after o_i already cached, and ``A`` is the
attention time of all layers on the model's own roofline (FLOPs: projections and 2·pairs·heads·(qk + v);
bytes: weights, activations and the cached tokens read). The simulated pass treats its N tokens as one
sequence (N² pairs): the first bracket, the pass without its attention, is nearly linear in N and is what
is interpolated; the second term puts in the attention of the real chunks, and the last bracket the decode
sequences' cache. Vidur (Agrawal et al., MLSys 2024) models a mixed batch the same way: linear layers
over all tokens, attention per sequence.

The cache is a folder of JSON files named by run id (``moesim.experiments.inputs``: the RunSpec and the
hash of everything the simulation reads), written atomically, so a rerun, or another deployment with the
same replica, reuses every step. Missing steps are simulated in this process (``workers=1``) or on an
executor (``local``, ``ray``).
"""

from __future__ import annotations

import bisect
import contextlib
import json
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from moesim.errors import MoesimError
from moesim.experiments.executors import EXECUTORS
from moesim.experiments.inputs import PlannedRun, plan_runs, work_units
from moesim.fileio import atomic_write
from moesim.serving.deployment import ReplicaKind
from moesim.system.run import prepare, simulate_run
from moesim.system.spec import RunSpec
from moesim.workload.costs import attention_shard, roofline_time_s
from moesim.workload.graph import Node, NodeKind

CONTEXT_FIRST = 1024
CONTEXT_RATIO = 4
PHASES = ("prefill", "decode")
MAX_STEP_S = 3600.0
"""A cached step time above this (or not > 0, or not finite) is taken as corrupt and simulated again."""


def batch_axis(limit: int) -> tuple[int, ...]:
    """1, 2, 4, … up to the first power of two ≥ ``limit`` (at least 1, 2)."""
    axis = [1, 2]
    while axis[-1] < limit:
        axis.append(axis[-1] * 2)
    return tuple(axis)


def context_axis(limit: int) -> tuple[int, ...]:
    """0, 1024, 4096, … up to the first point ≥ ``limit`` (at least 0, 1024)."""
    axis = [0, CONTEXT_FIRST]
    while axis[-1] < limit:
        axis.append(axis[-1] * CONTEXT_RATIO)
    return tuple(axis)


@dataclass(frozen=True)
class Grid:
    """The steps a replica's costs are interpolated from: prefill tokens; decode batch × context."""

    prefill_tokens: tuple[int, ...] = ()
    decode_batch: tuple[int, ...] = ()
    decode_context: tuple[int, ...] = ()

    def points(self) -> list[tuple[str, int, int]]:
        """(phase, tokens or batch, context) of every grid step."""
        return ([("prefill", t, 0) for t in self.prefill_tokens]
                + [("decode", b, c) for b in self.decode_batch for c in self.decode_context])

    def union(self, other: Grid) -> Grid:
        """Both grids' steps (each axis the longer of the two)."""
        return Grid(*(max(a, b, key=len) for a, b in zip(
            (self.prefill_tokens, self.decode_batch, self.decode_context),
            (other.prefill_tokens, other.decode_batch, other.decode_context), strict=True)))

    def describe(self) -> dict[str, list[int]]:
        return {"prefill_tokens": list(self.prefill_tokens), "decode_batch": list(self.decode_batch),
                "decode_context": list(self.decode_context)}


def step_spec(kind: ReplicaKind, phase: str, x: int, context: int) -> RunSpec:
    """The run of one step: a prefill pass of ``x`` tokens, or a decode step of batch ``x`` at ``context``."""
    if phase == "prefill":
        return kind.spec(tokens=x)
    return kind.spec(phase="decode", batch=x, context_tokens=context)


def default_cache_dir() -> Path:
    """``$MOESIM_CACHE``, else ``$XDG_CACHE_HOME/moesim/step-costs`` (``~/.cache/moesim/step-costs``)."""
    if os.environ.get("MOESIM_CACHE"):
        return Path(os.environ["MOESIM_CACHE"])
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "moesim" / "step-costs"


class StepCache:
    """Simulated steps on disk: ``<run_id>.json`` holding the run's spec, figures and version."""

    def __init__(self, directory: str | Path | None = None) -> None:
        self.directory = Path(directory) if directory is not None else default_cache_dir()
        if self.directory.exists() and not self.directory.is_dir():
            raise MoesimError(f"{self.directory}: the step-cost cache must be a folder")

    def get(self, run_id: str) -> dict[str, Any] | None:
        """The cached record of a step, or None when missing or unreadable, or when its ``wall_s`` is not a
        step time in (0, MAX_STEP_S] s (a corrupt or hand-edited file: the step is simulated again)."""
        path = self.directory / f"{run_id}.json"
        try:
            record = json.loads(path.read_text())
        except (OSError, ValueError):
            return None
        if not isinstance(record, dict):
            return None
        wall = record.get("wall_s")
        return record if isinstance(wall, float) and 0 < wall <= MAX_STEP_S else None

    def put(self, run_id: str, record: dict[str, Any]) -> None:
        atomic_write(self.directory / f"{run_id}.json", json.dumps(record, sort_keys=True))


@dataclass(frozen=True)
class FillReport:
    """What filling the step costs took: steps planned, found in the cache, simulated now, seconds."""

    steps: int
    cached: int
    simulated: int
    elapsed_s: float


Progress = Callable[[int, int], None]
"""Called after each simulated step: (steps simulated so far, steps to simulate)."""


def fill(specs: Sequence[RunSpec], cache: StepCache, executor: str = "local", workers: int | None = 1,
         address: str | None = None, progress: Progress | None = None) -> tuple[dict[str, float], FillReport]:
    """Every step's wall time by ``RunSpec.key()``, simulating the ones the cache lacks (in this process
    when ``executor`` is local with one worker, else on the executor); a failed step is a one-line error."""
    t0 = time.monotonic()
    planned = plan_runs(list(specs), source="serving step costs")
    walls: dict[str, float] = {}
    todo: dict[str, PlannedRun] = {}
    for p in planned:
        record = cache.get(p.run_id)
        if record is not None:
            walls[p.spec.key()] = record["wall_s"]
        else:
            todo.setdefault(p.run_id, p)

    def keep(p: PlannedRun, wall_s: float, sim_s: float) -> None:
        walls[p.spec.key()] = wall_s
        cache.put(p.run_id, {"run_id": p.run_id, "spec": json.loads(p.spec.key()), "wall_s": wall_s,
                             "sim_wallclock_s": sim_s, "input_hash": p.input_hash})
        if progress is not None:
            progress(len(walls) - (len(planned) - len(todo)), len(todo))

    if todo and executor == "local" and workers == 1 and address is None:
        for p in todo.values():
            result = simulate_run(p.spec)
            keep(p, result.wall_s, result.sim_wallclock_s)
    elif todo:
        exe = EXECUTORS.get(executor)(workers, address, 1)
        with contextlib.closing(exe.connect()), contextlib.closing(exe.execute(work_units(list(todo.values()),
                                                                                           "none"))) as outcomes:
            for outcome in outcomes:
                if outcome.result is None:
                    raise MoesimError(f"serving step costs: step {outcome.spec.key()} failed: "
                                      f"{(outcome.error or '').splitlines()[0]}")
                keep(todo[outcome.run_id], outcome.result.wall_s, outcome.result.sim_wallclock_s)
    return walls, FillReport(len(planned), len(planned) - len(todo), len(todo), time.monotonic() - t0)


def _interp(xs: Sequence[float], ys: Sequence[float], x: float) -> tuple[float, int]:
    """Linear interpolation (extrapolation past the ends) and the index of the cell used."""
    i = min(max(bisect.bisect_right(xs, x) - 1, 0), len(xs) - 2)
    x0, x1 = xs[i], xs[i + 1]
    return ys[i] + (ys[i + 1] - ys[i]) * (x - x0) / (x1 - x0), i


class StepCosts:
    """A replica kind's step times, interpolated on its grid; counts which cells a replay used."""

    def __init__(self, kind: ReplicaKind, grid: Grid, walls: dict[str, float]) -> None:
        self.kind = kind
        self.grid = grid
        self.pf_x = [float(t) for t in grid.prefill_tokens]
        pf_t = [walls[step_spec(kind, "prefill", t, 0).key()] for t in grid.prefill_tokens]
        self.dec_b = [float(b) for b in grid.decode_batch]
        self.dec_c = [float(c) for c in grid.decode_context]
        # per context, the step time along the batch axis
        self.dec_t = [[walls[step_spec(kind, "decode", b, c).key()] for b in grid.decode_batch]
                      for c in grid.decode_context]
        prepared = prepare(step_spec(kind, *grid.points()[0]))
        model = self.model = prepared.model
        self.layers = model.num_layers
        self.shard = attention_shard(model, prepared.layout.tp)
        self.act_bytes_per_token = 2 * model.hidden_size * model.bytes_per_activation
        self.weight_bytes = self.shard.params * prepared.workload_options.weight_bytes_per_param
        self.peak_flops = prepared.settings.peak_flops
        self.mem_bw = prepared.settings.mem_bw_bytes_per_s
        self.pairs_flops = 2 * self.shard.heads * (self.shard.qk_dim + self.shard.v_dim)
        self.kv_bytes_per_token = self.shard.kv_cache_bytes_per_token * self.layers
        """KV-cache bytes of one token on each GPU of the replica (every rank caches its TP shard)."""
        self.pf_rest = [t - self.attention(x, x * x, 0) for x, t in zip(self.pf_x, pf_t, strict=True)]
        """Each prefill pass without its attention: nearly linear in the tokens (its attention is quadratic),
        so it is what is interpolated, and the attention of the step at hand is added back exactly."""
        self.usage: dict[tuple[str, int, int], list[float]] = {}

    def _use(self, cell: tuple[str, int, int], x: float, c: float) -> None:
        u = self.usage.get(cell)
        if u is None:
            self.usage[cell] = [1.0, x, c]
        else:
            u[0] += 1.0
            u[1] += x
            u[2] += c

    def prefill_rest(self, tokens: float, count: bool = True) -> float:
        """A prefill pass of ``tokens`` tokens without its attention (interpolated between grid passes)."""
        t, i = _interp(self.pf_x, self.pf_rest, tokens)
        if count:
            self._use(("prefill", i, 0), tokens, 0.0)
        return t

    def decode(self, batch: float, context: float, count: bool = True) -> float:
        """One decode step of ``batch`` sequences at mean context ``context`` (bilinear)."""
        j = min(max(bisect.bisect_right(self.dec_c, context) - 1, 0), len(self.dec_c) - 2)
        lo, i = _interp(self.dec_b, self.dec_t[j], batch)
        hi, _ = _interp(self.dec_b, self.dec_t[j + 1], batch)
        c0, c1 = self.dec_c[j], self.dec_c[j + 1]
        if count:
            self._use(("decode", i, j), batch, context)
        return lo + (hi - lo) * (context - c0) / (c1 - c0)

    def attention(self, tokens: float, pairs: float, cached_tokens: float) -> float:
        """All layers' attention on the roofline: ``tokens`` query tokens, ``pairs`` query–key pairs,
        ``cached_tokens`` read from the KV cache (docs/workload.md, compute nodes)."""
        flops = 2 * tokens * self.shard.params + pairs * self.pairs_flops
        moved = self.weight_bytes + tokens * self.act_bytes_per_token + cached_tokens * self.shard.kv_cache_bytes_per_token
        node = Node(0, "attention", NodeKind.COMPUTE, flops=int(flops), bytes_moved=int(moved))
        return self.layers * roofline_time_s(node, self.peak_flops, self.mem_bw)

    def step(self, prefill_tokens: int, pairs: int, cached_tokens: int, batch: int, context_sum: int) -> float:
        """One scheduler step (module docstring): prefill chunks of ``prefill_tokens`` tokens with
        ``pairs`` query–key pairs and ``cached_tokens`` earlier-chunk tokens read, plus ``batch`` decode
        sequences holding ``context_sum`` cached tokens in all."""
        mean_context = context_sum / batch if batch else 0.0
        if prefill_tokens == 0:
            return self.decode(batch, mean_context)
        n = prefill_tokens + batch
        t = self.prefill_rest(n) + self.attention(n, pairs, cached_tokens)
        if batch:
            t += max(0.0, self.decode(batch, mean_context) - self.decode(batch, 0.0, count=False))
        return max(t, 1e-9)

    def check_points(self, per_phase: int) -> list[tuple[str, int, int]]:
        """The ``per_phase`` most used cells of each phase, each at the mean point the replay asked for."""
        out: list[tuple[str, int, int]] = []
        for phase in PHASES:
            cells = sorted(((-u[0], cell) for cell, u in self.usage.items() if cell[0] == phase))[:per_phase]
            for _, cell in cells:
                n, x, c = self.usage[cell]
                point = (phase, max(1, round(x / n)), round(c / n))
                if point not in out and point not in self.grid.points():
                    out.append(point)
        return out

    def interpolated(self, phase: str, x: int, context: int) -> float:
        """The cost the replay uses for one grid-shaped step (a prefill pass, or a decode step), uncounted."""
        if phase == "prefill":
            return self.prefill_rest(x, count=False) + self.attention(x, x * x, 0)
        return self.decode(x, context, count=False)
