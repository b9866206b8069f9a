"""Multi-token prediction (MTP) and speculative decoding in a decode step (docs/deployments.md,
"Multi-token prediction").

With ``mtp_draft_tokens`` = k a decode step drafts k tokens per sequence with the MTP module and verifies
them with the main model: the main model runs over k + 1 tokens per sequence (the last accepted token and
the k drafts; every layer, its EP all-to-alls and its experts see B·(k + 1) tokens, the k + 1 queries of a
sequence read its KV cache once), and the MTP module, a projection of 2·hidden² weights and one extra
transformer layer with its MoE (DeepSeek-V3 technical report §2.2), runs k times over the B sequences, one
draft each time. Its embedding and output head are shared with the main model, whose own ones are not
modelled either. The drafts are accepted in
order, each with probability ``mtp_acceptance`` = a once the ones before it were, so a step yields
``tokens_per_step(k, a)`` = 1 + a + … + a^k tokens per sequence in expectation (Leviathan et al., "Fast
Inference from Transformers via Speculative Decoding", ICML 2023, eq. 1). DeepSeek-V3 reports 85–90 %
acceptance of its second token (k = 1; technical report §5.4.3), 1.85–1.9 tokens per step.
"""

from __future__ import annotations

import dataclasses
from typing import Any, TypeVar

from moesim.models.spec import ModelSpec

MAX_DRAFT_TOKENS = 16
"""The most draft tokens per step (speculative decoding stacks use a few; each is one more MTP pass)."""

T = TypeVar("T")


def tokens_per_step(draft_tokens: int, acceptance: float) -> float:
    """Expected tokens a decode step yields per sequence with ``draft_tokens`` = k drafts, each accepted
    with probability ``acceptance`` = a when all before it were: Σ_{i=0..k} a^i (1 without drafts, k + 1
    at a = 1). The verification always yields one token of its own, so the sum starts at 1."""
    if draft_tokens < 0 or not 0.0 <= acceptance <= 1.0:
        raise ValueError(f"draft_tokens must be >= 0 and acceptance in [0, 1], got {draft_tokens}, {acceptance}")
    return float(sum(acceptance ** i for i in range(draft_tokens + 1)))


def verified_tokens(draft_tokens: int | None) -> int:
    """Tokens per sequence the main model runs over in one decode step: k + 1 with k drafts, else 1."""
    return 1 + (draft_tokens or 0)


def step_model(model: ModelSpec, draft_tokens: int | None) -> ModelSpec:
    """The model as one decode step runs it: its layers, then the MTP layer once per draft (the graph's
    layers of a step; the MTP layers are MoE layers)."""
    if not draft_tokens:
        return model
    return dataclasses.replace(model, num_layers=model.num_layers + draft_tokens)


def with_mtp_layers(main: tuple[tuple[T, ...], tuple[tuple[T, ...], ...]],
                    draft: tuple[tuple[T, ...], tuple[tuple[T, ...], ...]], projection: tuple[T, ...],
                    moe_layers: int, draft_tokens: int) -> tuple[tuple[T, ...], tuple[tuple[T, ...], ...]]:
    """A decode step's (dense layer, MoE layers) templates with the MTP module: ``main`` (the main model
    over k + 1 tokens per sequence; one MoE template stands for all its ``moe_layers``) followed by
    ``draft_tokens`` MTP passes, each the module's ``projection`` then ``draft``'s MoE layer (B tokens,
    one draft per sequence), as ``step_model`` numbers them."""
    dense, moe = main
    layers = moe if len(moe) == moe_layers else moe * moe_layers
    return dense, tuple(layers) + (projection + draft[1][0],) * draft_tokens


def result_fields(draft_tokens: int | None, acceptance: float | None) -> dict[str, Any]:
    """What a decode run's result states about MTP (nothing without it): the drafts, the acceptance and
    the expected tokens per sequence and step, for the serving replay."""
    if not draft_tokens or acceptance is None:
        return {}
    return {"mtp_draft_tokens": draft_tokens, "mtp_acceptance": acceptance,
            "tokens_per_step": tokens_per_step(draft_tokens, acceptance)}
