"""A two-tier leaf/spine (folded Clos) fabric with configurable oversubscription.

Servers are assigned to leaves in order, ``servers_per_leaf`` each; every leaf is cabled to every
spine. Each leaf-spine cable carries (leaf's NIC capacity) / (oversubscription × spines), where the
leaf's NIC capacity = servers_per_leaf × NICs per server × NIC bandwidth, so oversubscription 1 is
non-blocking and 2 halves the uplink capacity. Equal-cost paths over the spines are spread by ECMP.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from moesim.errors import input_error
from moesim.topology.fabrics.base import FABRICS, Fabric, check_keys
from moesim.topology.model import NodeKind
from moesim.topology.units import (
    BANDWIDTH_RANGE_BPS,
    BANDWIDTH_RANGE_TEXT,
    format_bandwidth,
    format_delay,
    parse_bandwidth_bps,
    parse_delay_s,
)

if TYPE_CHECKING:
    from moesim.topology.builder import TopologyBuilder

_KEYS = ("kind", "servers_per_leaf", "spines", "oversubscription", "nic_bandwidth", "nic_delay", "uplink_delay")
MAX_OVERSUBSCRIPTION = 1000.0


def _count(data: Mapping[str, Any], key: str, default: int | None, minimum: int, source: str) -> int:
    value = data.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise input_error(source, f"fabric.{key}", f"must be an integer ≥ {minimum}, got {value!r}")
    return value


def two_tier_fields(data: Mapping[str, Any], source: str, servers_per_leaf: tuple[int | None, int]) -> dict[str, Any]:
    """The fields shared by the two-tier fabrics, parsed and checked from YAML ``data``;
    ``servers_per_leaf`` = (default, minimum)."""
    check_keys(data, _KEYS, source, "fabric")
    over = data.get("oversubscription", 1.0)
    if isinstance(over, bool) or not isinstance(over, int | float) or not 1 <= over <= MAX_OVERSUBSCRIPTION:
        raise input_error(source, "fabric.oversubscription", f"must be a number from 1 to "
                          f"{MAX_OVERSUBSCRIPTION:g}, got {over!r}")
    delays = {key: parse_delay_s(data[key], source, f"fabric.{key}")
              for key in ("nic_delay", "uplink_delay") if data.get(key) is not None}
    return {"servers_per_leaf": _count(data, "servers_per_leaf", *servers_per_leaf, source),
            "spines": _count(data, "spines", 1, 1, source), "oversubscription": float(over),
            "nic_bandwidth_bps": parse_bandwidth_bps(data.get("nic_bandwidth", 400e9), source, "fabric.nic_bandwidth"),
            "nic_delay_s": delays.get("nic_delay"), "uplink_delay_s": delays.get("uplink_delay")}


def two_tier_dict(fabric: Any) -> dict[str, Any]:
    """A two-tier fabric as YAML data (the inverse of ``two_tier_fields``)."""
    out: dict[str, Any] = {"kind": fabric.kind, "servers_per_leaf": fabric.servers_per_leaf, "spines": fabric.spines,
                           "oversubscription": fabric.oversubscription,
                           "nic_bandwidth": format_bandwidth(fabric.nic_bandwidth_bps)}
    if fabric.nic_delay_s is not None:
        out["nic_delay"] = format_delay(fabric.nic_delay_s)
    if fabric.uplink_delay_s is not None:
        out["uplink_delay"] = format_delay(fabric.uplink_delay_s)
    return out


@FABRICS.register("leaf_spine", "two-tier leaf/spine with configurable oversubscription", "folded Clos, ECMP")
@dataclass(frozen=True)
class LeafSpine(Fabric):
    """Leaves ``leaf0..``, spines ``spine0..``; NICs on their server's leaf."""

    kind: ClassVar[str] = "leaf_spine"
    servers_per_leaf: int = 1
    spines: int = 1
    oversubscription: float = 1.0
    nic_bandwidth_bps: float = 400e9
    nic_delay_s: float | None = None
    uplink_delay_s: float | None = None

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], source: str) -> LeafSpine:
        return cls(**two_tier_fields(data, source, servers_per_leaf=(None, 1)))

    def to_dict(self) -> dict[str, Any]:
        return two_tier_dict(self)

    def uplink_bandwidth_bps(self, nics_per_server: int) -> float:
        capacity = self.servers_per_leaf * nics_per_server * self.nic_bandwidth_bps
        return capacity / (self.oversubscription * self.spines)

    def attach(self, builder: TopologyBuilder, server_nics: list[list[str]], nic_delay_s: float) -> None:
        nic_delay = nic_delay_s if self.nic_delay_s is None else self.nic_delay_s
        up_delay = nic_delay if self.uplink_delay_s is None else self.uplink_delay_s
        num_leaves = -(-len(server_nics) // self.servers_per_leaf)
        for leaf in range(num_leaves):
            builder.add_node(f"leaf{leaf}", NodeKind.SWITCH, None, where="fabric")
        for spine in range(self.spines):
            builder.add_node(f"spine{spine}", NodeKind.SWITCH, None, where="fabric")
        for server, nics in enumerate(server_nics):
            for nic in nics:
                builder.add_cable(nic, f"leaf{server // self.servers_per_leaf}", self.nic_bandwidth_bps, nic_delay, "fabric", where="fabric")
        uplink = self.uplink_bandwidth_bps(max((len(n) for n in server_nics), default=0))
        if uplink <= 0:
            raise input_error(builder.source, "fabric", "leaf_spine needs servers with at least one NIC")
        if not BANDWIDTH_RANGE_BPS[0] <= uplink <= BANDWIDTH_RANGE_BPS[1]:
            raise input_error(builder.source, "fabric", f"leaf–spine uplink bandwidth {uplink!r} bit/s (servers_per_leaf × "
                              "NICs per server × nic_bandwidth / (oversubscription × spines)) is out of range",
                              [BANDWIDTH_RANGE_TEXT])
        for leaf in range(num_leaves):
            for spine in range(self.spines):
                builder.add_cable(f"leaf{leaf}", f"spine{spine}", uplink, up_delay, "fabric", where="fabric")

    def size(self, num_servers: int, nics_per_server: int) -> tuple[int, int]:
        leaves = -(-num_servers // self.servers_per_leaf)
        return leaves + self.spines, num_servers * nics_per_server + leaves * self.spines

    def describe(self) -> str:
        return f"leaf/spine, {self.servers_per_leaf} servers per leaf, {self.spines} spines, {self.oversubscription:g}:1"
