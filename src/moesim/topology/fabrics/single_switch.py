"""Every NIC cabled to one external switch (the study's fabric, docs/study.md §4)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from moesim.topology.fabrics.base import FABRICS, Fabric, check_keys
from moesim.topology.model import NodeKind
from moesim.topology.units import format_bandwidth, format_delay, parse_bandwidth_bps, parse_delay_s

if TYPE_CHECKING:
    from moesim.topology.builder import TopologyBuilder


@FABRICS.register("single_switch", "every NIC on one external switch 'sw0'", "docs/study.md §4")
@dataclass(frozen=True)
class SingleSwitch(Fabric):
    """One non-blocking switch ``sw0``; each NIC has one full-duplex cable to it."""

    kind: ClassVar[str] = "single_switch"
    nic_bandwidth_bps: float = 400e9
    nic_delay_s: float | None = None

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], source: str) -> SingleSwitch:
        check_keys(data, ("kind", "nic_bandwidth", "nic_delay"), source, "fabric")
        bw = parse_bandwidth_bps(data.get("nic_bandwidth", 400e9), source, "fabric.nic_bandwidth")
        delay = None
        if data.get("nic_delay") is not None:
            delay = parse_delay_s(data["nic_delay"], source, "fabric.nic_delay")
        return cls(nic_bandwidth_bps=bw, nic_delay_s=delay)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"kind": self.kind, "nic_bandwidth": format_bandwidth(self.nic_bandwidth_bps)}
        if self.nic_delay_s is not None:
            out["nic_delay"] = format_delay(self.nic_delay_s)
        return out

    def attach(self, builder: TopologyBuilder, server_nics: list[list[str]], nic_delay_s: float) -> None:
        delay = nic_delay_s if self.nic_delay_s is None else self.nic_delay_s
        builder.add_node("sw0", NodeKind.SWITCH, None, where="fabric")
        for nics in server_nics:
            for nic in nics:
                builder.add_cable(nic, "sw0", self.nic_bandwidth_bps, delay, "fabric", where="fabric")

    def size(self, num_servers: int, nics_per_server: int) -> tuple[int, int]:
        return 1, num_servers * nics_per_server

    def describe(self) -> str:
        return "one external switch"
