"""Skewed token-to-expert routing and expert placement (docs/routing.md, "Skewed routing and expert
placement").

Routing gives, per MoE layer, the expected token–expert rows of every routed expert (integers summing to
T·k); placement says which experts (and replicas) each EP rank holds. From both follow the rows every EP
rank receives and the per-pair all-to-all matrix. Uniform routing returns ``None``: the generator then
keeps its closed forms (docs/study.md §3) bit for bit.

Expected counts are exact: shares are rationals (floats turned into exact fractions), capped at 1/k per
expert (a token picks k distinct experts, so an expert gets at most T of the T·k rows), and rounded by
cumulative flooring in popularity order, c_i = ⌊T·k·S_i⌋ − ⌊T·k·S_{i−1}⌋ (S_i = the share of the i
hottest experts): the counts sum to T·k and the rows of the m hottest experts never fall as the skew grows.
The balancer follows DeepSeek's EPLB (github.com/deepseek-ai/EPLB, ``replicate_experts`` and
``balanced_packing``): redundant replicas go one at a time to the expert with the most rows per replica,
then replicas are packed, heaviest first, onto the least-loaded rank with a free slot. With redundant
experts (``Redundancy``, N > 0) every rank holds (E + N)/EP replicas and ``eplb`` is DeepSeek's EPLB
itself, hierarchical or global (``eplb.py``); uniform routing then also goes through these per-expert rows.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path

import numpy as np

from moesim.errors import MoesimError, input_error
from moesim.fileio import refuse_special_file
from moesim.workload.eplb import rebalance

ROUTINGS = ("uniform", "zipf", "hot", "table")
PLACEMENT_RULES = ("contiguous", "eplb")

Placement = tuple[tuple[int, ...], ...]
"""Per EP rank, the experts whose replicas it holds (an expert listed k times overall has k replicas)."""


# ----------------------------------------------------------------------------------------------
# Expected rows per expert


def _capped_shares(weights: list[Fraction], top_k: int) -> list[Fraction]:
    """Shares ∝ weights, none above 1/k: saturated experts keep 1/k, the rest share what is left
    in proportion to their weights (water-filling; exact)."""
    cap = Fraction(1, top_k)
    capped: set[int] = set()
    while True:
        free = [i for i in range(len(weights)) if i not in capped]
        left = 1 - cap * len(capped)
        total = sum((weights[i] for i in free), Fraction(0))
        over = [i for i in free if total > 0 and left * weights[i] / total > cap]
        if not over:
            return [cap if i in capped else (left * weights[i] / total if total else Fraction(0))
                    for i in range(len(weights))]
        capped.update(over)


def _cumulative_floor(shares: list[Fraction], rows: int) -> list[int]:
    """c_i = ⌊rows·S_i⌋ − ⌊rows·S_{i−1}⌋ with S_i the cumulative share (order as given)."""
    out, prev, cum = [], 0, Fraction(0)
    for s in shares:
        cum += s
        now = int(rows * cum) if cum < 1 else rows
        out.append(now - prev)
        prev = now
    return out


def popularity_counts(weights: list[Fraction], tokens: int, top_k: int) -> list[int]:
    """Rows per expert in popularity order (hottest first) for weights sorted non-increasing."""
    return _cumulative_floor(_capped_shares(weights, top_k), tokens * top_k)


def zipf_weights(experts: int, exponent: float) -> list[Fraction]:
    """1/(i+1)^s for i = 0..E-1, exactly as the floats evaluate."""
    return [Fraction(float(i + 1) ** -float(exponent)) for i in range(experts)]


def hot_weights(experts: int, hot_fraction: float, hot_share: float) -> list[Fraction]:
    """⌈f·E⌉ hot experts share ``hot_share`` of the rows, the others the rest (popularity order)."""
    hot = min(experts, max(1, int(np.ceil(hot_fraction * experts))))
    share = Fraction(hot_share)
    if hot == experts:
        return [Fraction(1)] * experts
    return [share / hot] * hot + [(1 - share) / (experts - hot)] * (experts - hot)


def _layer_orders(experts: int, layers: int, seed: int) -> list[list[int]]:
    """Per layer, a seeded random popularity order of the experts (which expert is hottest)."""
    rng = np.random.default_rng(seed)
    return [[int(e) for e in rng.permutation(experts)] for _ in range(layers)]


def expert_counts(weights: list[Fraction], experts: int, layers: int, tokens: int, top_k: int,
                  seed: int) -> tuple[tuple[int, ...], ...]:
    """Per MoE layer, rows per expert (expert order): popularity counts laid out in a seeded order."""
    counts = popularity_counts(weights, tokens, top_k)
    out = []
    for order in _layer_orders(experts, layers, seed):
        row = [0] * experts
        for rank, e in enumerate(order):
            row[e] = counts[rank]
        out.append(tuple(row))
    return tuple(out)


def scale_counts(row: tuple[int, ...], tokens: int, top_k: int) -> tuple[int, ...]:
    """A table row as is when it sums to T·k (none above T), else its shares capped at 1/k and rounded to
    T·k rows by cumulative flooring, hottest first (ties: lower expert id first)."""
    rows, total = tokens * top_k, sum(row)
    if total == rows and max(row) <= tokens:
        return row
    weights = [Fraction(c, total) for c in row]
    order = sorted(range(len(row)), key=lambda e: (-weights[e], e))
    counts = popularity_counts([weights[e] for e in order], tokens, top_k)
    out = [0] * len(row)
    for rank, e in enumerate(order):
        out[e] = counts[rank]
    return tuple(out)


def read_table(path: str, experts: int, moe_layers: int) -> tuple[tuple[int, ...], ...]:
    """A routing table: one row per MoE layer (or one row for all), one column per expert, token counts
    (non-negative integers). CSV (an optional header line) or Parquet (columns in expert order)."""
    source = f"routing table {path}"
    p = Path(path)
    if not p.is_file():
        raise input_error("workload options", "routing_table", f"file '{path}' not found")
    try:
        if p.suffix.lower() == ".parquet":
            import pyarrow.parquet as pq

            table = pq.read_table(p)
            rows = [list(r) for r in zip(*(table.column(i).to_pylist() for i in range(table.num_columns)), strict=True)]
        else:
            with p.open(newline="") as f:
                rows = [r for r in csv.reader(f) if r and any(c.strip() for c in r)]
            if rows and not rows[0][0].strip().lstrip("-").isdigit():
                rows = rows[1:]
    except (OSError, ValueError, ImportError) as exc:
        raise MoesimError(f"{source}: cannot read ({exc})") from None
    parsed = []
    for n, r in enumerate(rows, 1):
        try:
            values = tuple(int(str(c).strip()) for c in r)
        except ValueError:
            raise input_error(source, f"row {n}", "must hold integer token counts") from None
        if len(values) != experts:
            raise input_error(source, f"row {n}", f"has {len(values)} columns, the model has {experts} experts")
        if min(values) < 0 or sum(values) == 0:
            raise input_error(source, f"row {n}", "counts must be ≥ 0 and not all 0")
        parsed.append(values)
    if len(parsed) == 1:
        return tuple(parsed) * moe_layers
    if len(parsed) != moe_layers:
        raise input_error(source, "rows", f"has {len(parsed)} rows, expected 1 or {moe_layers} (one per MoE layer)")
    return tuple(parsed)


# ----------------------------------------------------------------------------------------------
# Placement and balancing


def contiguous_placement(experts: int, ep: int, redundant: int = 0) -> Placement:
    """EP rank r holds the physical experts r·S … (r+1)·S − 1, S = (E + N)/EP, physical expert p being a
    replica of expert p mod E (no balancer: with N = 0, experts r·E/EP … (r+1)·E/EP − 1)."""
    per = (experts + redundant) // ep
    return tuple(tuple(sorted(p % experts for p in range(r * per, (r + 1) * per))) for r in range(ep))


def uniform_counts(experts: int, tokens: int, top_k: int) -> tuple[int, ...]:
    """Rows per expert under uniform routing (with redundant experts): c_i = ⌊T·k·(i+1)/E⌋ − ⌊T·k·i/E⌋,
    summing to T·k, any two within one row."""
    return tuple(popularity_counts([Fraction(1)] * experts, tokens, top_k))


def replica_rows(counts: tuple[int, ...], placement: Placement) -> list[list[int]]:
    """Per EP rank, the rows of each replica it holds: an expert's rows split evenly over its replicas
    (the first ``c mod r`` replicas, in rank order, take one more)."""
    replicas = [0] * len(counts)
    for held in placement:
        for e in held:
            replicas[e] += 1
    seen = [0] * len(counts)
    out = []
    for held in placement:
        rows = []
        for e in held:
            q, rem = divmod(counts[e], replicas[e])
            rows.append(q + (1 if seen[e] < rem else 0))
            seen[e] += 1
        out.append(rows)
    return out


def rank_rows(counts: tuple[int, ...], placement: Placement) -> tuple[int, ...]:
    """Rows each EP rank receives."""
    return tuple(sum(r) for r in replica_rows(counts, placement))


def imbalance(rows: tuple[int, ...]) -> float:
    """max / mean rows per EP rank (1.0 = balanced)."""
    total = sum(rows)
    return max(rows) * len(rows) / total if total else 1.0


def eplb_placement(counts: tuple[int, ...], ep: int, slots: int) -> Placement:
    """EPLB-style balance of one layer: ``slots`` redundant replicas per rank go to the experts with the
    most rows per replica, then replicas are packed heaviest first onto the least-loaded rank with room
    (E/EP + slots per rank). Keeps the contiguous placement if that is no worse."""
    experts = len(counts)
    replicas = [1] * experts
    for _ in range(ep * slots):
        hot = max(range(experts), key=lambda e: (Fraction(counts[e], replicas[e]), -e))
        replicas[hot] += 1
    items = []
    for e in range(experts):
        q, rem = divmod(counts[e], replicas[e])
        items += [(q + (1 if k < rem else 0), e) for k in range(replicas[e])]
    items.sort(key=lambda it: (-it[0], it[1]))
    room = experts // ep + slots
    held: list[list[int]] = [[] for _ in range(ep)]
    load = [0] * ep
    for rows, e in items:
        r = min((r for r in range(ep) if len(held[r]) < room), key=lambda r: (load[r], r))
        held[r].append(e)
        load[r] += rows
    placement = tuple(tuple(sorted(h)) for h in held)
    base = contiguous_placement(experts, ep)
    return placement if max(rank_rows(counts, placement)) < max(rank_rows(counts, base)) else base


def read_placement(path: str, experts: int, ep: int, redundant: int = 0) -> Placement:
    """An expert placement file: one line per EP rank, the comma-separated ids of the experts it holds
    (an expert on several ranks is replicated; every expert at least once); with ``redundant`` > 0 the
    ranks hold E + N replicas in all."""
    source = f"expert placement {path}"
    refuse_special_file(path, "expert placement file")
    try:
        lines = [ln.strip() for ln in Path(path).read_text().splitlines() if ln.strip() and not ln.startswith("#")]
    except OSError as exc:
        raise input_error("workload options", "expert_placement", f"cannot read '{path}' ({exc.strerror})") from None
    if len(lines) != ep:
        raise input_error(source, "lines", f"has {len(lines)} lines, expected one per EP rank ({ep})")
    try:
        held = tuple(tuple(int(x) for x in ln.split(",")) for ln in lines)
    except ValueError:
        raise input_error(source, "lines", "must hold comma-separated integer expert ids") from None
    found = {e for h in held for e in h}
    if not found <= set(range(experts)) or len(found) != experts:
        raise input_error(source, "experts", f"every expert id 0..{experts - 1} must appear, and no other")
    sizes = {len(h) for h in held}
    if len(sizes) != 1:
        raise input_error(source, "lines", "every EP rank must hold the same number of experts")
    if redundant and len(held[0]) * ep != experts + redundant:
        raise input_error(source, "lines", f"holds {len(held[0]) * ep} replicas, redundant_experts={redundant} "
                          f"needs {experts + redundant} ({(experts + redundant) // ep} per EP rank)")
    return held


# ----------------------------------------------------------------------------------------------
# One layer's traffic


@dataclass(frozen=True)
class LayerRouting:
    """One MoE layer under skewed routing: rows per expert, the placement, rows per EP rank (before and
    after balancing) and the per-replica rows of each rank."""

    counts: tuple[int, ...]
    placement: Placement
    rows: tuple[int, ...]
    rows_before: tuple[int, ...]
    replica_rows: tuple[tuple[int, ...], ...]
    drawn_pairs: tuple[int, ...] = ()
    """Drawn routing (``draw_layer``): the dispatch rows per (sender, receiver) pair the draws give."""

    @property
    def drawn(self) -> bool:
        """Rows are drawn tokens (``draw_layer``), not expected counts."""
        return bool(self.drawn_pairs)

    def pairs(self) -> tuple[int, ...]:
        """Dispatch rows as an EP×EP matrix, row = sender s, column = receiver d (flattened). Drawn: the
        draws' own matrix. Expected: rank d's rows split evenly over the senders (each holds T/EP tokens),
        ⌊R_d/EP⌋ each and one more for the ``R_d mod EP`` senders s with (s − d) mod EP below it. Column d
        sums to R_d."""
        if self.drawn_pairs:
            return self.drawn_pairs
        ep = len(self.rows)
        out = []
        for s in range(ep):
            for d in range(ep):
                q, rem = divmod(self.rows[d], ep)
                out.append(q + (1 if (s - d) % ep < rem else 0))
        return tuple(out)

    def pair_bytes(self, dispatch_row: int, combine_row: int) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """(dispatch, combine) bytes per (sender, receiver) pair: ``pairs()`` times the dispatch row, and its
        transpose (each receiver returns its rows) times the combine row. Made once per layer and row sizes,
        so every rank's graph shares the two tuples (EP² entries each)."""
        memo: dict[tuple[int, int], tuple[tuple[int, ...], tuple[int, ...]]] = self.__dict__.setdefault("_bytes", {})
        key = (dispatch_row, combine_row)
        if key not in memo:
            pairs, ep = self.pairs(), len(self.rows)
            memo[key] = (tuple(p * dispatch_row for p in pairs),
                         tuple(pairs[s * ep + d] * combine_row for d in range(ep) for s in range(ep)))
        return memo[key]


