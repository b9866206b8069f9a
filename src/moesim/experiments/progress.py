"""Progress of a sweep: a rich bar (done/total, failures, ETA), one line per run, or nothing.

``auto`` shows the bar on a terminal and nothing otherwise. Runs found in the store count as done from
the start; the ETA is estimated from the runs finished by this sweep only.
"""

from __future__ import annotations

import sys
from typing import TextIO

from moesim.errors import MoesimError
from moesim.experiments.inputs import run_label
from moesim.experiments.worker import RunOutcome
from moesim.registry import Registry


class Progress:
    """Silent progress (``none``): the base of the other displays."""

    def __init__(self, stream: TextIO | None = None) -> None:
        self.stream = stream or sys.stderr
        self.total = self.done = self.failed = 0

    def start(self, total: int, already_done: int, header: str) -> None:
        self.total, self.done = total, already_done

    def advance(self, outcome: RunOutcome) -> None:
        self.done += 1
        self.failed += 0 if outcome.ok else 1

    def close(self) -> None:
        pass


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


def make_progress(kind: str, stream: TextIO | None = None) -> Progress:
    """``auto`` → ``bar`` on a terminal, ``none`` otherwise."""
    out = stream or sys.stderr
    if kind == "auto":
        kind = "bar" if out.isatty() else "none"
    if kind not in PROGRESS:
        raise MoesimError(f"--progress: unknown display '{kind}' (allowed: auto, {', '.join(PROGRESS.names())})")
    return PROGRESS.get(kind)(out)
