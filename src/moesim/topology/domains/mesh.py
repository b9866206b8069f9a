"""A fully connected GPU mesh: one direct cable per GPU pair (e.g. AMD MI300X: 7 Infinity Fabric links
of 64 GB/s = 512 Gbps per direction per GPU; AMD Instinct MI300X platform data sheet).

A GPU reaches a peer over its one link only: the mesh gives each pair 1/(n−1) of a GPU's total GPU
link bandwidth, unlike an NVSwitch domain where one peer can take all of it.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import combinations
from typing import ClassVar

from moesim.topology.builder import CableSpec
from moesim.topology.domains.base import GPU_DOMAINS, GpuDomain
from moesim.topology.model import NodeKind


@GPU_DOMAINS.register("mesh", "a direct link between every pair of GPUs (full mesh)",
                      "AMD Instinct MI300X platform data sheet")
@dataclass(frozen=True)
class MeshDomain(GpuDomain):
    """``bandwidth_bps``: each GPU–GPU link's bandwidth per direction."""

    kind: ClassVar[str] = "mesh"
    bandwidth_bps: float
    delay_s: float

    def devices(self) -> dict[str, NodeKind]:
        return {}

    def cables(self, gpus: tuple[str, ...]) -> tuple[CableSpec, ...]:
        return tuple(CableSpec(a, b, self.bandwidth_bps, self.delay_s, "nvlink") for a, b in combinations(gpus, 2))

    def describe(self) -> str:
        return f"full GPU mesh, {self.bandwidth_bps / 1e9:g} Gbps per link and direction"