@dataclass(frozen=True)
class Redundancy:
    """Redundant experts (``eplb.py``): N replicas beyond the E experts, placed by DeepSeek's EPLB over
    ``groups`` expert groups and ``nodes`` nodes (hierarchical policy when the groups split over the
    nodes, else global). N = 0: none (``eplb`` then means ``eplb_placement``'s slots per rank)."""

    redundant: int = 0
    groups: int = 1
    nodes: int = 1


def layer_routing(counts: tuple[int, ...], ep: int, rule: str, slots: int,
                  fixed: Placement | None = None, redundancy: Redundancy = Redundancy()) -> LayerRouting:
    """Place one layer's rows: a fixed placement (file), contiguous, or balanced (``eplb``: with redundant
    experts DeepSeek's EPLB, ``eplb.rebalance``, else ``eplb_placement``)."""
    n = redundancy.redundant
    base = contiguous_placement(len(counts), ep, n)
    if fixed is not None:
        placement = fixed
    elif rule == "eplb" and n:
        placement = rebalance(counts, ep, n, redundancy.groups, redundancy.nodes)
    elif rule == "eplb":
        placement = eplb_placement(counts, ep, slots)
    else:
        placement = base
    per_replica = replica_rows(counts, placement)
    return LayerRouting(counts, placement, tuple(sum(r) for r in per_replica), rank_rows(counts, base),
                        tuple(tuple(r) for r in per_replica))


