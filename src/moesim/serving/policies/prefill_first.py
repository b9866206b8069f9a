"""Prefill first: a step of prefill chunks whenever a prefill can be scheduled, else a decode step of every
running sequence (prefill and decode never share a step)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from moesim.serving.policies.base import POLICIES

if TYPE_CHECKING:
    from moesim.serving.scheduler import ReplicaState


@POLICIES.register("prefill-first", "a prefill step whenever a prompt can be scheduled, else a decode step",
                   "vLLM V0 scheduler (no chunked prefill); SGLang's default scheduler")
def prefill_first(state: ReplicaState, now_s: float, scheduled_s: np.ndarray) -> tuple[list[tuple[int, int]], int]:
    chunks = state.prefill_chunks(state.config.token_budget, now_s, scheduled_s)
    return chunks, 0 if chunks else state.decoders
