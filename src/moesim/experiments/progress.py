"""Progress on stderr: of a sweep (runs done) and of a single run (simulated time, layers done).

Displays: ``bar`` (a live bar or line, for a terminal), ``periodic`` (a plain status line every
``PERIODIC_S`` seconds, also while a long run is in progress, for logs and CI), ``plain`` (a sweep: one line
per finished run), ``none``.
``auto`` is ``bar`` on a terminal and ``periodic`` otherwise. Runs found in the store count as done from
the start; a sweep's ETA is estimated from the runs finished by this sweep only.
"""

from __future__ import annotations

import contextlib
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any, TextIO

from moesim.errors import MoesimError
from moesim.experiments.inputs import run_label
from moesim.experiments.worker import RunOutcome
from moesim.registry import Registry

PERIODIC_S = 10.0
"""Seconds between two status lines of the ``periodic`` display."""
LIVE_AFTER_S = 1.0
"""A single run's live line appears only once the run has taken this long (fast runs print nothing)."""


def _duration(seconds: float) -> str:
    """``42s``, ``3m05s``, ``1h02m``."""
    s = int(round(seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s % 3600 // 60:02d}m"


class Progress:
    """Silent progress (``none``): the base of the other displays."""

    def __init__(self, stream: TextIO | None = None) -> None:
        self.stream = stream or sys.stderr
        self.total = self.done = self.failed = 0
        self.already = 0
        self.t0 = time.monotonic()

    def start(self, total: int, already_done: int, header: str) -> None:
        self.total, self.done, self.already = total, already_done, already_done
        self.t0 = time.monotonic()

    def advance(self, outcome: RunOutcome) -> None:
        self.done += 1
        self.failed += 0 if outcome.ok else 1

    def close(self) -> None:
        pass

    def status(self) -> str:
        """``[37/192] 19 % done, 0 failed, 1m02s elapsed, ETA 4m10s``."""
        elapsed = time.monotonic() - self.t0
        now_done = self.done - self.already
        eta = ""
        if 0 < now_done and self.done < self.total:
            eta = f", ETA {_duration(elapsed / now_done * (self.total - self.done))}"
        pct = 100 * self.done / self.total if self.total else 100.0
        return (f"[{self.done}/{self.total}] {pct:.0f} % done, {self.failed} failed, "
                f"{_duration(elapsed)} elapsed{eta}")


PROGRESS: Registry[type[Progress]] = Registry("progress display")
PROGRESS.register("none", "no progress output", "")(Progress)


@PROGRESS.register("plain", "one line per finished run (logs, CI)", "")
class PlainProgress(Progress):
    def start(self, total: int, already_done: int, header: str) -> None:
        super().start(total, already_done, header)
        self._width = len(str(total))
        print(header, file=self.stream, flush=True)

    def advance(self, outcome: RunOutcome) -> None:
        super().advance(outcome)
        if outcome.result is not None:
            what = f"ok     wall {outcome.result.wall_s:.6f} s  ({outcome.result.sim_wallclock_s:.1f} s)"
        else:
            what = f"FAILED {(outcome.error or '').splitlines()[0] if outcome.error else ''}"
        print(f"[{self.done:>{self._width}}/{self.total}] {run_label(outcome.spec)}  {what}",
              file=self.stream, flush=True)


@PROGRESS.register("periodic", f"a status line every {PERIODIC_S:g} s: done/total, failures, ETA (logs, CI)", "")
class PeriodicProgress(Progress):
    """A status line every PERIODIC_S, also while no run finishes (a heartbeat thread: a packet run can take
    many minutes, and a silent log looks hung)."""

    def start(self, total: int, already_done: int, header: str) -> None:
        super().start(total, already_done, header)
        self._last = time.monotonic()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        print(header, file=self.stream, flush=True)
        self._beat = threading.Thread(target=self._heartbeat, name="moesim-progress", daemon=True)
        self._beat.start()

    def _heartbeat(self) -> None:
        while not self._stop.wait(PERIODIC_S / 4):
            self._maybe_print()

    def _maybe_print(self) -> None:
        with self._lock:
            now = time.monotonic()
            if now - self._last >= PERIODIC_S:
                self._last = now
                print(self.status(), file=self.stream, flush=True)

    def advance(self, outcome: RunOutcome) -> None:
        with self._lock:
            super().advance(outcome)
        self._maybe_print()

    def close(self) -> None:
        if hasattr(self, "_stop"):
            self._stop.set()
            self._beat.join()


@PROGRESS.register("bar", "a progress bar with done/total, failures and ETA (rich)", "")
class BarProgress(Progress):
    def start(self, total: int, already_done: int, header: str) -> None:
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            TextColumn,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )
        from rich.progress import Progress as RichProgress

        super().start(total, already_done, header)
        console = Console(file=self.stream)
        console.print(header)
        self._bar = RichProgress(
            TextColumn("[bold]sweep"), BarColumn(), MofNCompleteColumn(),
            TextColumn("failed: [red]{task.fields[failed]}"), TextColumn("elapsed"), TimeElapsedColumn(),
            TextColumn("ETA"), TimeRemainingColumn(), console=console, speed_estimate_period=300,
        )
        self._bar.start()
        self._task = self._bar.add_task("sweep", total=total, completed=already_done, failed=0)

    def advance(self, outcome: RunOutcome) -> None:
        super().advance(outcome)
        self._bar.update(self._task, advance=1, failed=self.failed)

    def close(self) -> None:
        if hasattr(self, "_bar"):
            self._bar.stop()


def _resolve(kind: str, stream: TextIO) -> str:
    if kind == "auto":
        return "bar" if stream.isatty() else "periodic"
    if kind not in PROGRESS:
        raise MoesimError(f"--progress: unknown display '{kind}' (allowed: auto, {', '.join(PROGRESS.names())})")
    return kind


def make_progress(kind: str, stream: TextIO | None = None) -> Progress:
    """The display of a sweep; ``auto`` → ``bar`` on a terminal, ``periodic`` otherwise."""
    out = stream or sys.stderr
    return PROGRESS.get(_resolve(kind, out))(out)


# ---------------------------------------------------------------------------------------------- one run

Tick = Callable[[float, int, int], None]
"""Called by ``moesim.system.run.simulate_run(progress=...)`` with (simulated s, layers done, layers total)."""


def _simulated(t_s: float) -> str:
    return f"{t_s * 1e3:.3f} ms" if t_s < 1.0 else f"{t_s:.3f} s"


class RunProgress:
    """Progress of single runs: ``run(label)`` is a context manager giving the tick to pass to the simulation
    (``None`` for ``none``, so a silent run costs nothing). On a terminal (``bar``) a rich line that fits the
    terminal's width (the label is shortened, never wrapped), shown once the run has taken LIVE_AFTER_S and
    erased at the end; otherwise (``periodic``) a plain line every PERIODIC_S. Both give the simulated time,
    layers done, elapsed time and an ETA from the layers done so far."""

    def __init__(self, kind: str, stream: TextIO) -> None:
        self.kind = kind
        self.stream = stream

    def _line(self, label: str, t0: float, sim_s: float, done: int, total: int) -> str:
        elapsed = time.monotonic() - t0
        layers = f", {done}/{total} layers done" if total else ""
        eta = f", ETA {_duration(elapsed / done * (total - done))}" if 0 < done < total else ""
        return f"{label}: simulated {_simulated(sim_s)}{layers}, {_duration(elapsed)} elapsed{eta}"

    @contextlib.contextmanager
    def run(self, label: str) -> Iterator[Tick | None]:
        if self.kind == "none":
            yield None
            return
        t0 = time.monotonic()
        state = {"next": t0 + (LIVE_AFTER_S if self.kind == "bar" else PERIODIC_S)}
        live: list[Any] = []  # the rich display, once shown: (progress, task)

        def tick(sim_s: float, done: int, total: int) -> None:
            now = time.monotonic()
            if now < state["next"] or done >= total > 0:
                return
            if self.kind == "bar":
                if not live:
                    live.append(self._live(label, total))
                bar, task = live[0]
                bar.update(task, completed=done, sim=_simulated(sim_s))
                return
            self.stream.write(self._line(label, t0, sim_s, done, total) + "\n")
            self.stream.flush()
            state["next"] = now + PERIODIC_S

        try:
            yield tick
        finally:
            if live:  # erase the live line; the result follows on stdout
                live[0][0].stop()

    def _live(self, label: str, total: int) -> tuple[Any, Any]:
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            TextColumn,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )
        from rich.progress import Progress as RichProgress
        from rich.table import Column

        bar = RichProgress(
            TextColumn(label, table_column=Column(no_wrap=True, overflow="ellipsis", ratio=1, min_width=8)),
            BarColumn(bar_width=10), MofNCompleteColumn(), TextColumn("layers, sim {task.fields[sim]}"),
            TimeElapsedColumn(), TextColumn("ETA"), TimeRemainingColumn(),
            console=Console(file=self.stream), transient=True, expand=True, speed_estimate_period=60,
        )
        bar.start()
        return bar, bar.add_task(label, total=total or None, sim=_simulated(0.0))


def run_progress(kind: str, stream: TextIO | None = None) -> RunProgress:
    """The display of single runs (``moesim run``); the same names as a sweep's (``plain`` = ``periodic``)."""
    out = stream or sys.stderr
    resolved = _resolve(kind, out)
    return RunProgress("periodic" if resolved == "plain" else resolved, out)
