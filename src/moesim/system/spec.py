"""RunSpec and RunResult: one simulation run as data (docs/architecture.md, "One run, as data")."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

ALGORITHMS = {
    # collective combination → (TP all-reduce implementation, EP all-to-all implementation)
    "ring_direct": ("ring", "direct"),
    "dbt_direct": ("doubleBinaryTree", "direct"),
}


@dataclass(frozen=True)
class RunSpec:
    """The factors of one run. ``overrides`` holds any parameter override as sorted (name, value) pairs.

    Override names: network parameters (see ``moesim.network.params.NetworkParams``), the system
    settings ``tokens``, ``dataset_splits``, ``active_chunks``, ``endpoint_delay_s``, ``peak_flops``,
    ``mem_bw_bytes_per_s``, ``scheduling_policy``, ``fast_forward``, ``fast_forward_tolerance``,
    ``start_jitter_s``, ``jitter_seed``, and
    the bandwidth of every link of one kind: ``pcie_bandwidth_bps``, ``upi_bandwidth_bps``,
    ``p2p_bandwidth_bps``, ``fabric_bandwidth_bps``, ``nvlink_bandwidth_bps``.
    """

    model: str
    topology: str
    strategy: str
    algorithm: str = "ring_direct"
    network: str = "ib_cc0"
    backend: str = "fluid"
    overrides: tuple[tuple[str, Any], ...] = ()

    def override_dict(self) -> dict[str, Any]:
        return dict(self.overrides)

    def key(self) -> str:
        """A canonical JSON string of the spec (stable across processes)."""
        return json.dumps(asdict(self), sort_keys=True, default=str)




def algorithm_help() -> str:
    """Each combination of ``ALGORITHMS`` with the implementations it names, for option help texts."""
    return " | ".join(f"{name} (TP all-reduce {tp}, EP all-to-all {ep})" for name, (tp, ep) in ALGORITHMS.items())


@dataclass(frozen=True)
class RankTimes:
    """Per-rank figures as ASTRA-sim reports them (B.7): wall = last node end, GPU/comm = unions of intervals."""

    wall_s: float
    gpu_s: float
    comm_s: float

    @property
    def exposed_comm_s(self) -> float:
        """Communication not hidden by compute: wall − GPU time. A rank never idles while a node is ready,
        so every moment its GPU does not compute it waits on a collective (or on its start offset,
        ``start_jitter_s``); with ``comm_sms`` the time by which overlapped compute ran slower counts too."""
        return max(self.wall_s - self.gpu_s, 0.0)


@dataclass(frozen=True)
class RunResult:
    """The outcome of one run; the run's figures are those of the bottleneck (last-finishing) rank."""

    spec: RunSpec
    ranks: tuple[RankTimes, ...]
    bottleneck_rank: int
    backend: str
    cc_model: str
    cc_policy: str
    version: str
    parameters: dict[str, Any] = field(default_factory=dict)
    diagnostics: dict[str, Any] = field(default_factory=dict, compare=False)
    sim_wallclock_s: float = field(default=0.0, compare=False)
    breakdown: Any = field(default=None, compare=False)
    """The run's breakdown as an Arrow table (``moesim.system.breakdown``), when it was recorded."""

    @property
    def wall_s(self) -> float:
        return self.ranks[self.bottleneck_rank].wall_s

    @property
    def gpu_s(self) -> float:
        return self.ranks[self.bottleneck_rank].gpu_s

    @property
    def comm_s(self) -> float:
        return self.ranks[self.bottleneck_rank].comm_s

    @property
    def exposed_comm_s(self) -> float:
        return self.ranks[self.bottleneck_rank].exposed_comm_s

    def summary(self) -> dict[str, Any]:
        """One flat JSON-able record (the results-store row, without diagnostics)."""
        from moesim.workload.layout import ParallelLayout

        layout = ParallelLayout.parse(self.spec.strategy)
        record = {
            "model": self.spec.model,
            "topology": self.spec.topology,
            "strategy": self.spec.strategy,
            "tp": layout.tp,
            "ep": layout.ep,
            "algorithm": self.spec.algorithm,
            "network": self.spec.network,
            "backend": self.backend,
            "cc_model": self.cc_model,
            "cc_policy": self.cc_policy,
            "wall_s": self.wall_s,
            "gpu_s": self.gpu_s,
            "comm_s": self.comm_s,
            "exposed_comm_s": self.exposed_comm_s,
            "bottleneck_rank": self.bottleneck_rank,
            "overrides": dict(self.spec.overrides),
            "parameters": self.parameters,
            "version": self.version,
        }
        decode = self.parameters.get("decode")
        if decode:  # decode runs only: prefill records keep their keys
            record["step_s"] = self.wall_s / decode["decode_steps"]
            record["tokens_per_s"] = decode_output_tokens(decode) / self.wall_s
        routing = self.parameters.get("routing")
        if routing:  # skewed routing only
            record["ep_imbalance"] = routing["ep_imbalance"]
            record["ep_imbalance_before"] = routing["ep_imbalance_before"]
        return record


def decode_output_tokens(decode: Mapping[str, Any]) -> float:
    """Tokens a decode run yields (its ``parameters.decode``): batch × steps × the expected tokens per step
    (more than 1 with multi-token prediction, ``moesim.workload.mtp``)."""
    return float(decode["batch"] * decode["decode_steps"] * decode.get("tokens_per_step", 1))
