"""ParallelLayout: the [TP, EP] rank numbering of docs/study.md §3 (rank = ep_index × TP + tp_index)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from moesim.errors import MoesimError
from moesim.schema import check_fields, constraint, param

MAX_DEGREE = 2**20
"""The largest TP or EP degree (a topology holds at most about 2 million GPUs)."""


@dataclass(frozen=True)
class ParallelLayout:
    """Tensor- and expert-parallel degrees. DP and PP are accepted for completeness but must be 1 here."""

    tp: int = field(metadata=constraint(low=1, high=MAX_DEGREE))
    ep: int = field(metadata=constraint(low=1, high=MAX_DEGREE))
    dp: int = param(1, choices=(1,))
    pp: int = param(1, choices=(1,))

    def __post_init__(self) -> None:
        check_fields(self, "parallel layout")

    @classmethod
    def parse(cls, strategy: str) -> ParallelLayout:
        """Parse a strategy name such as ``TP4EP8``."""
        m = re.fullmatch(r"TP(\d+)EP(\d+)", strategy.strip(), flags=re.IGNORECASE)
        if not m:
            raise MoesimError(f"strategy '{strategy}': expected the form TP<n>EP<m>, e.g. TP4EP8")
        return cls(tp=int(m.group(1)), ep=int(m.group(2)))

    @property
    def name(self) -> str:
        return f"TP{self.tp}EP{self.ep}"

    @property
    def num_ranks(self) -> int:
        return self.tp * self.ep * self.dp * self.pp

    def tp_index(self, rank: int) -> int:
        return rank % self.tp

    def ep_index(self, rank: int) -> int:
        return rank // self.tp

    def tp_group(self, rank: int) -> tuple[int, ...]:
        """The TP contiguous ranks that share ``rank``'s EP index."""
        base = self.ep_index(rank) * self.tp
        return tuple(range(base, base + self.tp))

    def ep_group(self, rank: int) -> tuple[int, ...]:
        """{tp_index, tp_index + TP, tp_index + 2·TP, …}."""
        return tuple(range(self.tp_index(rank), self.num_ranks, self.tp))

    def tp_groups(self) -> tuple[tuple[int, ...], ...]:
        return tuple(self.tp_group(e * self.tp) for e in range(self.ep))

    def ep_groups(self) -> tuple[tuple[int, ...], ...]:
        return tuple(self.ep_group(t) for t in range(self.tp))

    def validate(self, num_ranks: int | None = None, routed_experts: int | None = None, source: str = "",
                 redundant_experts: int = 0) -> None:
        """Check the degrees against a rank count and an expert count (routed plus redundant, which the EP
        ranks hold evenly); raise a one-line MoesimError."""
        where = f"{source}: " if source else ""
        if num_ranks is not None and self.num_ranks != num_ranks:
            raise MoesimError(
                f"{where}strategy {self.name}: TP × EP = {self.num_ranks} does not match {num_ranks} ranks"
            )
        if routed_experts is not None and (routed_experts + redundant_experts) % self.ep != 0:
            plus = f" + {redundant_experts} redundant" if redundant_experts else ""
            raise MoesimError(
                f"{where}strategy {self.name}: EP = {self.ep} does not divide {routed_experts} routed experts{plus}"
                " (redundant_experts adds replicas)"
            )
