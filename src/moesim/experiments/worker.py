"""The unit of work every executor ships to its workers: simulate one planned run, never raise."""

from __future__ import annotations

import traceback
from dataclasses import dataclass

from moesim.errors import MoesimError
from moesim.system.spec import RunResult, RunSpec

MAX_ERROR_CHARS = 4000


@dataclass(frozen=True)
class RunOutcome:
    """What comes back from a worker: the result, or the error text of a run that raised."""

    run_id: str
    spec: RunSpec
    result: RunResult | None = None
    error: str | None = None

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


def run_one(run_id: str, spec: RunSpec, diagnostics: bool = False) -> RunOutcome:
    """Simulate ``spec``; a run that raises becomes an outcome carrying its error (the sweep goes on)."""
    from moesim.system.run import simulate_run

    try:
        return RunOutcome(run_id, spec, result=simulate_run(spec, diagnostics=diagnostics))
    except Exception as exc:  # noqa: BLE001 - every failure of one run is recorded, not raised
        return RunOutcome(run_id, spec, error=error_text(exc))
