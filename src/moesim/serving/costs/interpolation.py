"""A replica's step times, interpolated on its grid, with the attention of each step from the workload layer
(``moesim.serving.costs``)."""

from __future__ import annotations

import bisect
from collections.abc import Sequence

from moesim.models.spec import ModelSpec
from moesim.serving.costs.grid import PHASES, Grid, step_spec
from moesim.serving.deployment import ReplicaKind
from moesim.system.run import prepare
from moesim.workload.costs import (
    Work,
    attention_shard,
    attention_work,
    decode_attention_work,
    roofline_time_s,
)
from moesim.workload.graph import Node, NodeKind
from moesim.workload.precision import Precision, peak_scale


def _interp(xs: Sequence[float], ys: Sequence[float], x: float) -> tuple[float, int]:
    """Linear interpolation (extrapolation past the ends) and the index of the cell used."""
    i = min(max(bisect.bisect_right(xs, x) - 1, 0), len(xs) - 2)
    x0, x1 = xs[i], xs[i + 1]
    return ys[i] + (ys[i + 1] - ys[i]) * (x - x0) / (x1 - x0), i


class AttentionCost:
    """One TP shard's attention as the workload layer costs it (``attention_work``, ``decode_attention_work``:
    docs/workload.md, compute nodes), for a step whose query tokens, query–key pairs and cached tokens read are
    any sums (chunks of several prompts). Its FLOPs and bytes are linear in the three, so four evaluations give
    each one's coefficient; the node's peak is that of its projection and score/value parts (``peak_scale``)."""

    def __init__(self, model: ModelSpec, tp: int, weight_bytes_per_param: float, precision: Precision,
                 peak_flops: float, mem_bw_bytes_per_s: float) -> None:
        def work(tokens: int, keys: int) -> Work:
            return attention_work(model, tp, tokens, weight_bytes_per_param, keys, precision)

        none, one, pair = work(0, 0), work(1, 0), work(1, 1)
        read = decode_attention_work(model, tp, 1, 1, weight_bytes_per_param, precision)
        self.weight_bytes = none.bytes_moved
        self.token_flops = one.flops
        self.token_bytes = one.bytes_moved - none.bytes_moved
        self.pair_flops = pair.flops - one.flops
        self.cached_bytes = read.bytes_moved - pair.bytes_moved
        self.rates = (Precision.rate(precision.dense), Precision.rate(precision.attention))
        self.peak_flops = peak_flops
        self.mem_bw = mem_bw_bytes_per_s

    def time_s(self, tokens: float, pairs: float, cached_tokens: float) -> float:
        """The roofline time of ``tokens`` query tokens with ``pairs`` query–key pairs, ``cached_tokens`` read."""
        projections, core = tokens * self.token_flops, pairs * self.pair_flops
        scale = 1 if self.rates == (1, 1) else peak_scale([(int(projections), self.rates[0]), (int(core), self.rates[1])])
        node = Node(0, "attention", NodeKind.COMPUTE, flops=int(projections + core), peak_scale=float(scale),
                    bytes_moved=int(self.weight_bytes + tokens * self.token_bytes + cached_tokens * self.cached_bytes))
        return roofline_time_s(node, self.peak_flops, self.mem_bw)


