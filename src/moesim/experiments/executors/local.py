"""The default executor: a pool of local worker processes (``--workers N``, default: one per CPU).

Workers are started with the ``spawn`` method (no state inherited from the driver) and exit when the
driver dies. Spawn imports the driver's script again in every worker; a script that starts a sweep
without an ``if __name__ == "__main__":`` guard is detected (its workers exit at once with
``UNGUARDED_MAIN_EXIT``) and the sweep stops with one MoesimError saying so. At most one run per worker is in flight, so when a worker process dies (killed, out of
memory) the runs that may have been on it are known: the pool is restarted and those runs are tried
again, up to ``max_retries`` times each, after which they are recorded as failed.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import sys
import threading
import time
from collections import deque
from collections.abc import Generator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool

from moesim.errors import MoesimError
from moesim.experiments.executors.base import EXECUTORS, Executor, check_workers
from moesim.experiments.inputs import WorkUnit
from moesim.experiments.worker import RunOutcome, error_text, failed, run_unit

UNGUARDED_MAIN_EXIT = 86
"""Exit code of a process that was importing the driver's script (spawn runs it again as ``__mp_main__``)
when the script started a sweep: the script calls it without an ``if __name__ == "__main__":`` guard."""


def refuse_when_importing_main() -> None:
    """Exit at once, quietly, with UNGUARDED_MAIN_EXIT when this process is still importing the driver's
    script (the state multiprocessing itself refuses to start processes from), so the driver can say why."""
    if getattr(multiprocessing.current_process(), "_inheriting", False):
        raise SystemExit(UNGUARDED_MAIN_EXIT)


def _noop() -> None:
    """What the probe process of ``_main_unguarded`` runs once it has imported the script."""


def _main_unguarded() -> bool:
    """Whether a fresh spawned process, importing the driver's script as every worker does, starts a sweep."""
    if getattr(sys.modules["__main__"], "__file__", None) is None:  # an interpreter or notebook: nothing re-runs
        return False
    probe = multiprocessing.get_context("spawn").Process(target=_noop)
    probe.start()
    probe.join()
    return probe.exitcode == UNGUARDED_MAIN_EXIT


def _worker_init(parent_pid: int) -> None:
    """Worker initializer: leave Ctrl-C to the driver, and exit as soon as the driver is gone (``kill -9``)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)

    def watch() -> None:
        while os.getppid() == parent_pid:
            time.sleep(0.5)
        os._exit(1)

    threading.Thread(target=watch, daemon=True).start()


@EXECUTORS.register("local", "a pool of worker processes on this machine (the default)",
                    "concurrent.futures.ProcessPoolExecutor, spawn start method")
class LocalExecutor(Executor):
    """Local process pool."""

    def __init__(self, workers: int | None = None, address: str | None = None, max_retries: int = 3) -> None:
        if address:
            raise MoesimError("--address: only the ray and dask executors connect to a cluster")
        check_workers(workers)
        refuse_when_importing_main()
        super().__init__(workers or os.cpu_count() or 1, None, max_retries)

    def describe(self) -> str:
        return f"local: {self.workers} worker process{'es' if self.workers != 1 else ''}"

    def _pool(self, size: int) -> ProcessPoolExecutor:
        ctx = multiprocessing.get_context("spawn")
        return ProcessPoolExecutor(max_workers=size, mp_context=ctx, initializer=_worker_init,
                                   initargs=(os.getpid(),))

    def execute(self, runs: Sequence[WorkUnit], diagnostics: bool = False) -> Generator[RunOutcome, None, None]:
        queue = deque(runs)
        size = max(1, min(int(self.workers or 1), len(queue)))
        deaths: dict[str, int] = {}
        inflight: dict[Future[list[RunOutcome]], WorkUnit] = {}
        pool: ProcessPoolExecutor | None = None
        try:
            while queue or inflight:
                if pool is None:
                    pool = self._pool(size)
                broken = False
                while queue and len(inflight) < size:
                    run = queue.popleft()
                    try:
                        inflight[pool.submit(run_unit, run, diagnostics)] = run
                    except BrokenProcessPool:  # a worker died since the last wait: this run never started
                        queue.appendleft(run)
                        broken = True
                        break
                done = set() if broken else wait(inflight, return_when=FIRST_COMPLETED).done
                for fut in list(done):
                    run = inflight.pop(fut)
                    exc = fut.exception()
                    if exc is None:
                        yield from fut.result()
                    elif isinstance(exc, BrokenProcessPool):
                        broken = True
                        inflight[fut] = run  # settled below with the other runs of the dead pool
                    else:  # e.g. an unpicklable result: this run fails, the sweep goes on
                        yield from failed(run, error_text(exc))
                if broken and not deaths and _main_unguarded():
                    raise MoesimError(f"{sys.argv[0]}: the workers, importing this script, started its sweep "
                                      "again: call moesim.sweep (or place) under `if __name__ == \"__main__\":` "
                                      "(the local executor starts its workers with spawn)")
                if broken:
                    wait(inflight)  # a broken pool settles every future it holds
                    for fut, run in inflight.items():
                        if fut.exception() is None:
                            yield from fut.result()
                            continue
                        deaths[run.run_id] = deaths.get(run.run_id, 0) + 1
                        if deaths[run.run_id] > self.max_retries:
                            yield from failed(run, (
                                f"WorkerDied: the worker process running this run died {deaths[run.run_id]} times "
                                "(killed, crashed or out of memory)"))
                        else:
                            queue.appendleft(run)
                    inflight.clear()
                    pool.shutdown(wait=True, cancel_futures=True)
                    pool = None
        finally:
            if pool is not None:
                _stop(pool)


def _stop(pool: ProcessPoolExecutor) -> None:
    """Stop a pool now (the sweep was interrupted): cancel queued runs, terminate the running ones."""
    processes = list(getattr(pool, "_processes", {}).values())  # no public API before Python 3.14
    pool.shutdown(wait=False, cancel_futures=True)
    for proc in processes:
        if proc.is_alive():
            proc.terminate()
