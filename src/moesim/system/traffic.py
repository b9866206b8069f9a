"""The static traffic of a workload's collectives under a placement: bytes per link and a balance bound.

Every collective of a layer is turned into the point-to-point volumes its algorithm sends, without timing:
a ring all-reduce sends 2(n−1)/n of the buffer from each member to the next (Patarasuk & Yuan 2009; a
double binary tree moves the same volume per member and is counted as a ring here), a ring reduce-scatter
(n−1)/n of it, a ring all-gather (n−1) times the input, and a direct all-to-all 1/n of the buffer to every
other member (a skewed one: its per-pair sizes). Volumes follow the routes (spread evenly over equal-cost routes). The *balance bound* of a
layer is Σ over its collectives of max over links of bytes / bandwidth: the time those collectives need if
they run one after another and each is limited only by its busiest link. It is cheap and blind to latency,
overlap and congestion control, so it ranks placements for a search and prunes hopeless ones; it is not a
prediction.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from moesim.topology.model import NodeKind, Topology
from moesim.workload.graph import CollectiveType, Node, Workload


def _sends(node: Node, group: tuple[int, ...], rank: int) -> list[tuple[int, float]]:
    """(destination rank, bytes) that ``rank`` sends in collective ``node`` over ``group`` (ring order). A skewed
    all-to-all sends its row of the per-pair matrix (every EP group is taken to route as rank 0's does)."""
    ctype, size_bytes, n = node.collective, node.size_bytes, len(group)
    if n < 2:
        return []
    pos = group.index(rank)
    if node.pair_bytes:
        return [(m, float(node.pair_bytes[pos * n + j])) for j, m in enumerate(group) if m != rank]
    nxt = group[(pos + 1) % n]
    if ctype == CollectiveType.ALL_REDUCE:
        return [(nxt, 2 * (n - 1) / n * size_bytes)]
    if ctype == CollectiveType.REDUCE_SCATTER:
        return [(nxt, (n - 1) / n * size_bytes)]
    if ctype == CollectiveType.ALL_GATHER:
        return [(nxt, (n - 1) * size_bytes)]
    return [(m, size_bytes / n) for m in group if m != rank]


@dataclass(frozen=True)
class Traffic:
    """Bytes per link id for each collective of each distinct layer, and how often each layer occurs."""

    topology: Topology
    layers: tuple[tuple[int, tuple[np.ndarray, ...]], ...]
    """(occurrences, per-collective byte arrays) per distinct layer."""

    @property
    def link_bytes(self) -> np.ndarray:
        """Bytes per link id over the whole workload."""
        total = np.zeros(len(self.topology.links))
        for count, phases in self.layers:
            for phase in phases:
                total += count * phase
        return total

    def bound_s(self) -> float:
        """The balance bound of the whole workload (module docstring), in seconds."""
        bytes_per_s = np.array([link.bandwidth_bps / 8 for link in self.topology.links])
        return float(sum(count * sum(float(np.max(p / bytes_per_s)) for p in phases if p.size)
                         for count, phases in self.layers))

    def nic_bytes(self) -> dict[str, tuple[float, float]]:
        """Per NIC: (bytes it sends into the fabric, bytes it receives from it) over the whole workload."""
        total = self.link_bytes
        kinds = {n.name: n.kind for n in self.topology.nodes}
        out = {n.name: [0.0, 0.0] for n in self.topology.nodes if n.kind == NodeKind.NIC}
        for link in self.topology.links:
            if kinds[link.src] == NodeKind.NIC and kinds[link.dst] != NodeKind.NIC and link.kind == "fabric":
                out[link.src][0] += total[link.id]
            elif kinds[link.dst] == NodeKind.NIC and link.kind == "fabric":
                out[link.dst][1] += total[link.id]
        return {k: (v[0], v[1]) for k, v in out.items()}


class TrafficModel:
    """The sends of a workload's distinct layers, ready to be laid onto a topology under many placements
    (routes are cached by GPU pair across placements). Layers are read from rank 0's graph: the generator's
    workloads are uniform, every rank runs the same collectives."""

    def __init__(self, workload: Workload, topology: Topology) -> None:
        self.topology = topology
        by_layer: dict[int, list[Node]] = {}
        for node in workload.graphs[0].nodes:
            if node.collective is not None:
                by_layer.setdefault(node.layer, []).append(node)
        distinct: dict[tuple[object, ...], tuple[int, list[Node]]] = {}
        for nodes in (by_layer[k] for k in sorted(by_layer)):
            key = tuple((n.collective, n.size_bytes, n.involved_dims, n.group, n.pair_bytes) for n in nodes)
            count, _ = distinct.get(key, (0, nodes))
            distinct[key] = (count + 1, nodes)
        self.layers: list[tuple[int, list[list[tuple[int, int, float]]]]] = []
        for count, nodes in distinct.values():
            phases = []
            for node in nodes:
                assert node.collective is not None
                phases.append([(rank, dst, nbytes) for rank in range(workload.num_ranks)
                               for dst, nbytes in _sends(node, workload.collective_ranks(rank, node), rank)])
            self.layers.append((count, phases))
        self._routes: dict[tuple[int, int], tuple[list[int], float]] = {}

    def _route(self, src_gpu: int, dst_gpu: int) -> tuple[list[int], float]:
        """Link ids of every equal-cost route of a GPU pair (repeated per route) and the share of each."""
        hit = self._routes.get((src_gpu, dst_gpu))
        if hit is None:
            paths = self.topology.routes(src_gpu, dst_gpu)
            hit = self._routes[(src_gpu, dst_gpu)] = ([i for path in paths for i in path], 1.0 / len(paths))
        return hit

    def traffic(self, rank_to_gpu: tuple[int, ...]) -> Traffic:
        """The static traffic with rank r on GPU ``rank_to_gpu[r]``."""
        layers = []
        for count, phases in self.layers:
            arrays = []
            for sends in phases:
                volume = np.zeros(len(self.topology.links))
                for rank, dst, nbytes in sends:
                    links, share = self._route(rank_to_gpu[rank], rank_to_gpu[dst])
                    np.add.at(volume, links, nbytes * share)
                arrays.append(volume)
            layers.append((count, tuple(arrays)))
        return Traffic(self.topology, tuple(layers))


def workload_traffic(workload: Workload, topology: Topology, rank_to_gpu: tuple[int, ...]) -> Traffic:
    """The static traffic of ``workload`` with rank r on GPU ``rank_to_gpu[r]`` (one placement)."""
    return TrafficModel(workload, topology).traffic(rank_to_gpu)
