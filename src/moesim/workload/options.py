"""The generator's options (``WorkloadOptions``): phase, decode knobs, routing and expert placement, and
the study's defaults (docs/workload.md)."""

from __future__ import annotations

from dataclasses import dataclass, field

from moesim.errors import input_error
from moesim.schema import constraint
from moesim.workload.routing import PLACEMENT_RULES, ROUTINGS

STUDY_TOKENS = 4096
STUDY_STRATEGIES = ("TP2EP16", "TP4EP8", "TP8EP4", "TP16EP2")
STUDY_RANKS = 32

COLLECTIVE_ADDRESSING = ("dims", "groups")
PHASES = ("prefill", "decode")
MAX_DECODE_TOKENS = 10**9
MAX_DECODE_STEPS = 1024
"""Every step is its own copy of the layers in the graph, so the node count grows with the steps."""
DECODE_KNOBS = {
    "batch": (1, 1, MAX_DECODE_TOKENS),
    "context_tokens": (STUDY_TOKENS, 0, MAX_DECODE_TOKENS),
    "decode_steps": (1, 1, MAX_DECODE_STEPS),
}
"""Decode knob → (its value when a decode run leaves it unset, smallest, largest allowed)."""
ROUTING_KNOBS = {
    "routing_zipf_exponent": ("zipf", 1.0),
    "routing_hot_fraction": ("hot", 0.1),
    "routing_hot_share": ("hot", 0.5),
    "routing_table": ("table", None),
}
"""Routing knob → (the routing it belongs to, its value when that routing leaves it unset)."""
MAX_EXPERT_SLOTS = 64
OVERLAPS = ("none", "two-batch")
MAX_MICRO_BATCHES = 64



