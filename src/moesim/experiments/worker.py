"""The unit of work every executor ships to its workers: simulate one work unit (runs with equal inputs),
return an outcome per run, never raise."""

from __future__ import annotations

import traceback
from dataclasses import dataclass

from moesim.errors import MoesimError
from moesim.experiments.inputs import WorkUnit
from moesim.system.spec import RunResult, RunSpec

MAX_ERROR_CHARS = 4000


@dataclass(frozen=True)
class RunOutcome:
    """What comes back from a worker: the result, or the error text of a run that raised."""

    run_id: str
    spec: RunSpec
    result: RunResult | None = None
    error: str | None = None
    input_hash: str = ""
    """The key of the simulation that produced the result (shared by runs with equal inputs)."""
    fluid_steps: int | None = None
    """The simulation's work: the backend's integration steps and the engine's events (``Simulated``)."""
    engine_events: int | None = None

    @property
    def ok(self) -> bool:
        return self.result is not None


def error_text(exc: BaseException) -> str:
    """First line ``Type: message``, then the traceback (a MoesimError is its message alone)."""
    if isinstance(exc, MoesimError):
        return str(exc)
    head = f"{type(exc).__name__}: {exc}".splitlines()[0] if str(exc) else type(exc).__name__
    tb = "".join(traceback.format_exception(exc))
    return (head + "\n" + tb)[:MAX_ERROR_CHARS]


def failed(unit: WorkUnit, error: str) -> list[RunOutcome]:
    """Every run of ``unit`` failed with ``error``."""
    return [RunOutcome(run.run_id, run.spec, error=error, input_hash=run.input_hash) for run in unit.runs]


def run_unit(unit: WorkUnit, diagnostics: bool = False) -> list[RunOutcome]:
    """Simulate the first run of ``unit`` once and label the result for each of its runs."""
    from moesim.system.run import prepare, result_of, simulate_prepared

    try:
        prepared = [prepare(run.spec) for run in unit.runs]
        simulated = simulate_prepared(prepared[0], diagnostics=diagnostics, breakdown=unit.breakdown)
        return [RunOutcome(run.run_id, run.spec, result=result_of(p, simulated), input_hash=run.input_hash,
                           fluid_steps=simulated.fluid_steps, engine_events=simulated.engine_events)
                for run, p in zip(unit.runs, prepared, strict=True)]
    except Exception as exc:  # noqa: BLE001 - every failure of one run is recorded, not raised
        return failed(unit, error_text(exc))
