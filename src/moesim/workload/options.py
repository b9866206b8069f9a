"""The generator's options (``WorkloadOptions``): phase, decode knobs, routing and expert placement, and
the study's defaults (docs/workload.md)."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from pathlib import Path

from moesim.errors import input_error
from moesim.schema import MAX_COUNT, Constraint, Param, check_fields, constraint
from moesim.workload.efficiency import COMPUTE_MODELS
from moesim.workload.mtp import MAX_DRAFT_TOKENS
from moesim.workload.precision import DTYPES, Precision
from moesim.workload.prompts import Prompts, batch_tokens, prompt_batch
from moesim.workload.routing import PLACEMENT_RULES, ROUTINGS, Redundancy

STUDY_TOKENS = 4096
STUDY_STRATEGIES = ("TP2EP16", "TP4EP8", "TP8EP4", "TP16EP2")
STUDY_RANKS = 32

COLLECTIVE_ADDRESSING = ("dims", "groups")
PHASES = ("prefill", "decode")
MAX_DECODE_TOKENS = 10**9
MAX_DECODE_STEPS = 1024
"""Every step is its own copy of the layers in the graph, so the node count grows with the steps."""
TOKENS = Param("tokens", "workload", int, "tokens", Constraint(low=1, high=MAX_DECODE_TOKENS))
"""The prefill length of a run: every message size stays an exact float64 up to 10^9 tokens."""
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
MAX_REDUNDANT_EXPERTS = 2**20
"""The most redundant experts, EPLB groups or nodes (as many as the largest EP degree)."""
OVERLAPS = ("none", "two-batch")
MAX_MICRO_BATCHES = 64
PRECISION_FIELDS = {"expert_dtype": "expert_bytes_per_param", "dense_dtype": "weight_bytes_per_param",
                    "attention_dtype": None, "kv_dtype": None, "dispatch_dtype": None, "combine_dtype": None}
"""Precision option → the weight-width option it replaces when set (None: no weights)."""
MAX_PROMPT_ENTRIES = 4096
"""The most entries of ``prompt_lengths`` (each distinct length is one attention term; counts repeat it)."""


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
    ``routing_draws``: route drawn tokens instead of expected rows: in every MoE layer (and micro-batch) each
    EP rank's tokens each pick k distinct experts at random with the routing's shares, seeded by
    ``routing_seed`` (``routing.draw_layer``), so a step's receivers get unequal rows as real tokens give them.
    ``expert_placement``: ``"contiguous"`` (E/EP experts per EP rank), ``"eplb"`` (balanced, with
    ``expert_slots`` redundant replicas per rank) or a placement file (one line of expert ids per EP rank).
    ``overlap``: ``"none"`` (one batch, every layer a serial chain) or ``"two-batch"``: the pass split
    into ``micro_batches`` micro-batches (default 2) whose communication overlaps the other ones'
    compute (DeepSeek-V3 technical report §3.4; SGLang two-batch overlap); docs/workload.md. Under skewed
    routing or redundant experts each micro-batch routes its own tokens (``generator.PassRouting``).
    ``expert_dtype``, ``dense_dtype``, ``attention_dtype``, ``kv_dtype``, ``dispatch_dtype``,
    ``combine_dtype``: the data type of each operation class (``precision.py``); unset, the class keeps
    the study's model. A set ``expert_dtype`` / ``dense_dtype`` gives its weights the type's width, so
    ``expert_bytes_per_param`` / ``weight_bytes_per_param`` must then stay at their defaults.
    ``mtp_draft_tokens``, ``mtp_acceptance`` (decode only, both or neither): each step drafts k tokens per
    sequence with the MTP module and verifies them with the main model; each draft is accepted with
    probability a once the ones before it were (``mtp.py``). Under skewed routing or redundant experts the
    verification (B·(k + 1) tokens) and each draft (B) route their own tokens (``generator.PassRouting``).
    ``compute_model``: ``"roofline"`` (every compute node at its roofline, the study's model) or
    ``"measured"`` (at its kernels' published efficiencies, ``efficiency.py``).
    ``prompt_lengths``: a prefill over a batch of prompts of these lengths (tokens), each attending only to
    itself (``prompts.py``), instead of one ``tokens``-long sequence; ``prompt_counts`` (same length): how
    many prompts of each length (a histogram; default one each). Every attention group (each DP group of a
    ``DP…EP…`` strategy) carries this batch, so a pass has DP × Σ counts·lengths tokens (``tokens`` unused);
    two-batch overlap splits it into micro-batches of whole prompts (``prompts.split_prompts``).
    ``redundant_experts``: N replicas beyond the E routed experts, (E + N)/EP per EP rank, each expert's
    rows split over its replicas; placed by ``expert_placement`` (``eplb``: DeepSeek's EPLB, ``eplb.py``,
    over ``eplb_groups`` expert groups and ``eplb_nodes`` nodes; ``contiguous``: physical expert p is
    expert p mod E, no balancer). docs/deployments.md, "Redundant experts".
    """

    weight_bytes_per_param: float = field(default=1.0, metadata=constraint(low=0, high=64, low_open=True))
    expert_bytes_per_param: float = field(default=0.5, metadata=constraint(low=0, high=64, low_open=True))
    num_ranks: int | None = field(default=None, metadata=constraint(low=1, high=MAX_COUNT))
    collective_addressing: str = field(default="dims", metadata=constraint(choices=COLLECTIVE_ADDRESSING))
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
    routing_draws: bool = False
    expert_placement: str = field(default="contiguous", metadata={"note": f"{', '.join(PLACEMENT_RULES)} or a "
                                                                          "placement file"})
    expert_slots: int = field(default=1, metadata=constraint(low=0, high=MAX_EXPERT_SLOTS))
    overlap: str = field(default="none", metadata=constraint(choices=OVERLAPS))
    micro_batches: int | None = field(default=None, metadata=constraint(low=2, high=MAX_MICRO_BATCHES))
    expert_dtype: str | None = field(default=None, metadata=constraint(choices=DTYPES))
    dense_dtype: str | None = field(default=None, metadata=constraint(choices=DTYPES))
    attention_dtype: str | None = field(default=None, metadata=constraint(choices=DTYPES))
    kv_dtype: str | None = field(default=None, metadata=constraint(choices=DTYPES))
    dispatch_dtype: str | None = field(default=None, metadata=constraint(choices=DTYPES))
    combine_dtype: str | None = field(default=None, metadata=constraint(choices=DTYPES))
    mtp_draft_tokens: int | None = field(default=None, metadata=constraint(low=1, high=MAX_DRAFT_TOKENS))
    mtp_acceptance: float | None = field(default=None, metadata=constraint(low=0, high=1))
    compute_model: str = field(default="roofline", metadata=constraint(choices=COMPUTE_MODELS))
    prompt_lengths: tuple[int, ...] | None = field(default=None, metadata=constraint(low=1, high=MAX_DECODE_TOKENS))
    prompt_counts: tuple[int, ...] | None = field(default=None, metadata=constraint(low=1, high=MAX_DECODE_TOKENS))
    redundant_experts: int = field(default=0, metadata=constraint(low=0, high=MAX_REDUNDANT_EXPERTS))
    eplb_groups: int = field(default=1, metadata=constraint(low=1, high=MAX_REDUNDANT_EXPERTS))
    eplb_nodes: int = field(default=1, metadata=constraint(low=1, high=MAX_REDUNDANT_EXPERTS))

    def __post_init__(self) -> None:
        check_fields(self, "workload options")
        self._check_phase()
        self._check_routing()
        self._check_overlap()
        self._check_precision()
        self._check_mtp()
        self._check_prompts()

    @property
    def precision(self) -> Precision:
        """The data type of each operation class (None: the study's model of it)."""
        return Precision(self.expert_dtype, self.dense_dtype, self.attention_dtype, self.kv_dtype,
                         self.dispatch_dtype, self.combine_dtype, self.compute_model == "measured")

    def _check_precision(self) -> None:
        defaults = {f.name: f.default for f in fields(self)}
        for name, width in PRECISION_FIELDS.items():
            if width is not None and getattr(self, name) is not None and getattr(self, width) != defaults[width]:
                raise input_error("workload options", width, f"{name}={getattr(self, name)} sets the weight width; "
                                  f"leave {width} at its default {defaults[width]}")

    def _check_mtp(self) -> None:
        for name, other in (("mtp_draft_tokens", "mtp_acceptance"), ("mtp_acceptance", "mtp_draft_tokens")):
            if getattr(self, name) is None:
                continue
            if self.phase != "decode":
                raise input_error("workload options", name, "applies only with phase=decode")
            if getattr(self, other) is None:
                raise input_error("workload options", other, f"{name} needs it too (multi-token prediction takes "
                                  "the draft tokens per step and their acceptance)")

    @property
    def prompts(self) -> Prompts | None:
        """The prefill's batch of prompts as (length, count) pairs; None: one sequence of ``tokens``."""
        return None if self.prompt_lengths is None else prompt_batch(self.prompt_lengths, self.prompt_counts)

    def _check_prompts(self) -> None:
        lengths, counts = self.prompt_lengths, self.prompt_counts
        if lengths is None:
            if counts is not None:
                raise input_error("workload options", "prompt_counts", "applies only with prompt_lengths")
            return
        if self.phase != "prefill":
            raise input_error("workload options", "prompt_lengths", "applies only with phase=prefill")
        if not 1 <= len(lengths) <= MAX_PROMPT_ENTRIES:
            raise input_error("workload options", "prompt_lengths",
                              f"{len(lengths)} entries; give 1 to {MAX_PROMPT_ENTRIES} lengths")
        if counts is not None and len(counts) != len(lengths):
            raise input_error("workload options", "prompt_counts",
                              f"{len(counts)} counts for {len(lengths)} prompt_lengths; give one count per length")
        TOKENS.check(batch_tokens(self.prompts or ()), "workload options: prompt_lengths × prompt_counts", strict=True)

    @property
    def redundancy(self) -> Redundancy:
        """The redundant experts and EPLB's groups and nodes (``routing.Redundancy``)."""
        return Redundancy(self.redundant_experts, self.eplb_groups, self.eplb_nodes)

    @property
    def per_expert(self) -> bool:
        """Rows are routed per expert (``routing.py``): skewed routing, redundant experts, or drawn tokens."""
        return self.skewed or self.redundant_experts > 0 or self.routing_draws

    @property
    def skewed(self) -> bool:
        """Routing other than uniform (Zipf with exponent 0 is uniform)."""
        return self.routing != "uniform" and not (self.routing == "zipf" and self.routing_zipf_exponent == 0)

    def _check_routing(self) -> None:
        for name, (routing, default) in ROUTING_KNOBS.items():
            if getattr(self, name) is not None and routing != self.routing:
                raise input_error("workload options", name, f"applies only with routing={routing}")
            if routing == self.routing and getattr(self, name) is None:
                if default is None:
                    raise input_error("workload options", name, f"routing={routing} needs a file path")
                object.__setattr__(self, name, default)
        if self.redundant_experts and self.expert_slots != 1:
            raise input_error("workload options", "expert_slots", "applies only with redundant_experts=0 "
                              "(redundant_experts gives the replicas in all)")
        for name in ("eplb_groups", "eplb_nodes"):
            if getattr(self, name) != 1 and not (self.redundant_experts and self.expert_placement == "eplb"):
                raise input_error("workload options", name, "applies only with redundant_experts > 0 and "
                                  "expert_placement=eplb")
        if self.expert_placement not in PLACEMENT_RULES and not Path(self.expert_placement).is_file():
            raise input_error("workload options", "expert_placement", f"{self.expert_placement!r} is neither a "
                              "rule nor a file", [*PLACEMENT_RULES, "a placement file"])

    def _check_overlap(self) -> None:
        if self.overlap == "none":
            if self.micro_batches is not None:
                raise input_error("workload options", "micro_batches", "applies only with overlap=two-batch")
            return
        if self.micro_batches is None:
            object.__setattr__(self, "micro_batches", 2)

    def _check_phase(self) -> None:
        for name, (default, _, _) in DECODE_KNOBS.items():
            value = getattr(self, name)
            if self.phase == "prefill" and value is not None:
                raise input_error("workload options", name, "applies only with phase=decode")
            if self.phase == "decode" and value is None:
                object.__setattr__(self, name, default)  # a decode run states every knob (and hashes so)
