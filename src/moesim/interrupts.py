"""Ctrl-C and SIGTERM as one exception, so a sweep stops the same clean way on either and says what it kept.

Python turns SIGINT into ``KeyboardInterrupt``; within ``sigterm_as_interrupt()`` SIGTERM raises
``Interrupted`` (a ``KeyboardInterrupt``) too, so every ``finally`` runs: workers are stopped, the
store is closed. Exit codes follow the shell's convention, 128 + the signal number (130, 143).
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from types import FrameType


class Interrupted(KeyboardInterrupt):
    """Stopped by a signal; ``str()`` is the message for the user, ``signum`` the signal."""

    def __init__(self, message: str = "interrupted", signum: int = signal.SIGINT) -> None:
        super().__init__(message)
        self.signum = int(signum)

    @property
    def message(self) -> str:
        return str(self.args[0]) if self.args else "interrupted"


def signal_of(exc: BaseException) -> int:
    """The signal behind an interruption (SIGINT for a plain ``KeyboardInterrupt``)."""
    return int(getattr(exc, "signum", signal.SIGINT))


def exit_code(exc: BaseException) -> int:
    """128 + the signal number: 130 for Ctrl-C, 143 for SIGTERM."""
    return 128 + signal_of(exc)


@contextlib.contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
    """Within the block, SIGTERM raises ``Interrupted(signum=SIGTERM)`` in the main thread (once: a second
    SIGTERM gets the previous handler). Outside the main thread this does nothing (Python's rule)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.getsignal(signal.SIGTERM)
    if previous is None:  # a handler installed outside Python: restore the default
        previous = signal.SIG_DFL

    def handler(signum: int, frame: FrameType | None) -> None:
        signal.signal(signal.SIGTERM, previous)
        raise Interrupted("terminated", signum)

    signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
