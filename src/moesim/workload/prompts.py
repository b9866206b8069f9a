"""Batches of prompts in one prefill pass (docs/dp-attention.md, "Batches of prompts"): every projection runs over
all the batch's tokens, but a prompt's queries attend only to its own keys, so the attention core costs
Σ nᵢ·Lᵢ² terms, not (Σ nᵢ·Lᵢ)² (varlen FlashAttention, as vLLM and SGLang batch a prefill)."""

from __future__ import annotations

from fractions import Fraction

from moesim.models.spec import ModelSpec
from moesim.workload.costs import (
    STUDY_PRECISION,
    Work,
    as_one,
    attention_nodes,
    attention_work,
    measured,
    work_of,
)
from moesim.workload.precision import Precision

Prompts = tuple[tuple[int, int], ...]
"""A batch of prompts as (length in tokens, how many prompts of that length) pairs."""


def prompt_batch(lengths: tuple[int, ...], counts: tuple[int, ...] | None = None) -> Prompts:
    """The (length, count) pairs of a list of prompt lengths, each with its count (default one each)."""
    return tuple(zip(lengths, counts or (1,) * len(lengths), strict=True))


def batch_tokens(prompts: Prompts) -> int:
    """Σ nᵢ·Lᵢ: the tokens of the batch."""
    return sum(length * count for length, count in prompts)


def split_prompts(prompts: Prompts, parts: int) -> list[Prompts]:
    """The batch cut into ``parts`` micro-batches of whole prompts (two-batch overlap splits sequences, as
    SGLang's does): each length's count split evenly, the remainders dealt round-robin over the parts so
    no part collects them all. A part may be empty when the batch has fewer prompts than parts."""
    out: list[list[tuple[int, int]]] = [[] for _ in range(parts)]
    offset = 0
    for length, count in prompts:
        base, extra = divmod(count, parts)
        for b in range(parts):
            n = base + (1 if (b - offset) % parts < extra else 0)
            if n:
                out[b].append((length, n))
        offset = (offset + extra) % parts
    return [tuple(p) for p in out]


def prompt_attention_work(model: ModelSpec, tp: int, prompts: Prompts, weight_bytes_per_param: float,
                          precision: Precision = STUDY_PRECISION) -> Work:
    """Prefill attention of one TP shard over a batch of prompts as one ``Work`` (``as_one``): the sum of
    each prompt's own ``attention_work`` (projections over its L tokens, core over its L×L scores), with the
    shard's weights read once. FLOPs 2·(Σ nᵢLᵢ)·params + 2·Σ nᵢLᵢ²·heads·(qk + v); on the roofline the peak is
    the FLOP-weighted one of its parts (``precision.peak_scale``). This is what a serving step's mixed prefill
    calls."""
    if precision.measured:
        return as_one(prompt_attention_nodes(model, tp, prompts, weight_bytes_per_param, precision))
    if len(prompts) == 1 and prompts[0][1] == 1:
        return attention_work(model, tp, prompts[0][0], weight_bytes_per_param, precision=precision)
    weights = attention_work(model, tp, 0, weight_bytes_per_param, precision=precision).bytes_moved
    flops, moved, time = 0, weights, Fraction(0)
    for length, count in prompts:
        one = attention_work(model, tp, length, weight_bytes_per_param, precision=precision)
        flops += count * one.flops
        moved += count * (one.bytes_moved - weights)
        time += count * Fraction(one.flops) / Fraction(one.peak_scale)
    return work_of(flops, moved, Fraction(flops) / time if time else 1)


def prompt_attention_nodes(model: ModelSpec, tp: int, prompts: Prompts, weight_bytes_per_param: float,
                           precision: Precision = STUDY_PRECISION) -> tuple[Work, ...]:
    """``prompt_attention_work`` as the generator's compute nodes. On the roofline: that one node. Measured
    (``costs.attention_nodes``): the projections, GEMMs over all Σ nᵢLᵢ tokens of the batch, then the varlen
    core, each prompt's L×L scores at FlashAttention-3's efficiency for its L keys, run one after another."""
    if not precision.measured:
        return (prompt_attention_work(model, tp, prompts, weight_bytes_per_param, precision),)
    if len(prompts) == 1 and prompts[0][1] == 1:
        return attention_nodes(model, tp, prompts[0][0], weight_bytes_per_param, precision=precision)
    # the batch's projections: the first node over all its tokens (it does not depend on the keys)
    projections = attention_nodes(model, tp, batch_tokens(prompts), weight_bytes_per_param, 1, precision)[0]
    cores = [(count, attention_nodes(model, tp, length, weight_bytes_per_param, precision=precision)[-1])
             for length, count in prompts]
    flops, moved = sum(n * c.flops for n, c in cores), sum(n * c.bytes_moved for n, c in cores)
    core = measured(Work(flops, moved), [(n * c.flops, c.peak_scale, 1.0) for n, c in cores],
                    [(n * c.bytes_moved, c.bw_scale) for n, c in cores])
    return projections, core
