"""An NVSwitch-style domain: every GPU has one cable to a non-blocking switch node ``nvswitch``.

The cable carries the GPU's whole NVLink bandwidth per direction (e.g. H100 NVLink 4: 18 links,
900 GB/s in total = 450 GB/s = 3600 Gbps per direction; NVIDIA DGX H100 data sheet). The several
NVSwitch chips of a real system are one node with no internal limit; in-network reduction (SHARP)
is not modelled: an all-reduce moves its data through the GPUs as on any other network.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from moesim.topology.builder import CableSpec
from moesim.topology.domains.base import GPU_DOMAINS, GpuDomain
from moesim.topology.model import NodeKind

SWITCH_NAME = "nvswitch"


@GPU_DOMAINS.register("nvswitch", "every GPU on one non-blocking NVSwitch node at the GPU's NVLink bandwidth",
                      "NVIDIA DGX H100 / HGX H100 and GB200 NVL72 data sheets")
@dataclass(frozen=True)
class NvSwitchDomain(GpuDomain):
    """``bandwidth_bps``: each GPU's NVLink bandwidth per direction (its one cable to ``nvswitch``)."""

    kind: ClassVar[str] = "nvswitch"
    bandwidth_bps: float
    delay_s: float

    def devices(self) -> dict[str, NodeKind]:
        return {SWITCH_NAME: NodeKind.NVSWITCH}

    def cables(self, gpus: tuple[str, ...]) -> tuple[CableSpec, ...]:
        return tuple(CableSpec(g, SWITCH_NAME, self.bandwidth_bps, self.delay_s, "nvlink") for g in gpus)

    def describe(self) -> str:
        return f"NVSwitch, {self.bandwidth_bps / 1e9:g} Gbps per GPU and direction"
