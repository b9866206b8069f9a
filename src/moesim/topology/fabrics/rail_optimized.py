"""A rail-optimized leaf/spine fabric: NIC k of every server is cabled to the leaf of rail k.

GPU k of every server talks to GPU k of every other server through one leaf (NIC → rail-k leaf →
NIC), as in NVIDIA's DGX SuperPOD reference architecture; traffic between different rails climbs
to a spine. Servers are grouped ``servers_per_leaf`` at a time (0: all servers in one group), each
group with one leaf per rail (``rail<k>-leaf<g>``); every leaf is cabled to every spine, each uplink
carrying (leaf's NIC capacity) / (oversubscription × spines) as in ``leaf_spine``. Rail-crossing
traffic is not first moved over the GPU interconnect to the right rail (NCCL's PXN): it takes the
spines.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from moesim.errors import input_error
from moesim.topology.fabrics.base import FABRICS, Fabric
from moesim.topology.fabrics.leaf_spine import two_tier_dict, two_tier_fields
from moesim.topology.model import NodeKind
from moesim.topology.units import BANDWIDTH_RANGE_BPS, BANDWIDTH_RANGE_TEXT

if TYPE_CHECKING:
    from moesim.topology.builder import TopologyBuilder

def leaf_name(rail: int, group: int) -> str:
    return f"rail{rail}-leaf{group}"


@FABRICS.register("rail_optimized", "leaf/spine with NIC k of every server on the leaf of rail k",
                  "NVIDIA DGX SuperPOD reference architecture (rail-optimized compute fabric)")
@dataclass(frozen=True)
class RailOptimized(Fabric):
    """Leaves ``rail<k>-leaf<g>``, spines ``spine0..``; NIC k of server s on ``rail<k>-leaf<s // servers_per_leaf>``."""

    kind: ClassVar[str] = "rail_optimized"
    servers_per_leaf: int = 0
    spines: int = 1
    oversubscription: float = 1.0
    nic_bandwidth_bps: float = 400e9
    nic_delay_s: float | None = None
    uplink_delay_s: float | None = None

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], source: str) -> RailOptimized:
        return cls(**two_tier_fields(data, source, servers_per_leaf=(0, 0)))

    def to_dict(self) -> dict[str, Any]:
        return two_tier_dict(self)

    def group_size(self, num_servers: int) -> int:
        return self.servers_per_leaf or num_servers

    def uplink_bandwidth_bps(self, num_servers: int) -> float:
        """One leaf–spine cable: the leaf's NIC capacity / (oversubscription × spines)."""
        return self.group_size(num_servers) * self.nic_bandwidth_bps / (self.oversubscription * self.spines)

    def attach(self, builder: TopologyBuilder, server_nics: list[list[str]], nic_delay_s: float) -> None:
        nic_delay = nic_delay_s if self.nic_delay_s is None else self.nic_delay_s
        up_delay = nic_delay if self.uplink_delay_s is None else self.uplink_delay_s
        rails = max((len(n) for n in server_nics), default=0)
        if rails == 0:
            raise input_error(builder.source, "fabric", "rail_optimized needs servers with at least one NIC")
        per = self.group_size(len(server_nics))
        groups = -(-len(server_nics) // per)
        uplink = self.uplink_bandwidth_bps(len(server_nics))
        if not BANDWIDTH_RANGE_BPS[0] <= uplink <= BANDWIDTH_RANGE_BPS[1]:
            raise input_error(builder.source, "fabric", f"leaf–spine uplink bandwidth {uplink!r} bit/s (servers_per_leaf "
                              "× nic_bandwidth / (oversubscription × spines)) is out of range", [BANDWIDTH_RANGE_TEXT])
        leaves = [leaf_name(k, g) for g in range(groups) for k in range(rails)]
        for leaf in leaves:
            builder.add_node(leaf, NodeKind.SWITCH, None, where="fabric")
        for spine in range(self.spines):
            builder.add_node(f"spine{spine}", NodeKind.SWITCH, None, where="fabric")
        for server, nics in enumerate(server_nics):
            for rail, nic in enumerate(nics):
                builder.add_cable(nic, leaf_name(rail, server // per), self.nic_bandwidth_bps, nic_delay, "fabric",
                                  where="fabric")
        for leaf in leaves:
            for spine in range(self.spines):
                builder.add_cable(leaf, f"spine{spine}", uplink, up_delay, "fabric", where="fabric")

    def size(self, num_servers: int, nics_per_server: int) -> tuple[int, int]:
        leaves = -(-num_servers // self.group_size(num_servers)) * nics_per_server
        return leaves + self.spines, num_servers * nics_per_server + leaves * self.spines

    def describe(self) -> str:
        per = f"{self.servers_per_leaf} servers per leaf" if self.servers_per_leaf else "one leaf per rail"
        return f"rail-optimized leaf/spine, {per}, {self.spines} spines, {self.oversubscription:g}:1"
