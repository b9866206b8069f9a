"""The sweep runner: check every run, skip those already in the store, execute the rest, store each result.

Runs whose simulation inputs coincide (``moesim.experiments.inputs``) are simulated once and stored once
per run. ``run_sweep`` is resumable by construction: a run's key is its spec and input hash, so rerunning the same
sweep (after it finished, failed or was killed) executes only what the store lacks. A run that raises
is recorded with its error and the sweep goes on; failed runs are tried again by the next sweep.
Ctrl-C or SIGTERM stops the workers, keeps every finished run and raises ``Interrupted`` saying how many
runs of the sweep are stored. A cluster executor connects before the store is created, so a wrong
address leaves nothing behind.
"""

from __future__ import annotations

import contextlib
import shlex
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from moesim.errors import MoesimError
from moesim.experiments.executors import DEFAULT_MAX_RETRIES, EXECUTORS
from moesim.experiments.inputs import code_hash, plan_runs, run_label, work_units
from moesim.experiments.matrix import Matrix
from moesim.experiments.progress import make_progress
from moesim.experiments.store import ResultsStore
from moesim.interrupts import Interrupted, signal_of, sigterm_as_interrupt
from moesim.system.spec import RunSpec


@dataclass(frozen=True)
class SweepSummary:
    """What a sweep did: runs in the matrix, found in the store, executed now, and the failures."""

    store: Path
    executor: str
    total: int
    cached: int
    ran: int
    failures: tuple[tuple[str, str], ...]
    elapsed_s: float
    simulations: int = 0
    """Simulations the runs needed (runs with equal inputs share one)."""

    @property
    def succeeded(self) -> int:
        return self.ran - len(self.failures)

    def lines(self) -> list[str]:
        shared = f" in {self.simulations} simulations" if self.simulations < self.ran else ""
        out = [f"{self.total} runs: {self.cached} already in the store, {self.succeeded} done now{shared}, "
               f"{len(self.failures)} failed ({self.elapsed_s:.1f} s, {self.executor})",
               f"results: {self.store}"]
        if self.failures:
            out.append("failed runs (tried again by the next sweep):")
            out += [f"  {label}: {error}" for label, error in self.failures]
        return out


def command_line() -> str:
    """This process's command line, the moesim CLI named ``moesim`` however it was started."""
    prog = Path(sys.argv[0])
    return shlex.join(["moesim" if prog.parent.name == "moesim" else prog.name, *sys.argv[1:]])


def run_sweep(
    specs: Sequence[RunSpec],
    out_dir: str | Path,
    executor: str = "local",
    workers: int | None = None,
    address: str | None = None,
    diagnostics: bool = False,
    progress: str = "auto",
    max_retries: int = DEFAULT_MAX_RETRIES,
    source: str = "sweep",
    stream: TextIO | None = None,
    rerun: bool = False,
    command: str | None = None,
    breakdown: str = "layers",
    command_when: str = "start",
) -> SweepSummary:
    """Run ``specs`` into the store in ``out_dir``; every run is checked before anything is simulated.

    Runs whose input hash is already in the store with status 'ok' are skipped, unless ``rerun``.
    ``command`` (default: this process's command line) is recorded in the store for the report's provenance:
    at the start (``command_when="start"``), or once the sweep stores its first successful row (``"stored"``: a
    command that adds nothing, e.g. a refine killed during its first run, is not listed).
    ``breakdown`` is how much of each run's breakdown the store keeps (``moesim.system.breakdown.LEVELS``).
    """
    from moesim.system.breakdown import LEVELS

    if breakdown not in LEVELS:
        raise MoesimError(f"--breakdown: unknown level '{breakdown}' (allowed: {', '.join(LEVELS)})")
    if command_when not in ("start", "stored"):
        raise MoesimError(f"command_when: '{command_when}' (allowed: start, stored)")
    t0 = time.monotonic()
    exe = EXECUTORS.get(executor)(workers, address, max_retries)
    display = make_progress(progress, stream)
    planned = plan_runs(specs, diagnostics, source)
    code_hash()  # hash the simulator's files once, now, for the rows' provenance
    failures: list[tuple[str, str]] = []
    # the executor connects before the store exists: an unreachable cluster leaves no empty store behind
    with sigterm_as_interrupt(), contextlib.closing(exe.connect()), ResultsStore(out_dir) as store:
        line = command if command is not None else command_line()
        if command_when == "start":
            store.record_command(line)
        store.add_factor_columns(name for spec in specs for name, _ in spec.overrides)
        store.rekey({p.legacy_run_id: (p.run_id, p.input_hash) for p in planned
                     if p.legacy_run_id and p.legacy_run_id != p.run_id})
        store.forget_stale({p.spec.key(): p.run_id for p in planned})
        store.remove_orphans()
        done = set() if rerun else store.completed_ids()
        todo = [p for p in planned if p.run_id not in done]
        units = work_units(todo, breakdown)
        header = (f"sweep {source}: {len(planned)} runs, {len(planned) - len(todo)} already in {store.path}; "
                  f"{exe.describe()}")
        display.start(len(planned), len(planned) - len(todo), header)
        try:
            with contextlib.closing(exe.execute(units, diagnostics)) as outcomes:
                for outcome in outcomes:
                    store.record(outcome)
                    if outcome.ok and command_when == "stored":
                        store.record_command(line)  # kept once; recorded with the first row it stored
                    display.advance(outcome)
                    if not outcome.ok:
                        failures.append((run_label(outcome.spec), (outcome.error or "").splitlines()[0]))
        except KeyboardInterrupt as exc:  # Ctrl-C, or SIGTERM (sigterm_as_interrupt): say what is kept
            stored = len(store.completed_ids() & {p.run_id for p in planned})
            raise Interrupted(f"interrupted: {stored} of {len(planned)} runs stored, rerun the same command "
                              "to resume", signal_of(exc)) from None
        finally:
            display.close()
    return SweepSummary(store=Path(out_dir) / store.path.name, executor=exe.describe(), total=len(planned),
                        cached=len(planned) - len(todo), ran=len(todo), failures=tuple(failures),
                        elapsed_s=time.monotonic() - t0, simulations=len(units))


def run_matrix(matrix: Matrix, out_dir: str | Path, **kwargs: object) -> SweepSummary:
    """``run_sweep`` over a matrix's runs (diagnostics on if the matrix asks for them)."""
    diagnostics = bool(kwargs.pop("diagnostics", False)) or matrix.diagnostics
    return run_sweep(matrix.runs(), out_dir, diagnostics=diagnostics, source=matrix.source, **kwargs)  # type: ignore[arg-type]
