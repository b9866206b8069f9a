"""Topology: typed nodes grouped into servers, directed links with bandwidth and delay, and routing.

A full-duplex cable is two directed links. Routes are deterministic shortest paths (hop count, then
propagation delay); among equal-cost paths a per-flow ECMP choice hashes (src, dst, flow id) so
results are reproducible across runs and processes. A route between GPUs on different servers
leaves through the source GPU's NIC affinity and enters through the destination GPU's NIC
(docs/study.md §4); its three segments are GPU → own NIC inside the server, NIC → NIC across the
external fabric (switches only), NIC → GPU inside the destination server. A route between GPUs of
one server stays inside it whenever the server's own links connect them.
"""

from __future__ import annotations

import heapq
import zlib
from dataclasses import dataclass, field, fields, replace
from enum import StrEnum
from functools import cached_property
from typing import TYPE_CHECKING, Any

from moesim.errors import MoesimError

if TYPE_CHECKING:
    import networkx as nx  # imported by to_networkx() only: listings stay fast


class NodeKind(StrEnum):
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
    """One direction of a cable. ``kind``: pcie, upi, p2p (PCIe switch ↔ PCIe switch), fabric, nvlink."""

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


# Path cost = hops · _HOP_PS + Σ delay in picoseconds: integers, so equal-cost paths tie exactly, and
# one hop outweighs the delay of any path shorter than 1000 s (hop count first, then delay).
_HOP_PS = 10**15
_ALL, _SERVER, _FABRIC = "all", "server", "fabric"


