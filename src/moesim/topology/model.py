"""Topology: typed nodes grouped into servers, directed links with bandwidth and delay, and routing.

A full-duplex cable is two directed links. Routes are deterministic shortest paths (hop count, then
propagation delay); among equal-cost paths a per-flow ECMP choice hashes (src, dst, flow id) so
results are reproducible across runs and processes. A route between GPUs on different servers
leaves through the source GPU's NIC affinity and enters through the destination GPU's NIC.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass, field
from enum import Enum
from functools import cached_property

import networkx as nx

from moesim.errors import MoesimError


class NodeKind(str, Enum):
    GPU = "gpu"
    CPU = "cpu"
    PCIE_SWITCH = "pcie_switch"
    NIC = "nic"
    SWITCH = "switch"


@dataclass(frozen=True)
class TopoNode:
    """A device. ``server`` is None for fabric switches outside any server."""

    name: str
    kind: NodeKind
    server: int | None = None


@dataclass(frozen=True)
class Link:
    """One direction of a cable."""

    id: int
    src: str
    dst: str
    bandwidth_bps: float
    delay_s: float
    kind: str = ""


@dataclass(frozen=True)
class GpuInfo:
    """Where a GPU sits: its server, CPU, PCIe switch (if any) and the NIC it uses (None: no NIC)."""

    name: str
    server: int
    cpu: str | None
    pcie_switch: str | None
    nic: str | None


@dataclass(frozen=True, eq=False)
class Topology:
    """An immutable cluster description. GPU index i is ``gpus[i]``; ranks map to GPUs via a placement."""

    name: str
    nodes: tuple[TopoNode, ...]
    links: tuple[Link, ...]
    gpus: tuple[GpuInfo, ...]
    description: str = ""
    meta: tuple[tuple[str, str], ...] = field(default=())

    @property
    def num_gpus(self) -> int:
        return len(self.gpus)

    @cached_property
    def node_by_name(self) -> dict[str, TopoNode]:
        return {n.name: n for n in self.nodes}

    @cached_property
    def servers(self) -> tuple[int, ...]:
        return tuple(sorted({g.server for g in self.gpus}))

    @cached_property
    def _graph(self) -> nx.DiGraph:
        g = nx.DiGraph()
        for n in self.nodes:
            g.add_node(n.name)
        for link in self.links:
            # hop count dominates; propagation delay (≪ 1 s) breaks ties between equal hop counts
            g.add_edge(link.src, link.dst, weight=1.0 + link.delay_s, link=link.id)
        return g

    @cached_property
    def _link_between(self) -> dict[tuple[str, str], int]:
        return {(link.src, link.dst): link.id for link in self.links}

    def same_server(self, a_gpu: int, b_gpu: int) -> bool:
        return self.gpus[a_gpu].server == self.gpus[b_gpu].server

    def _shortest(self, a: str, b: str) -> list[list[str]]:
        try:
            paths = list(nx.all_shortest_paths(self._graph, a, b, weight="weight"))
        except nx.NetworkXNoPath:
            raise MoesimError(f"topology {self.name}: no route from {a} to {b}") from None
        return sorted(paths)

    @cached_property
    def _route_cache(self) -> dict[tuple[int, int], list[tuple[int, ...]]]:
        return {}

    def routes(self, src_gpu: int, dst_gpu: int) -> list[tuple[int, ...]]:
        """All equal-cost routes (as link-id tuples) from one GPU to another, in a fixed order."""
        key = (src_gpu, dst_gpu)
        cached = self._route_cache.get(key)
        if cached is not None:
            return cached
        s, d = self.gpus[src_gpu], self.gpus[dst_gpu]
        if s.server == d.server or s.nic is None or d.nic is None:
            node_paths = self._shortest(s.name, d.name)
        else:
            node_paths = [
                a + b[1:] + c[1:]
                for a in self._shortest(s.name, s.nic)
                for b in self._shortest(s.nic, d.nic)
                for c in self._shortest(d.nic, d.name)
            ]
        link_paths = [tuple(self._link_between[(u, v)] for u, v in zip(p, p[1:], strict=False)) for p in node_paths]
        self._route_cache[key] = link_paths
        return link_paths

    def route(self, src_gpu: int, dst_gpu: int, flow_id: int = 0) -> tuple[int, ...]:
        """The directed links a flow from ``src_gpu`` to ``dst_gpu`` crosses (ECMP by a stable hash)."""
        if src_gpu == dst_gpu:
            return ()
        options = self.routes(src_gpu, dst_gpu)
        if len(options) == 1:
            return options[0]
        h = zlib.crc32(f"{src_gpu}:{dst_gpu}:{flow_id}".encode())
        return options[h % len(options)]

    def reverse_route(self, route: tuple[int, ...]) -> tuple[int, ...]:
        """The links of the same cables in the opposite direction (the path ACKs take)."""
        return tuple(self._link_between[(self.links[i].dst, self.links[i].src)] for i in reversed(route))
