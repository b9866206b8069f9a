"""Ensemble members: one configuration rerun under what a real cluster does not fix.

A deterministic run is one sample of a configuration whose answer can hang on nanoseconds (ranks in
lockstep or drifted apart, docs/calibration.md). Member 0 is the run as specified (the reference's 1000 B
packets, every rank starting at 0, ECN stream 1). Member k ≥ 1 (override ``ensemble_member=k``) changes three
things a deployment does not control, each from a documented rule so the member is reproducible:

- start skew: rank r starts at a seeded uniform draw in [0, ``START_SKEW_S``) (``jitter_seed`` = k). The scale
  is the launch latency of a CUDA kernel, a few µs (A. Gray, "Getting Started with CUDA Graphs", NVIDIA
  Technical Blog, 2019), which is how far the collectives of ranks released together start apart;
- RDMA payload per packet: ``PAYLOADS_BYTES[(k − 1) % 3]``, the path MTUs that InfiniBand and RoCE fabrics
  run (1024, 2048, 4096 B, among the 256–4096 B the InfiniBand Architecture Specification defines; RoCE keeps
  InfiniBand's transport and MTUs);
- the ECN-marking random stream of the packet backend (``ecn_seed`` = 1 + k).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from moesim.errors import MoesimError
from moesim.system.spec import RunSpec

ENSEMBLE = "ensemble_member"
"""The override (and results column) naming a member; absent on member 0."""
MAX_MEMBERS = 64
"""The most members of one ensemble (each is a whole run)."""
START_SKEW_S = 2e-6
"""The width of the uniform start-time draw of members k ≥ 1 (s)."""
PAYLOADS_BYTES = (1024, 2048, 4096)
"""RDMA payload per packet of members 1, 2, 3, 4, ... in turn (bytes)."""
PERTURBED = ("start_jitter_s", "jitter_seed", "packet_payload_bytes", "ecn_seed")
"""The parameters a member sets: a run that sets one of them itself cannot also be a member."""


@dataclass(frozen=True)
class Member:
    """What member ``index`` changes (member 0 changes nothing)."""

    index: int
    start_skew_s: float
    jitter_seed: int
    payload_bytes: int | None
    ecn_seed: int | None

    def overrides(self, packets: bool) -> dict[str, Any]:
        """The parameter overrides of this member; ``packets``: whether the backend draws ECN marks."""
        if self.index == 0:
            return {}
        out: dict[str, Any] = {"start_jitter_s": self.start_skew_s, "jitter_seed": self.jitter_seed,
                               "packet_payload_bytes": self.payload_bytes}
        if packets:
            out["ecn_seed"] = self.ecn_seed
        return out

    def describe(self) -> str:
        """``member 2: 2048 B packets, 2 µs start skew (seed 2), ECN stream 3`` (member 0: the run as given)."""
        if self.index == 0:
            return "member 0: the run as specified"
        return (f"member {self.index}: {self.payload_bytes} B packets, {self.start_skew_s * 1e6:g} µs start skew "
                f"(seed {self.jitter_seed}), ECN stream {self.ecn_seed}")


def member(index: int) -> Member:
    """Member ``index`` of the ensemble rule (module docstring)."""
    if not 0 <= index < MAX_MEMBERS:
        raise MoesimError(f"{ENSEMBLE}: {index} is out of range (allowed: 0..{MAX_MEMBERS - 1})")
    if index == 0:
        return Member(0, 0.0, 0, None, None)
    return Member(index, START_SKEW_S, index, PAYLOADS_BYTES[(index - 1) % len(PAYLOADS_BYTES)], 1 + index)


def expand(overrides: dict[str, Any], index: int, packets: bool, source: str) -> dict[str, Any]:
    """``overrides`` with member ``index``'s perturbation in place of ``ensemble_member``; a run that also sets a
    perturbed parameter is a one-line error (the member would not be the rule's)."""
    clash = sorted(k for k in PERTURBED if k in overrides)
    if index and clash:
        raise MoesimError(f"{source}: field '{ENSEMBLE}': an ensemble member sets {', '.join(PERTURBED)} itself; "
                          f"drop {', '.join(clash)} or the member")
    return {**overrides, **member(index).overrides(packets)}


def members(spec: RunSpec, count: int) -> list[RunSpec]:
    """The specs of an ensemble of ``count`` members: ``spec`` itself, then members 1..count−1."""
    if not 2 <= count <= MAX_MEMBERS:
        raise MoesimError(f"--ensemble: {count} members (allowed: 2..{MAX_MEMBERS})")
    over = spec.override_dict()
    if ENSEMBLE in over:
        raise MoesimError(f"--ensemble: the run already sets {ENSEMBLE}; give one or the other")
    clash = sorted(k for k in PERTURBED if k in over)
    if clash:
        raise MoesimError(f"--ensemble: the run sets {', '.join(clash)}, which the members vary; drop it")
    return [spec] + [dataclasses.replace(spec, overrides=tuple(sorted({**over, ENSEMBLE: k}.items())))
                     for k in range(1, count)]