@dataclass(frozen=True, eq=False)
class Topology:
    """An immutable cluster description. GPU index i is ``gpus[i]``; ranks map to GPUs via a placement.

    Link ids are indices into ``links``. Routing caches live in the instance and are dropped when it
    is pickled (workers rebuild them on first use).
    """

    name: str
    nodes: tuple[TopoNode, ...]
    links: tuple[Link, ...]
    gpus: tuple[GpuInfo, ...]
    description: str = ""
    meta: tuple[tuple[str, str], ...] = field(default=())

    def __post_init__(self) -> None:
        for i, link in enumerate(self.links):
            if link.id != i:
                raise ValueError(f"topology {self.name}: link id {link.id} at index {i} (ids must be indices)")

    def __getstate__(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}

    # ------------------------------------------------------------------ lookups

    @property
    def num_gpus(self) -> int:
        return len(self.gpus)

    @cached_property
    def node_by_name(self) -> dict[str, TopoNode]:
        return {n.name: n for n in self.nodes}

    @cached_property
    def gpu_index(self) -> dict[str, int]:
        """GPU name → GPU index."""
        return {g.name: i for i, g in enumerate(self.gpus)}

    @cached_property
    def servers(self) -> tuple[int, ...]:
        return tuple(sorted({g.server for g in self.gpus}))

    @property
    def num_servers(self) -> int:
        return len(self.servers)

    def nodes_of_kind(self, kind: NodeKind) -> tuple[TopoNode, ...]:
        return tuple(n for n in self.nodes if n.kind == kind)

    def with_link_bandwidths(self, bandwidth_bps: dict[str, float]) -> Topology:
        """A copy in which every link of the given kinds (pcie, upi, p2p, fabric, nvlink) has a new
        bandwidth; routes do not change (they follow hop count, then delay)."""
        links = tuple(replace(link, bandwidth_bps=bandwidth_bps[link.kind]) if link.kind in bandwidth_bps else link
                      for link in self.links)
        return replace(self, links=links)

    def meta_value(self, key: str, default: str = "") -> str:
        return dict(self.meta).get(key, default)

    def same_server(self, a_gpu: int, b_gpu: int) -> bool:
        return self.gpus[a_gpu].server == self.gpus[b_gpu].server

    @cached_property
    def _link_between(self) -> dict[tuple[str, str], int]:
        return {(link.src, link.dst): link.id for link in self.links}

    def cables(self) -> list[tuple[int, int]]:
        """Full-duplex cables as (forward link id, reverse link id), forward = the lower id."""
        out = []
        for link in self.links:
            back = self._link_between.get((link.dst, link.src))
            if back is None:
                raise MoesimError(f"topology {self.name}: link {link.src} → {link.dst} has no reverse direction")
            if link.id < back:
                out.append((link.id, back))
        return out

    def to_networkx(self) -> nx.DiGraph:
        """A DiGraph with node attributes kind/server and edge attributes id/bandwidth_bps/delay_s/kind."""
        import networkx as nx

        g = nx.DiGraph(name=self.name)
        for n in self.nodes:
            g.add_node(n.name, kind=n.kind.value, server=n.server)
        for link in self.links:
            g.add_edge(link.src, link.dst, id=link.id, bandwidth_bps=link.bandwidth_bps,
                       delay_s=link.delay_s, kind=link.kind)
        return g

    # ------------------------------------------------------------------ routing

    @cached_property
    def _index(self) -> dict[str, int]:
        return {n.name: i for i, n in enumerate(self.nodes)}

    @cached_property
    def _node_server(self) -> tuple[int | None, ...]:
        return tuple(n.server for n in self.nodes)

    @cached_property
    def _adj(self) -> tuple[tuple[tuple[int, int, int], ...], ...]:
        """Node index → ((neighbour index, link id, cost), ...) in link order."""
        out: list[list[tuple[int, int, int]]] = [[] for _ in self.nodes]
        for link in self.links:
            cost = _HOP_PS + round(link.delay_s * 1e12)
            out[self._index[link.src]].append((self._index[link.dst], link.id, cost))
        return tuple(tuple(a) for a in out)

    @cached_property
    def _cache(self) -> dict[str, dict[Any, Any]]:
        return {"routes": {}, "dag": {}, "segments": {}}

    def _dag(self, src: int, scope: str) -> dict[int, list[tuple[int, int]]]:
        """Shortest-path predecessor DAG from node ``src``: reached node → [(previous node, link id)].

        Scopes: ``all`` (whole graph), ``server`` (nodes of ``src``'s server only), ``fabric`` (may
        cross only nodes outside every server, i.e. the external switches).
        """
        key = (src, scope)
        dags = self._cache["dag"]
        if key in dags:
            return dags[key]
        adj, node_server = self._adj, self._node_server
        home = node_server[src]
        dist = {src: 0}
        preds: dict[int, list[tuple[int, int]]] = {src: []}
        heap = [(0, src)]
        while heap:
            d, u = heapq.heappop(heap)
            if d > dist[u]:
                continue
            if scope == _FABRIC and u != src and node_server[u] is not None:
                continue  # a NIC or server device: reachable as an end, never crossed
            for v, lid, cost in adj[u]:
                if scope == _SERVER and node_server[v] != home:
                    continue
                nd = d + cost
                old = dist.get(v)
                if old is None or nd < old:
                    dist[v] = nd
                    preds[v] = [(u, lid)]
                    heapq.heappush(heap, (nd, v))
                elif nd == old:
                    preds[v].append((u, lid))
        dags[key] = preds
        return preds

    def _paths(self, src: int, dst: int, scope: str) -> list[tuple[int, ...]]:
        """All shortest paths (link-id tuples) from node ``src`` to node ``dst`` within ``scope`` (cached:
        GPU → NIC and NIC → NIC segments are shared by many GPU pairs)."""
        key = (src, dst, scope)
        segments = self._cache["segments"]
        if key not in segments:
            segments[key] = self._enumerate(src, dst, scope)
        return segments[key]

    def _enumerate(self, src: int, dst: int, scope: str) -> list[tuple[int, ...]]:
        preds = self._dag(src, scope)
        if dst not in preds:
            return []
        memo: dict[int, list[tuple[int, ...]]] = {src: [()]}

        def walk(v: int) -> list[tuple[int, ...]]:
            if v not in memo:
                memo[v] = [p + (lid,) for u, lid in preds[v] for p in walk(u)]
            return memo[v]

        return sorted(walk(dst))

    def _no_route(self, a: str, b: str, how: str = "") -> MoesimError:
        return MoesimError(f"topology {self.name}: no route from {a} to {b}{how}")

    def routes(self, src_gpu: int, dst_gpu: int) -> list[tuple[int, ...]]:
        """All equal-cost routes (as link-id tuples) from one GPU to another, in a fixed order."""
        key = (src_gpu, dst_gpu)
        cache = self._cache["routes"]
        cached = cache.get(key)
        if cached is not None:
            return cached
        s, d = self.gpus[src_gpu], self.gpus[dst_gpu]
        si, di = self._index[s.name], self._index[d.name]
        if src_gpu == dst_gpu:
            paths: list[tuple[int, ...]] = [()]
        elif s.server == d.server:
            paths = self._paths(si, di, _SERVER) or self._paths(si, di, _ALL)
        elif s.nic is not None and d.nic is not None:
            sn, dn = self._index[s.nic], self._index[d.nic]
            out, across, into = self._paths(si, sn, _SERVER), self._paths(sn, dn, _FABRIC), self._paths(dn, di, _SERVER)
            if not out:
                raise self._no_route(s.name, s.nic, " inside its server")
            if not across:
                raise self._no_route(s.nic, d.nic, " across the fabric")
            if not into:
                raise self._no_route(d.nic, d.name, " inside its server")
            # every segment's paths share one hop count, so this product is already in sorted order
            paths = [a + b + c for a in out for b in across for c in into]
        else:
            paths = self._paths(si, di, _ALL)
        if not paths:
            raise self._no_route(s.name, d.name)
        cache[key] = paths
        return paths

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

    # ------------------------------------------------------------------ validation

    def check_routes(self, source: str = "") -> None:
        """Raise a one-line MoesimError naming a GPU that cannot reach another GPU.

        Checks exactly what ``routes`` needs: all GPUs mutually reachable; each GPU reaches its NIC
        inside its server and back; every NIC reaches every other NIC through the switches alone.
        """
        where = f"{source}: " if source else f"topology {self.name}: "
        if not self.gpus:
            raise MoesimError(f"{where}the topology has no GPU")
        first = self._index[self.gpus[0].name]
        fwd = self._dag(first, _ALL)
        back = self._reaching(first)
        for g in self.gpus[1:]:
            gi = self._index[g.name]
            if gi not in fwd:
                raise MoesimError(f"{where}gpu '{g.name}': no route from gpu '{self.gpus[0].name}' to it")
            if gi not in back:
                raise MoesimError(f"{where}gpu '{g.name}': no route from it to gpu '{self.gpus[0].name}'")
        for g in self.gpus:
            if g.nic is None:
                continue
            gi, ni = self._index[g.name], self._index[g.nic]
            if ni not in self._dag(gi, _SERVER):
                raise MoesimError(f"{where}gpu '{g.name}': no route to its NIC '{g.nic}' inside its server")
            if gi not in self._dag(ni, _SERVER):
                raise MoesimError(f"{where}gpu '{g.name}': no route from its NIC '{g.nic}' inside its server")
        self._check_fabric(where)

    def _reaching(self, dst: int) -> set[int]:
        """Nodes with a path to ``dst`` (reverse breadth-first search)."""
        rev: list[list[int]] = [[] for _ in self.nodes]
        for u, edges in enumerate(self._adj):
            for v, _, _ in edges:
                rev[v].append(u)
        seen, stack = {dst}, [dst]
        while stack:
            for u in rev[stack.pop()]:
                if u not in seen:
                    seen.add(u)
                    stack.append(u)
        return seen

    def _check_fabric(self, where: str) -> None:
        """Every NIC used by a GPU reaches every other such NIC through fabric switches only."""
        used = sorted({self._index[g.nic] for g in self.gpus if g.nic is not None})
        servers = {self._node_server[n] for n in used}
        if len(servers) < 2:
            return
        adj, node_server = self._adj, self._node_server
        into: dict[int, set[int]] = {n: set() for n in used}  # NIC → switches with a link into it
        for u, edges in enumerate(adj):
            for v, _, _ in edges:
                if v in into and node_server[u] is None:
                    into[v].add(u)
        closures: dict[frozenset[int], set[int]] = {}
        for a in used:
            first = frozenset(v for v, _, _ in adj[a] if node_server[v] is None)
            if first not in closures:
                seen, stack = set(first), list(first)
                while stack:
                    for v, _, _ in adj[stack.pop()]:
                        if node_server[v] is None and v not in seen:
                            seen.add(v)
                            stack.append(v)
                closures[first] = seen
            reach = closures[first]
            for b in used:
                if b != a and node_server[b] != node_server[a] and not (into[b] & reach):
                    raise MoesimError(
                        f"{where}nic '{self.nodes[a].name}': no route to nic '{self.nodes[b].name}' "
                        f"through the external switches"
                    )