class StepCosts:
    """A replica kind's step times, interpolated on its grid; counts which cells a replay used."""

    def __init__(self, kind: ReplicaKind, grid: Grid, walls: dict[str, float]) -> None:
        self.kind = kind
        self.grid = grid
        self.pf_x = [float(t) for t in grid.prefill_tokens]
        pf_t = [walls[step_spec(kind, "prefill", t, 0).key()] for t in grid.prefill_tokens]
        self.dec_b = [float(b) for b in grid.decode_batch]
        self.dec_c = [float(c) for c in grid.decode_context]
        # per context, the step time along the batch axis
        self.dec_t = [[walls[step_spec(kind, "decode", b, c).key()] for b in grid.decode_batch]
                      for c in grid.decode_context]
        prepared = prepare(step_spec(kind, *grid.points()[0]))
        model = self.model = prepared.model
        self.layers = model.num_layers
        options = prepared.workload_options
        self.attention_cost = AttentionCost(model, prepared.layout.tp, options.weight_bytes_per_param,
                                            options.precision, prepared.settings.peak_flops,
                                            prepared.settings.mem_bw_bytes_per_s)
        shard = attention_shard(model, prepared.layout.tp, options.precision.kv_bytes(model.bytes_per_activation))
        self.kv_bytes_per_token = shard.kv_cache_bytes_per_token * self.layers
        """KV-cache bytes of one token on each GPU of the replica (every rank caches its TP shard)."""
        self.pf_rest = [t - self.attention(x, x * x, 0) for x, t in zip(self.pf_x, pf_t, strict=True)]
        """Each prefill pass without its attention: nearly linear in the tokens (its attention is quadratic),
        so it is what is interpolated, and the attention of the step at hand is added back exactly."""
        self.usage: dict[tuple[str, int, int], list[float]] = {}
        self._rows: dict[tuple[float, int], tuple[int, float, float]] = {}
        """(batch, context row) → ``_decode_rows``: a replay asks for the same few batches again and again."""

    def _use(self, cell: tuple[str, int, int], x: float, c: float) -> None:
        u = self.usage.get(cell)
        if u is None:
            self.usage[cell] = [1.0, x, c]
        else:
            u[0] += 1.0
            u[1] += x
            u[2] += c

    def prefill_rest(self, tokens: float, count: bool = True) -> float:
        """A prefill pass of ``tokens`` tokens without its attention (interpolated between grid passes)."""
        t, i = _interp(self.pf_x, self.pf_rest, tokens)
        if count:
            self._use(("prefill", i, 0), tokens, 0.0)
        return t

    def _decode_rows(self, batch: float, j: int) -> tuple[int, float, float]:
        """The batch axis's cell of ``batch`` and the step times at ``batch`` on context rows ``j`` and ``j + 1``."""
        xs = self.dec_b
        i = min(max(bisect.bisect_right(xs, batch) - 1, 0), len(xs) - 2)  # _interp's cell, one for both rows
        dx, width = batch - xs[i], xs[i + 1] - xs[i]
        low, high = self.dec_t[j], self.dec_t[j + 1]
        rows = (i, low[i] + (low[i + 1] - low[i]) * dx / width, high[i] + (high[i + 1] - high[i]) * dx / width)
        self._rows[batch, j] = rows
        return rows

    def decode(self, batch: float, context: float, count: bool = True) -> float:
        """One decode step of ``batch`` sequences at mean context ``context`` (bilinear: along the batch axis on
        the two context rows around it, each kept per batch and row, then along the context axis)."""
        cs = self.dec_c
        j = min(max(bisect.bisect_right(cs, context) - 1, 0), len(cs) - 2)
        i, lo, hi = self._rows.get((batch, j)) or self._decode_rows(batch, j)
        c0, c1 = cs[j], cs[j + 1]
        if count:  # _use, inlined: a replay's most frequent call
            u = self.usage.get(("decode", i, j))
            if u is None:
                self.usage["decode", i, j] = [1.0, batch, context]
            else:
                u[0] += 1.0
                u[1] += batch
                u[2] += context
        return lo + (hi - lo) * (context - c0) / (c1 - c0)

    def attention(self, tokens: float, pairs: float, cached_tokens: float) -> float:
        """All layers' attention on the roofline: ``tokens`` query tokens, ``pairs`` query–key pairs,
        ``cached_tokens`` read from the KV cache (``AttentionCost``)."""
        return self.layers * self.attention_cost.time_s(tokens, pairs, cached_tokens)

    def decode_step(self, batch: int, context_sum: float, draft_tokens: int = 0) -> float:
        """``step`` without prefill chunks: ``batch`` decode sequences holding ``context_sum`` cached tokens."""
        t = self.decode(batch, context_sum / batch if batch else 0.0)
        if draft_tokens and batch:
            t += self.decode(batch * (draft_tokens + 1), 0.0, count=False) - self.decode(batch, 0.0, count=False)
        return t

    def step(self, prefill_tokens: int, pairs: int, cached_tokens: int, batch: int, context_sum: float,
             draft_tokens: int = 0) -> float:
        """One scheduler step (module docstring): prefill chunks of ``prefill_tokens`` tokens with
        ``pairs`` query–key pairs and ``cached_tokens`` earlier-chunk tokens read, plus ``batch`` decode
        sequences holding ``context_sum`` cached tokens in all. With ``draft_tokens`` k (multi-token
        prediction), each decoding sequence runs k + 1 tokens through the model and reads its cache once:
        the decode step of B sequences plus what B·k more tokens add at no context."""
        if prefill_tokens == 0:
            return self.decode_step(batch, context_sum, draft_tokens)
        mean_context = context_sum / batch if batch else 0.0
        n = prefill_tokens + batch * (draft_tokens + 1)
        t = self.prefill_rest(n) + self.attention(n, pairs, cached_tokens)
        if batch:
            t += max(0.0, self.decode(batch, mean_context) - self.decode(batch, 0.0, count=False))
        return max(t, 1e-9)

    def check_points(self, per_phase: int) -> list[tuple[str, int, int]]:
        """The ``per_phase`` most used cells of each phase, each at the mean point the replay asked for."""
        out: list[tuple[str, int, int]] = []
        for phase in PHASES:
            cells = sorted(((-u[0], cell) for cell, u in self.usage.items() if cell[0] == phase))[:per_phase]
            for _, cell in cells:
                n, x, c = self.usage[cell]
                point = (phase, max(1, round(x / n)), round(c / n))
                if point not in out and point not in self.grid.points():
                    out.append(point)
        return out

    def interpolated(self, phase: str, x: int, context: int) -> float:
        """The cost the replay uses for one grid-shaped step (a prefill pass, or a decode step), uncounted."""
        if phase == "prefill":
            return self.prefill_rest(x, count=False) + self.attention(x, x * x, 0)
        return self.decode(x, context, count=False)
