"""Run a sweep as Ray tasks on a cluster (``--executor ray [--address HOST:PORT]``).

Each work unit is one ``@ray.remote`` task wrapping ``run_unit``; the moesim package is shipped to the
workers with the job's runtime environment (``py_modules``), so a cluster only needs moesim's
dependencies installed. Results stream back with ``ray.wait`` as tasks finish. A task whose worker
process or node dies is retried by Ray (``max_retries``); one that still fails is recorded as failed.
Without ``--address`` Ray starts a local instance with ``--workers`` CPUs.
"""

from __future__ import annotations

import socket
from collections.abc import Generator, Sequence
from pathlib import Path
from typing import Any

from moesim.errors import MoesimError
from moesim.experiments.executors.base import EXECUTORS, Executor, check_workers
from moesim.experiments.inputs import WorkUnit
from moesim.experiments.worker import RunOutcome, failed, run_unit

BATCH = 64  # outcomes collected per ray.wait call at most


def package_dir() -> Path:
    """The folder of the moesim package the driver runs (shipped to the workers as a py_module)."""
    return Path(__file__).resolve().parents[2]


ADDRESS_FORMS = "HOST:PORT, ray://HOST:PORT or auto"


def check_reachable(address: str, timeout_s: float = 5.0) -> None:
    """Fail fast (before the store is opened) when ``address`` is not an address or nothing listens at
    ``HOST:PORT`` / ``ray://HOST:PORT``; ``ray.init`` itself would wait minutes for an unreachable cluster."""
    if address == "auto":
        return  # Ray finds the cluster this machine belongs to
    target = address.removeprefix("ray://")
    host, sep, port = target.rpartition(":")
    if not sep or not host or not port.isdigit() or any(c.isspace() for c in target) or not 0 < int(port) < 65536:
        raise MoesimError(f"--address '{address}': not a Ray address (allowed: {ADDRESS_FORMS})")
    try:
        socket.create_connection((host, int(port)), timeout=timeout_s).close()
    except OSError as exc:
        raise MoesimError(f"--address {address}: no Ray cluster reachable there ({exc.strerror or exc})") from None


def runtime_env() -> dict[str, Any]:
    return {"py_modules": [str(package_dir())], "excludes": ["__pycache__", "*.pyc"]}


@EXECUTORS.register("ray", "Ray tasks on a cluster (--address) or a local Ray instance",
                    "ray.remote tasks with max_retries, results streamed with ray.wait")
class RayExecutor(Executor):
    """Ray cluster."""

    def __init__(self, workers: int | None = None, address: str | None = None, max_retries: int = 3) -> None:
        try:
            import ray  # noqa: F401
        except ImportError:
            raise MoesimError("--executor ray: ray is not installed (pip install 'moesim[ray]')") from None
        check_workers(workers)
        if address:
            check_reachable(address)
        super().__init__(workers, address, max_retries)
        self._owns = False  # whether this executor started or joined Ray and must shut it down

    def describe(self) -> str:
        return f"ray: cluster at {self.address}" if self.address else "ray: a local Ray instance"

    def connect(self) -> RayExecutor:
        """Join the cluster at ``--address`` now, before the store is created (a local instance is started
        only when there is something to run)."""
        if self.address and not self._owns:
            self._owns = self._init()
        return self

    def close(self) -> None:
        if self._owns:
            import ray

            ray.shutdown()
            self._owns = False

    def _init(self) -> bool:
        """Connect (or start a local instance); returns whether this executor must shut Ray down."""
        import ray

        if ray.is_initialized():
            return False
        kwargs: dict[str, Any] = {"runtime_env": runtime_env(), "log_to_driver": False,
                                  "include_dashboard": False, "configure_logging": False}
        if self.address:
            kwargs["address"] = self.address
            kwargs.pop("include_dashboard")
        elif self.workers:
            kwargs["num_cpus"] = self.workers
        try:
            ray.init(**kwargs)
        except (ConnectionError, RuntimeError, ValueError) as exc:
            where = self.address or "a local instance"
            raise MoesimError(f"--executor ray: cannot connect to {where} ({str(exc).splitlines()[0]})") from None
        return True

    def execute(self, runs: Sequence[WorkUnit], diagnostics: bool = False) -> Generator[RunOutcome, None, None]:
        import ray

        if not runs:
            return
        owns = not self._owns and self._init()
        task = ray.remote(num_cpus=1, max_retries=self.max_retries, retry_exceptions=False)(run_unit)
        pending: dict[Any, WorkUnit] = {}
        try:
            for run in runs:
                pending[task.remote(run, diagnostics)] = run  # type: ignore[call-arg]
            while pending:
                ready, _ = ray.wait(list(pending), num_returns=min(BATCH, len(pending)), timeout=0.5,
                                    fetch_local=True)
                if not ready:
                    ready, _ = ray.wait(list(pending), num_returns=1)
                for ref in ready:
                    run = pending.pop(ref)
                    try:
                        yield from ray.get(ref)
                    except ray.exceptions.RayError as exc:  # the worker died more than max_retries times, ...
                        first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
                        yield from failed(run, f"{type(exc).__name__}: {first}")
        finally:
            for ref in pending:
                ray.cancel(ref, force=True)
            if owns:
                ray.shutdown()