@dataclass(frozen=True)
class WorkloadOptions:
    """Knobs of the generator that the study (docs/study.md) leaves to the implementation.

    ``weight_bytes_per_param``: attention, dense-FFN, router and shared-expert weights (FP8 = 1).
    ``expert_bytes_per_param``: routed-expert weights (FP4 = 0.5, as in the study checkpoints).
    ``num_ranks``: if set, TP × EP must equal it (the study: 32).
    ``collective_addressing``: ``"dims"`` = global group + ``involved_dims`` (docs/study.md §6);
    ``"groups"`` = communicator-group ids (Chakra ``pg_name``, docs/reference-semantics.md C.4).
    ``phase``: ``"prefill"`` (one pass over ``tokens`` tokens) or ``"decode"``: ``decode_steps``
    steps of ``batch`` sequences, one new token each, whose KV cache holds ``context_tokens`` tokens
    at the first step. The decode knobs are refused in prefill; in decode an unset one takes its
    ``DECODE_KNOBS`` default.
    ``routing``: token-to-expert routing, ``"uniform"`` or skewed (``routing.py``): ``"zipf"`` (share
    ∝ 1/(i+1)^``routing_zipf_exponent``), ``"hot"`` (``routing_hot_fraction`` of the experts get
    ``routing_hot_share`` of the rows), ``"table"`` (``routing_table``: a CSV/Parquet file of tokens per
    MoE layer × expert); ``routing_seed`` picks which experts are hot in each layer.
    ``expert_placement``: ``"contiguous"`` (E/EP experts per EP rank), ``"eplb"`` (balanced, with
    ``expert_slots`` redundant replicas per rank) or a placement file (one line of expert ids per EP rank).
    ``overlap``: ``"none"`` (one batch, every layer a serial chain) or ``"two-batch"``: the pass split
    into ``micro_batches`` micro-batches (default 2) whose communication overlaps the other ones'
    compute (DeepSeek-V3 technical report §3.4; SGLang two-batch overlap); docs/workload.md.
    """

    weight_bytes_per_param: float = 1.0
    expert_bytes_per_param: float = 0.5
    num_ranks: int | None = None
    collective_addressing: str = "dims"
    phase: str = field(default="prefill", metadata=constraint(choices=PHASES))
    batch: int | None = field(default=None, metadata=constraint(low=1, high=MAX_DECODE_TOKENS))
    context_tokens: int | None = field(default=None, metadata=constraint(low=0, high=MAX_DECODE_TOKENS))
    decode_steps: int | None = field(default=None, metadata=constraint(low=1, high=MAX_DECODE_STEPS))
    routing: str = field(default="uniform", metadata=constraint(choices=ROUTINGS))
    routing_zipf_exponent: float | None = field(default=None, metadata=constraint(low=0, high=16))
    routing_hot_fraction: float | None = field(default=None, metadata=constraint(low=0, high=1, low_open=True))
    routing_hot_share: float | None = field(default=None, metadata=constraint(low=0, high=1))
    routing_table: str | None = None
    routing_seed: int = field(default=0, metadata=constraint(low=0, high=2**32 - 1))
    expert_placement: str = "contiguous"
    expert_slots: int = field(default=1, metadata=constraint(low=0, high=MAX_EXPERT_SLOTS))
    overlap: str = field(default="none", metadata=constraint(choices=OVERLAPS))
    micro_batches: int | None = field(default=None, metadata=constraint(low=2, high=MAX_MICRO_BATCHES))

    def __post_init__(self) -> None:
        self._check_phase()
        self._check_routing()
        self._check_overlap()
        for name in ("weight_bytes_per_param", "expert_bytes_per_param"):
            value = getattr(self, name)
            if not isinstance(value, int | float) or isinstance(value, bool) or not value > 0:
                raise input_error("workload options", name, f"must be a positive number, got {value!r}")
        if self.num_ranks is not None and (not isinstance(self.num_ranks, int) or self.num_ranks < 1):
            raise input_error(
                "workload options", "num_ranks", f"must be a positive integer, got {self.num_ranks!r}"
            )
        if self.collective_addressing not in COLLECTIVE_ADDRESSING:
            raise input_error(
                "workload options",
                "collective_addressing",
                f"unknown value {self.collective_addressing!r}",
                COLLECTIVE_ADDRESSING,
            )

    @property
    def skewed(self) -> bool:
        """Routing other than uniform (Zipf with exponent 0 is uniform)."""
        return self.routing != "uniform" and not (self.routing == "zipf" and self.routing_zipf_exponent == 0)

    def _check_routing(self) -> None:
        if self.routing not in ROUTINGS:
            raise input_error("workload options", "routing", f"unknown value {self.routing!r}", ROUTINGS)
        for name, (routing, default) in ROUTING_KNOBS.items():
            if getattr(self, name) is not None and routing != self.routing:
                raise input_error("workload options", name, f"applies only with routing={routing}")
            if routing == self.routing and getattr(self, name) is None:
                if default is None:
                    raise input_error("workload options", name, f"routing={routing} needs a file path")
                object.__setattr__(self, name, default)
        if self.expert_placement not in PLACEMENT_RULES and not self.expert_placement.strip():
            raise input_error("workload options", "expert_placement", "is empty", PLACEMENT_RULES)
        if not isinstance(self.expert_slots, int) or not 0 <= self.expert_slots <= MAX_EXPERT_SLOTS:
            raise input_error("workload options", "expert_slots", f"must be an integer in [0, {MAX_EXPERT_SLOTS}]")

    def _check_overlap(self) -> None:
        if self.overlap not in OVERLAPS:
            raise input_error("workload options", "overlap", f"unknown value {self.overlap!r}", OVERLAPS)
        if self.overlap == "none":
            if self.micro_batches is not None:
                raise input_error("workload options", "micro_batches", "applies only with overlap=two-batch")
            return
        if self.micro_batches is None:
            object.__setattr__(self, "micro_batches", 2)
        value = self.micro_batches
        if not isinstance(value, int) or isinstance(value, bool) or not 2 <= value <= MAX_MICRO_BATCHES:
            raise input_error("workload options", "micro_batches",
                              f"must be an integer in [2, {MAX_MICRO_BATCHES}], got {value!r}")
        if self.skewed:
            raise input_error("workload options", "overlap", "two-batch overlap needs uniform routing "
                              f"(routing={self.routing} gives each micro-batch its own routing, not modelled)")

    def _check_phase(self) -> None:
        if self.phase not in PHASES:
            raise input_error("workload options", "phase", f"unknown value {self.phase!r}", PHASES)
        for name, (default, low, high) in DECODE_KNOBS.items():
            value = getattr(self, name)
            if self.phase == "prefill" and value is not None:
                raise input_error("workload options", name, "applies only with phase=decode")
            if self.phase == "decode" and value is None:
                object.__setattr__(self, name, default)  # a decode run states every knob (and hashes so)
            elif value is not None and (not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high):
                raise input_error("workload options", name, f"must be an integer in [{low}, {high}], got {value!r}")
