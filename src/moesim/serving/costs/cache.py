"""The step-cost cache: one JSON file per simulated step, named by run id, and filling it (``moesim.serving.costs``)."""

from __future__ import annotations

import contextlib
import json
import math
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
from moesim.system.run import simulate_run
from moesim.system.spec import RunSpec

MAX_STEP_S = 3600.0
"""A cached step time above this (or not > 0, or not finite) is taken as corrupt and simulated again."""


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


def progress_lines(say: Callable[[str], None]) -> Progress:
    """A ``Progress`` that says ``step costs: 12/41 simulated, 3.1 s elapsed, about 7.5 s left`` (the time
    since it was made; the rest at the mean pace so far)."""
    t0 = time.monotonic()

    def report(done: int, total: int) -> None:
        elapsed = time.monotonic() - t0
        left = elapsed / done * (total - done) if done else math.nan
        say(f"step costs: {done}/{total} simulated, {elapsed:.1f} s elapsed, about {left:.1f} s left")

    return report


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
