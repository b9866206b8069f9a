"""No external network: a single server, or servers joined by their own links (docs/study.md §4, topology 6)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from moesim.topology.fabrics.base import FABRICS, Fabric, check_keys

if TYPE_CHECKING:
    from moesim.topology.builder import TopologyBuilder


@FABRICS.register("none", "no external network", "docs/study.md §4, topology 6")
@dataclass(frozen=True)
class NoFabric(Fabric):
    """Adds nothing."""

    kind: ClassVar[str] = "none"

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], source: str) -> NoFabric:
        check_keys(data, ("kind",), source, "fabric")
        return cls()

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind}

    def attach(self, builder: TopologyBuilder, server_nics: list[list[str]], nic_delay_s: float) -> None:
        return None

    def size(self, num_servers: int, nics_per_server: int) -> tuple[int, int]:
        return 0, 0

    def describe(self) -> str:
        return "no external network"