def ep_imbalance(layers: tuple[LayerRouting, ...]) -> tuple[float, float]:
    """(after, before balancing) max/mean rows per EP rank over the MoE layers: Σ_layers max_r R /
    Σ_layers mean_r R, the ratio that the serial critical path pays (1.0 = balanced)."""
    def ratio(rows: list[tuple[int, ...]]) -> float:
        total = sum(sum(r) for r in rows)
        return sum(max(r) for r in rows) * len(rows[0]) / total if total else 1.0

    return ratio([lr.rows for lr in layers]), ratio([lr.rows_before for lr in layers])


# ----------------------------------------------------------------------------------------------
# Drawn tokens


def sender_tokens(tokens: int, ep: int) -> tuple[int, ...]:
    """Tokens each EP rank routes: ``tokens`` split evenly, the first ``tokens mod EP`` ranks one more."""
    return tuple(tokens // ep + (1 if s < tokens % ep else 0) for s in range(ep))


DRAW_BLOCK_TOKENS = 4096
"""Tokens drawn per block: bounds the memory of a block's token × expert arrays. The draws depend on it (the order
in which a block takes its numbers from the stream), so it is fixed."""


def draw_tokens(counts: tuple[int, ...], tokens: int, drawn: int, rng: np.random.Generator) -> np.ndarray:
    """``drawn`` tokens, each picking k = Σcounts / ``tokens`` distinct experts, expert e with probability
    exactly c_e/T (c_e = ``counts[e]`` ≤ T = ``tokens``, the expected rows of a T-token pass): randomised
    systematic sampling (Hartley & Rao, Ann. Math. Stat. 33, 1962) in integers: the experts in a random
    order laid end to end as intervals of c_e, and the points U, U + T, …, U + (k − 1)·T for U uniform in
    0..T − 1 pick the k intervals they fall in (each interval ≤ T long holds at most one point). With equal
    counts this is a uniformly random k-subset, as DeepEP's tests draw (top-k of random scores,
    tests/legacy/test_low_latency.py). Returns a (drawn, k) array of expert ids."""
    c = np.asarray(counts, dtype=np.int64)
    k, experts = int(c.sum()) // tokens, len(counts)
    out = []
    for start in range(0, drawn, DRAW_BLOCK_TOKENS):
        n = min(DRAW_BLOCK_TOKENS, drawn - start)
        order = rng.permuted(np.broadcast_to(np.arange(experts, dtype=np.int64), (n, experts)), axis=1)
        ends = np.cumsum(c[order], axis=1)
        offset = rng.integers(0, tokens, size=(n, 1), dtype=np.int64)
        points = np.floor_divide(ends - offset, tokens)
        hit = np.diff(points, axis=1, prepend=np.floor_divide(-offset, tokens)) > 0
        out.append(order[hit].reshape(n, k))
    return np.concatenate(out) if out else np.zeros((0, k), dtype=np.int64)


def _replica_of_sender(placement: Placement, experts: int, rng: np.random.Generator) -> np.ndarray:
    """(sender rank, expert) → the flat index of the replica the sender dispatches that expert to: one on its
    own rank if it holds one, else a fixed one, the other senders spread evenly over the expert's replicas
    in a seeded order. SGLang's ``static`` EP dispatch (python/sglang/srt/eplb/expert_location.py,
    ``compute_logical_to_rank_dispatch_physical_map``: same GPU first, else a fair seeded choice)."""
    ep = len(placement)
    where: list[list[tuple[int, int]]] = [[] for _ in range(experts)]  # expert → (rank, flat replica index)
    flat = 0
    for rank, held in enumerate(placement):
        for e in held:
            where[e].append((rank, flat))
            flat += 1
    choice = np.zeros((ep, experts), dtype=np.int64)
    for e, replicas in enumerate(where):
        own = {rank: index for rank, index in reversed(replicas)}
        remote = [s for s in range(ep) if s not in own]
        fair = [index for _, index in replicas] * (len(remote) // len(replicas) + 1)
        picks = rng.permutation(np.asarray(fair[:len(remote)], dtype=np.int64)) if remote else ()
        for s, index in zip(remote, picks, strict=True):
            choice[s, e] = index
        for s, index in own.items():
            choice[s, e] = index
    return choice


def draw_layer(expected: LayerRouting, tokens: int, seed: tuple[int, ...], redundant: int = 0) -> LayerRouting:
    """One MoE layer as drawn tokens: each EP rank's ``sender_tokens`` each pick k distinct experts
    (``draw_tokens``, probabilities = the expected rows / ``tokens``) and send each row to one replica
    (``_replica_of_sender``) over ``expected``'s placement; counts, rows, per-replica rows and the pair
    matrix follow from the draws, and every sender sends exactly T_s·k rows. ``seed``: the numpy
    SeedSequence entropy of this layer's draws (same seed, same draws); ``redundant``: the redundant experts
    (the contiguous placement ``rows_before`` is measured on, as ``layer_routing``'s)."""
    rng = np.random.default_rng(list(seed))
    placement, experts, ep = expected.placement, len(expected.counts), len(expected.placement)
    replicas = sum(len(h) for h in placement)
    choice = _replica_of_sender(placement, experts, rng)
    per_replica = np.zeros((ep, replicas), dtype=np.int64)  # sender × replica rows
    for s, t in enumerate(sender_tokens(tokens, ep)):
        picked = draw_tokens(expected.counts, tokens, t, rng)
        per_replica[s] = np.bincount(choice[s][picked.ravel()], minlength=replicas)
    received = per_replica.sum(axis=0)
    by_expert = np.zeros(experts, dtype=np.int64)
    np.add.at(by_expert, [e for held in placement for e in held], received)
    counts = tuple(int(x) for x in by_expert)
    bounds = np.cumsum([0, *(len(h) for h in placement)])
    pairs = np.add.reduceat(per_replica, bounds[:-1], axis=1)  # sender × receiving rank (each holds ≥ 1 replica)
    rows_of = tuple(tuple(int(x) for x in received[bounds[r]:bounds[r + 1]]) for r in range(ep))
    base = contiguous_placement(experts, ep, redundant)
    return LayerRouting(counts, placement, tuple(sum(r) for r in rows_of), rank_rows(counts, base), rows_of,
                        tuple(int(x) for x in pairs.ravel()))
