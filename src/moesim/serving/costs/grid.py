"""The grid of steps a replica's costs are interpolated from, and the run of each step (``moesim.serving.costs``)."""

from __future__ import annotations

from dataclasses import dataclass

from moesim.serving.deployment import ReplicaKind
from moesim.system.spec import RunSpec

CONTEXT_FIRST = 1024
CONTEXT_RATIO = 4
PHASES = ("prefill", "decode")


def batch_axis(limit: int) -> tuple[int, ...]:
    """1, 2, 4, … up to the first power of two ≥ ``limit`` (at least 1, 2)."""
    axis = [1, 2]
    while axis[-1] < limit:
        axis.append(axis[-1] * 2)
    return tuple(axis)


def context_axis(limit: int) -> tuple[int, ...]:
    """0, 1024, 4096, … up to the first point ≥ ``limit`` (at least 0, 1024)."""
    axis = [0, CONTEXT_FIRST]
    while axis[-1] < limit:
        axis.append(axis[-1] * CONTEXT_RATIO)
    return tuple(axis)


@dataclass(frozen=True)
class Grid:
    """The steps a replica's costs are interpolated from: prefill tokens; decode batch × context."""

    prefill_tokens: tuple[int, ...] = ()
    decode_batch: tuple[int, ...] = ()
    decode_context: tuple[int, ...] = ()

    def points(self) -> list[tuple[str, int, int]]:
        """(phase, tokens or batch, context) of every grid step."""
        return ([("prefill", t, 0) for t in self.prefill_tokens]
                + [("decode", b, c) for b in self.decode_batch for c in self.decode_context])

    def union(self, other: Grid) -> Grid:
        """Both grids' steps (each axis the longer of the two)."""
        return Grid(*(max(a, b, key=len) for a, b in zip(
            (self.prefill_tokens, self.decode_batch, self.decode_context),
            (other.prefill_tokens, other.decode_batch, other.decode_context), strict=True)))

    def describe(self) -> dict[str, list[int]]:
        return {"prefill_tokens": list(self.prefill_tokens), "decode_batch": list(self.decode_batch),
                "decode_context": list(self.decode_context)}


def step_spec(kind: ReplicaKind, phase: str, x: int, context: int) -> RunSpec:
    """The run of one step: a prefill pass of ``x`` tokens, or a decode step of batch ``x`` at ``context``;
    with data-parallel attention ``x`` per rank (the run's batch: every rank's, ``ReplicaKind.dp_ranks`` × x)."""
    x *= kind.dp_ranks
    if phase == "prefill":
        return kind.spec(tokens=x)
    return kind.spec(phase="decode", batch=x, context_tokens=context)
