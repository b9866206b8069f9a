"""The one exception type users see: a one-line message naming the file, the field and the allowed values."""

from __future__ import annotations

from collections.abc import Iterable


class MoesimError(Exception):
    """A user-facing error. The CLI prints its message on one line and exits with code 2."""


def input_error(source: str, field: str, problem: str, allowed: Iterable[object] | None = None) -> MoesimError:
    """Build an error like ``cfg.json: field 'top_k': must be > 0 (allowed: 1..256)``."""
    msg = f"{source}: field '{_one_line(field)}': {problem}"
    if allowed is not None:
        msg += f" (allowed: {', '.join(str(a) for a in allowed)})"
    return MoesimError(msg)


def _one_line(text: str) -> str:
    """``text`` with line breaks and other control characters escaped (a key read from a file may hold them)."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)
