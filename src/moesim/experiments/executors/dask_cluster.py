"""Run a sweep on a Dask cluster (``--executor dask [--address tcp://HOST:PORT]``), if dask is installed.

moesim does not depend on dask; without ``dask.distributed`` this executor is a clear error. Each work
unit is one ``client.submit(run_unit, ...)`` future (``retries=max_retries``), streamed back with
``as_completed``. Without ``--address`` a local cluster with ``--workers`` processes is started.
The Dask workers must have moesim installed (it is not shipped to them).
"""

from __future__ import annotations

from collections.abc import Generator, Sequence
from typing import Any

from moesim.errors import MoesimError
from moesim.experiments.executors.base import EXECUTORS, Executor, check_workers
from moesim.experiments.inputs import WorkUnit
from moesim.experiments.worker import RunOutcome, error_text, failed, run_unit


@EXECUTORS.register("dask", "futures on a Dask cluster (needs dask.distributed, not a moesim dependency)",
                    "dask.distributed Client.submit + as_completed")
class DaskExecutor(Executor):
    """Dask cluster."""

    def __init__(self, workers: int | None = None, address: str | None = None, max_retries: int = 3) -> None:
        try:
            import dask.distributed  # noqa: F401
        except ImportError:
            raise MoesimError("--executor dask: dask is not installed (pip install 'dask[distributed]'), "
                              "or use --executor local|ray") from None
        super().__init__(check_workers(workers), address, max_retries)
        self._client: Any = None

    def describe(self) -> str:
        return f"dask: cluster at {self.address}" if self.address else "dask: a local cluster"

    def connect(self) -> DaskExecutor:
        """Join the cluster at ``--address`` now, before the store is created."""
        from dask.distributed import Client

        if self.address and self._client is None:
            try:
                self._client = Client(self.address, timeout="10s")
            except (OSError, TimeoutError, ValueError) as exc:
                raise MoesimError(f"--address {self.address}: cannot connect to a Dask scheduler there "
                                  f"({str(exc).splitlines()[0] if str(exc) else type(exc).__name__})") from None
        return self

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None

    def execute(self, runs: Sequence[WorkUnit], diagnostics: bool = False) -> Generator[RunOutcome, None, None]:
        from dask.distributed import Client, as_completed

        if not runs:
            return
        self.connect()
        own = self._client is None
        client = self._client if not own else Client(n_workers=self.workers or None, threads_per_worker=1,
                                                     processes=True)
        futures = {}
        try:
            for run in runs:
                fut = client.submit(run_unit, run, diagnostics, pure=False, retries=self.max_retries)
                futures[fut.key] = (fut, run)
            for fut in as_completed([f for f, _ in futures.values()]):
                _, run = futures.pop(fut.key)
                try:
                    yield from fut.result()
                except Exception as exc:  # noqa: BLE001 - a lost worker after all retries: this run fails
                    yield from failed(run, error_text(exc))
        finally:
            for fut, _ in futures.values():
                fut.cancel()
            if own:
                client.close()
