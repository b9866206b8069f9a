"""The executor interface and its registry: how a sweep's runs reach workers and come back.

An executor takes work units (runs with equal inputs, simulated once: ``moesim.experiments.worker.run_unit``)
and yields one ``RunOutcome`` per run as soon as its unit finishes, in completion order; the runner writes
each to the store before asking for the next. ``connect`` is called before the store is created (a cluster
executor reaches its cluster there, so a wrong address leaves nothing behind) and ``close`` at the end.
Adding an executor = one module here registering a subclass in ``EXECUTORS``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Generator, Sequence
from typing import Self

from moesim.experiments.inputs import WorkUnit
from moesim.experiments.worker import RunOutcome
from moesim.registry import Registry
from moesim.schema import MAX_COUNT, Constraint, Param

DEFAULT_MAX_RETRIES = 3
WORKERS = Param("--workers", "executor", int, "", Constraint(low=1, high=MAX_COUNT))
"""The worker count of an executor (processes or CPUs; None: the executor's default)."""


def check_workers(workers: int | None) -> int | None:
    """``workers`` if it is None or a valid count, else a one-line error."""
    return None if workers is None else WORKERS.check(workers, "command line", strict=True)


class Executor(ABC):
    """Runs planned runs somewhere; ``workers``/``address`` mean what each executor says they mean."""

    def __init__(self, workers: int | None = None, address: str | None = None,
                 max_retries: int = DEFAULT_MAX_RETRIES) -> None:
        self.workers = workers
        self.address = address
        self.max_retries = max_retries

    @abstractmethod
    def execute(self, runs: Sequence[WorkUnit], diagnostics: bool = False) -> Generator[RunOutcome, None, None]:
        """Yield one outcome per run as each unit finishes. Closing the iterator stops outstanding work."""

    def connect(self) -> Self:
        """Reach the workers (a cluster executor connects here); nothing for a local pool. Returns self."""
        return self

    def close(self) -> None:  # noqa: B027 - optional: most executors hold nothing between runs
        """Release what ``connect`` acquired."""

    def describe(self) -> str:
        """One line for the sweep's header, e.g. ``local: 2 worker processes``."""
        return type(self).__name__


EXECUTORS: Registry[type[Executor]] = Registry("executor")
