"""Decode first: every running sequence decodes one token, and the rest of the token budget goes to prefill
chunks (the prompts already started, then waiting requests): stall-free batching."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from moesim.serving.policies.base import POLICIES

if TYPE_CHECKING:
    from moesim.serving.scheduler import ReplicaState


@POLICIES.register("decode-first", "every running sequence decodes; prefill chunks fill the rest of the token budget",
                   "vLLM V1 scheduler; Agrawal et al., Sarathi-Serve, OSDI 2024")
def decode_first(state: ReplicaState, now_s: float, scheduled_s: np.ndarray) -> tuple[list[tuple[int, int]], int]:
    batch = state.decoders
    # with multi-token prediction each sequence runs its k draft tokens too
    return state.prefill_chunks(state.config.token_budget - batch * (state.draft_tokens + 1), now_s, scheduled_s), batch
