"""The scheduler's knobs (``SchedulerConfig``), declared once as ``moesim.schema`` fields: the library, the
Python API and ``moesim serve`` take their defaults from here. Kept apart from ``scheduler`` so that reading
them loads nothing heavy (the CLI builds its options from them at import)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from moesim.errors import MoesimError, input_error
from moesim.models.residency import DEFAULT_CAPACITY_BYTES
from moesim.schema import MAX_COUNT, MAX_RATE_BPS, check_fields, default_of, param

if TYPE_CHECKING:
    from moesim.serving.costs import StepCosts
    from moesim.serving.deployment import Replica

MAX_STEP_TOKENS = 10**7
DEFAULT_PROMPT = "lognormal:1024:0.6:8192"
"""Prompt lengths of generated requests (``moesim.serving.requests.parse_length``)."""
DEFAULT_OUTPUT = "lognormal:256:0.6:2048"
"""Output lengths of generated requests."""
PCIE5_X16_BPS = 32e9 * 16 * 128 / 130
"""PCIe 5.0 ×16, one direction: 32 GT/s per lane, 16 lanes, 128b/130b encoding (PCI-SIG, PCIe Base 5.0)."""
ADDED = ("routing", "routing_seed", "dp_ranks", "preemption", "swap_bandwidth_bps", "prefix_hit_rate",
         "mtp_draft_tokens", "mtp_acceptance")
"""Fields a run's id holds only when set (``SchedulerConfig.key``)."""


@dataclass(frozen=True)
class SchedulerConfig:
    """The scheduler's knobs (module docstring). ``kv_tokens`` sets every replica's KV capacity in tokens;
    unset, it is ``memory_fraction`` × ``gpu_memory_bytes`` minus the weights per GPU, over the KV bytes
    of one token per GPU."""

    token_budget: int = param(8192, low=1, high=MAX_STEP_TOKENS)
    """Tokens one step may hold (prefill + decode)."""
    max_seqs: int = param(256, low=1, high=MAX_STEP_TOKENS)
    """Requests running at once on a replica."""
    chunk_tokens: int | None = param(None, low=1, high=MAX_STEP_TOKENS)
    """Chunked prefill: a prompt's tokens per step at most (None: whole prompts)."""
    policy: str = param("decode-first", note="a scheduling policy of moesim.serving.policies (moesim plugins)")
    """Which of decode steps and prefill chunks goes first (``moesim.serving.policies``)."""
    kv_tokens: int | None = param(None, low=1, high=MAX_STEP_TOKENS)
    """KV-cache tokens per replica (None: the memory left after the weights)."""
    gpu_memory_bytes: float = param(float(DEFAULT_CAPACITY_BYTES), low=0, low_open=True, high=MAX_COUNT)
    """Accelerator memory per GPU."""
    memory_fraction: float = param(0.9, low=0, low_open=True, high=1)
    """Share of the memory for weights and KV cache."""
    routing: str = param("least-loaded", note="a routing policy of moesim.serving.routing")
    """Which replica an arriving request joins (``moesim.serving.routing``)."""
    routing_seed: int = param(0, low=0, high=MAX_COUNT)
    """Seed of the ``random`` routing policy."""
    dp_ranks: int = param(1, low=1, high=MAX_COUNT)
    """Data-parallel attention ranks per replica, each with its own queue and KV cache; a step waits for the
    slowest rank."""
    preemption: str | None = param(None, choices=(None, "recompute", "swap"))
    """When a colocated replica's KV cache is full: None reserves every request's whole output at admission
    (never preempts); ``recompute`` or ``swap`` reserve as tokens come and preempt the latest-arrived
    running request (vLLM)."""
    swap_bandwidth_bps: float = param(PCIE5_X16_BPS, low=0, low_open=True, high=MAX_RATE_BPS)
    """Host link of each GPU for swapped KV caches (default PCIe 5.0 ×16: 32 GT/s × 16 lanes × 128/130)."""
    prefix_hit_rate: float = param(0.0, low=0, high=1, high_open=True)
    """Share of every prompt found in the prefix cache (without ``prefix_id`` columns in the trace)."""
    mtp_draft_tokens: int = param(0, low=0, high=64)
    """Multi-token prediction: draft tokens k verified per sequence in each decode step (0: none)."""
    mtp_acceptance: float = param(0.0, low=0, high=1)
    """Multi-token prediction: the probability a ∈ [0, 1] that each draft token is accepted."""

    def __post_init__(self) -> None:
        check_fields(self, "scheduler")
        from moesim.serving.policies import POLICIES  # loads the policies (and numpy): not at import

        if self.policy not in POLICIES.names():
            raise input_error("scheduler", "policy", f"unknown policy {self.policy!r}", POLICIES.names())
        from moesim.serving.routing import ROUTERS

        if self.routing not in ROUTERS.names():
            raise input_error("scheduler", "routing", f"unknown routing policy {self.routing!r}", ROUTERS.names())
        if self.max_seqs > self.token_budget:
            raise input_error("scheduler", "max_seqs", f"{self.max_seqs} sequences need a token budget of at least "
                              f"as many tokens (token_budget {self.token_budget})")

    def key(self) -> dict[str, Any]:
        """The fields as a dict, leaving out the later ones (``ADDED``) at their defaults, so the ids of runs
        that do not set them stay what they were."""
        out = dataclasses.asdict(self)
        for name in ADDED:
            if out[name] == default_of(SchedulerConfig, name):
                del out[name]
        return out

    @property
    def decode_tokens_per_step(self) -> float:
        """Tokens a decoding sequence gains per decode step (``moesim.workload.mtp.tokens_per_step``)."""
        from moesim.workload.mtp import tokens_per_step  # the workload package is heavy; help screens skip it

        return tokens_per_step(self.mtp_draft_tokens, self.mtp_acceptance)

    @property
    def chunked(self) -> bool:
        return self.chunk_tokens is not None

    def kv_capacity(self, replica: Replica, costs: StepCosts) -> int:
        """KV-cache tokens one GPU of a replica holds: the memory left after its weights
        (``moesim.models.residency``, with the replica's redundant experts and data-parallel groups)."""
        if self.kv_tokens is not None:
            return self.kv_tokens
        from moesim.models.residency import model_residency

        model = costs.model
        if model.checkpoint_size_bytes is None:
            raise input_error(f"model {model.key}", "checkpoint_size_bytes", "unknown, so the memory left for the "
                              "KV cache is too; give the cache size (--kv-tokens)")
        # a DP split's every GPU holds the weights outside the routed experts (models.residency)
        redundant = int(dict(replica.kind.run.overrides).get("redundant_experts", 0))
        weights = model_residency(model, ranks=len(replica.gpus), dp_groups=replica.kind.dp_ranks,
                                  redundant_experts=redundant).per_rank_bytes
        free = self.memory_fraction * self.gpu_memory_bytes - weights
        tokens = int(free // costs.kv_bytes_per_token)
        if tokens < 1:
            raise MoesimError(f"replica {replica.kind.strategy} on {replica.kind.topology}: the weights "
                              f"({weights / 1e9:.1f} GB per GPU) leave no room for a KV cache in "
                              f"{self.memory_fraction:g} × {self.gpu_memory_bytes / 1e9:g} GB")
        return tokens
