"""ParallelLayout: how a strategy numbers its ranks and splits a layer (docs/workload.md, docs/dp-attention.md).

``TP<t>EP<e>`` (docs/study.md §3): t·e ranks, rank = ep_index × TP + tp_index; attention, its all-reduces and
the expert FFN width are split over TP, the experts over EP. ``DP<d>[TP<t>]EP<e>``: data-parallel attention
with expert parallelism (DeepSeek-V3 technical report §3.4; SGLang's DP attention): d attention groups of t
ranks, rank = dp_index × TP + tp_index, each group with its own share of the batch and its own KV cache; the
experts span all e = d·t ranks, each whole on one rank.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from moesim.errors import MoesimError
from moesim.schema import check_fields, constraint, param

MAX_DEGREE = 2**20
"""The largest TP or EP degree (a topology holds at most about 2 million GPUs)."""
STRATEGY_FORMS = "TP<n>EP<m> (e.g. TP4EP8) or DP<d>[TP<n>]EP<m> with m = d × n (e.g. DP32EP32, DP8TP4EP32)"


@dataclass(frozen=True)
class ParallelLayout:
    """Tensor-, expert- and (with ``dp_attention``) data-parallel degrees. PP is accepted for completeness but
    must be 1; DP > 1 needs ``dp_attention``."""

    tp: int = field(metadata=constraint(low=1, high=MAX_DEGREE))
    ep: int = field(metadata=constraint(low=1, high=MAX_DEGREE))
    dp: int = param(1, low=1, high=MAX_DEGREE)
    pp: int = param(1, choices=(1,))
    dp_attention: bool = False
    """Attention data-parallel over ``dp`` groups of ``tp`` ranks, the experts over all of them (EP = DP × TP)."""

    def __post_init__(self) -> None:
        check_fields(self, "parallel layout")
        if not self.dp_attention and self.dp != 1:
            raise MoesimError(f"strategy {self.name}: DP > 1 needs data-parallel attention (the form "
                              f"DP<d>[TP<t>]EP<e>)")
        if self.dp_attention and self.ep != self.dp * self.tp:
            raise MoesimError(f"strategy {self.name}: EP = {self.ep} must equal DP × TP = {self.dp * self.tp} "
                              "(with data-parallel attention the experts span every rank)")

    @classmethod
    def parse(cls, strategy: str) -> ParallelLayout:
        """Parse a strategy name such as ``TP4EP8``, ``DP32EP32`` or ``DP8TP4EP32`` (any case)."""
        text = strategy.strip()
        m = re.fullmatch(r"TP(\d+)EP(\d+)", text, flags=re.IGNORECASE)
        if m:
            return cls(tp=int(m.group(1)), ep=int(m.group(2)))
        m = re.fullmatch(r"DP(\d+)(?:TP(\d+))?EP(\d+)", text, flags=re.IGNORECASE)
        if m:
            return cls(tp=int(m.group(2) or 1), ep=int(m.group(3)), dp=int(m.group(1)), dp_attention=True)
        raise MoesimError(f"strategy '{strategy}': expected the form {STRATEGY_FORMS}")

    @property
    def name(self) -> str:
        if self.dp_attention:
            return f"DP{self.dp}{f'TP{self.tp}' if self.tp > 1 else ''}EP{self.ep}"
        return f"TP{self.tp}EP{self.ep}"

    @property
    def num_ranks(self) -> int:
        if self.dp_attention:
            return self.dp * self.tp * self.pp
        return self.tp * self.ep * self.dp * self.pp

    @property
    def groups(self) -> int:
        """The number of TP groups: EP (TP×EP) or DP (data-parallel attention)."""
        return self.dp if self.dp_attention else self.ep

    @property
    def grid(self) -> tuple[int, int]:
        """(TP, groups): the two logical dimensions, fastest first, e.g. for placement rules and ``logical_dims``."""
        return self.tp, self.groups

    @property
    def experts(self) -> ParallelLayout:
        """The layout the routed experts see: this one (TP×EP), or EP over every rank with whole experts
        (TP 1) under data-parallel attention."""
        return ParallelLayout(tp=1, ep=self.ep) if self.dp_attention else self

    def tp_index(self, rank: int) -> int:
        return rank % self.tp

    def ep_index(self, rank: int) -> int:
        """The rank's EP index: its TP group (TP×EP), or the rank itself (data-parallel attention)."""
        return rank if self.dp_attention else rank // self.tp

    def tp_group(self, rank: int) -> tuple[int, ...]:
        """The TP contiguous ranks that share ``rank``'s EP (or DP) index."""
        base = rank // self.tp * self.tp
        return tuple(range(base, base + self.tp))

    def ep_group(self, rank: int) -> tuple[int, ...]:
        """{tp_index, tp_index + TP, tp_index + 2·TP, …}; every rank under data-parallel attention."""
        if self.dp_attention:
            return tuple(range(self.num_ranks))
        return tuple(range(self.tp_index(rank), self.num_ranks, self.tp))

    def tp_groups(self) -> tuple[tuple[int, ...], ...]:
        return tuple(self.tp_group(g * self.tp) for g in range(self.groups))

    def ep_groups(self) -> tuple[tuple[int, ...], ...]:
        if self.dp_attention:
            return (self.ep_group(0),)
        return tuple(self.ep_group(t) for t in range(self.tp))

    def validate(self, num_ranks: int | None = None, routed_experts: int | None = None, source: str = "",
                 redundant_experts: int = 0) -> None:
        """Check the degrees against a rank count and an expert count (routed plus redundant, which the EP
        ranks hold evenly); raise a one-line MoesimError."""
        where = f"{source}: " if source else ""
        if num_ranks is not None and self.num_ranks != num_ranks:
            what = "DP × TP" if self.dp_attention else "TP × EP"
            raise MoesimError(
                f"{where}strategy {self.name}: {what} = {self.num_ranks} does not match {num_ranks} ranks"
            )
        if routed_experts is not None and (routed_experts + redundant_experts) % self.ep != 0:
            plus = f" + {redundant_experts} redundant" if redundant_experts else ""
            raise MoesimError(
                f"{where}strategy {self.name}: EP = {self.ep} does not divide {routed_experts} routed experts{plus}"
                " (redundant_experts adds replicas)"
            )

    @property
    def batch_multiple(self) -> int:
        """What a pass's tokens and a decode step's batch must be a multiple of: DP × TP under data-parallel
        attention (``check_batch``; e.g. for a serving grid to round its batches to), else 1."""
        return self.num_ranks if self.dp_attention else 1

    def check_batch(self, count: int, what: str, source: str = "workload") -> None:
        """Data-parallel attention splits the batch evenly: ``count`` (tokens or sequences) must be a multiple
        of DP × TP, so every attention group holds count/DP and every rank dispatches count/(DP·TP)."""
        if count % self.batch_multiple:
            raise MoesimError(f"{source}: field '{what}': {count}{' tokens' if what == 'prompt_lengths' else ''} is not a multiple of DP × TP = {self.num_ranks} "
                              f"(strategy {self.name} splits it evenly over the attention groups and their ranks)")
