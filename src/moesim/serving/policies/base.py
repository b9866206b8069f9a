"""The registry of scheduling policies and the signature they share."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np

from moesim.registry import Registry

if TYPE_CHECKING:
    from moesim.serving.scheduler import ReplicaState

Policy = Callable[["ReplicaState", float, np.ndarray], tuple[list[tuple[int, int]], int]]
"""(replica state, now, per-request admission times to fill) → (prefill chunks (request, tokens), decoding
sequences that step once: 0 or all of ``state.decoders``); the chunks come from ``ReplicaState.prefill_chunks``,
which admits requests."""

POLICIES: Registry[Policy] = Registry("scheduling policy")
