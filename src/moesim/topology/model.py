"""Topology: typed nodes grouped into servers, directed links with bandwidth and delay, and routing.

A full-duplex cable is two directed links. Routes are deterministic shortest paths (hop count, then
propagation delay); among equal-cost paths a per-flow ECMP choice hashes (src, dst, flow id) so
results are reproducible across runs and processes. A route between GPUs on different servers
leaves through the source GPU's NIC affinity and enters through the destination GPU's NIC
(docs/study.md §4); its three segments are GPU → own NIC inside the server, NIC → NIC across the
external fabric (switches only), NIC → GPU inside the destination server. A route between GPUs of
one server takes the server's GPU interconnect (``nvlink`` links: NVLink/NVSwitch, Infinity Fabric)
when it joins them, else stays on the server's own links whenever they connect the two GPUs.
"""

from __future__ import annotations

import heapq
import zlib
from collections import defaultdict
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
    NVSWITCH = "nvswitch"  # a GPU interconnect switch inside a server (domains/nvswitch.py)


@dataclass(frozen=True, slots=True)
class TopoNode:
    """A device. ``server`` is None for fabric switches outside any server."""

    name: str
    kind: NodeKind
    server: int | None = None


@dataclass(frozen=True, slots=True)
class Link:
    """One direction of a cable. ``kind``: pcie, upi, p2p (PCIe switch ↔ PCIe switch), fabric, nvlink."""

    id: int
    src: str
    dst: str
    bandwidth_bps: float
    delay_s: float
    kind: str = ""


@dataclass(frozen=True, slots=True)
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
_ALL, _SERVER, _FABRIC, _NVLINK = "all", "server", "fabric", "nvlink"
# Shortest-path DAGs kept in the cache: at least this many entries, or a few per node; the oldest DAGs are
# dropped beyond that, so memory stays linear in the topology's size (routes never depend on the cache).
_DAG_CACHE_MIN_ENTRIES = 100_000
_DAG_CACHE_ENTRIES_PER_NODE = 4

Edges = tuple[tuple[tuple[int, int, int], ...], ...]


def ecmp_seed(src_gpu: int, dst_gpu: int) -> int:
    """The ECMP hash's CRC-32 over the pair's part of the key (``"src:dst:"``), the seed ``ecmp_index`` continues
    from: a caller that picks routes for many flows of one pair hashes the pair once."""
    return zlib.crc32(f"{src_gpu}:{dst_gpu}:".encode())


def ecmp_index(seed: int, flow_id: int, n_options: int) -> int:
    """Which of a pair's ``n_options`` equal-cost routes flow ``flow_id`` takes: CRC-32 of ``"src:dst:flow_id"``
    (continued from the pair's ``ecmp_seed``, the same value as hashing the whole key) modulo the count."""
    return zlib.crc32(str(flow_id).encode(), seed) % n_options


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
    def _adj(self) -> Edges:
        """Node index → ((neighbour index, link id, cost), ...) in link order."""
        out: list[list[tuple[int, int, int]]] = [[] for _ in self.nodes]
        for link in self.links:
            cost = _HOP_PS + round(link.delay_s * 1e12)
            out[self._index[link.src]].append((self._index[link.dst], link.id, cost))
        return tuple(tuple(a) for a in out)

    @cached_property
    def _nvlink_adj(self) -> Edges:
        """``_adj`` restricted to ``nvlink`` links (empty tuples when the topology has none)."""
        kinds = [link.kind == "nvlink" for link in self.links]
        return tuple(tuple(e for e in edges if kinds[e[1]]) for edges in self._adj)

    @cached_property
    def _has_nvlink(self) -> bool:
        return any(link.kind == "nvlink" for link in self.links)

    @cached_property
    def _radj(self) -> Edges:
        """Node index → ((predecessor index, link id, cost), ...): the links into each node."""
        out: list[list[tuple[int, int, int]]] = [[] for _ in self.nodes]
        for u, edges in enumerate(self._adj):
            for v, lid, cost in edges:
                out[v].append((u, lid, cost))
        return tuple(tuple(a) for a in out)

    @cached_property
    def _cache(self) -> dict[str, Any]:
        return {"routes": {}, "dag": {}, "segments": {}, "dag_entries": [0]}

    def _dag(self, src: int, scope: str) -> dict[int, tuple[tuple[int, int], ...]]:
        """Shortest-path predecessor DAG from node ``src``: reached node → ((previous node, link id), ...).

        Scopes: ``all`` (whole graph), ``server`` (nodes of ``src``'s server only), ``nvlink`` (``nvlink``
        links between nodes of ``src``'s server only). Cached as tuples of
        ints, which the garbage collector stops scanning: many cached DAGs then cost it nothing.
        """
        key = (src, scope)
        dags = self._cache["dag"]
        if key in dags:
            return dags[key]
        adj, node_server = (self._nvlink_adj if scope == _NVLINK else self._adj), self._node_server
        home = node_server[src]
        local = scope in (_SERVER, _NVLINK)
        dist = {src: 0}
        preds: dict[int, list[tuple[int, int]]] = {src: []}
        heap = [(0, src)]
        while heap:
            d, u = heapq.heappop(heap)
            if d > dist[u]:
                continue
            for v, lid, cost in adj[u]:
                if local and node_server[v] != home:
                    continue
                nd = d + cost
                old = dist.get(v)
                if old is None or nd < old:
                    dist[v] = nd
                    preds[v] = [(u, lid)]
                    heapq.heappush(heap, (nd, v))
                elif nd == old:
                    preds[v].append((u, lid))
        dag = {v: tuple(p) for v, p in preds.items()}
        self._remember_dag(key, dag)
        return dag

    def _remember_dag(self, key: tuple[int, str], preds: dict[int, tuple[tuple[int, int], ...]]) -> None:
        """Cache a DAG, dropping the oldest ones once the cache exceeds its entry budget."""
        dags, entries = self._cache["dag"], self._cache["dag_entries"]
        budget = max(_DAG_CACHE_MIN_ENTRIES, _DAG_CACHE_ENTRIES_PER_NODE * len(self.nodes))
        dags[key] = preds
        entries[0] += len(preds)
        while entries[0] > budget and len(dags) > 1:
            entries[0] -= len(dags.pop(next(iter(dags))))

    def _paths(self, src: int, dst: int, scope: str) -> tuple[tuple[int, ...], ...]:
        """All shortest paths (link-id tuples) from node ``src`` to node ``dst`` within ``scope`` (cached:
        GPU → NIC and NIC → NIC segments are shared by many GPU pairs)."""
        key = (src, dst, scope)
        segments = self._cache["segments"]
        if key not in segments:
            found = self._fabric_paths(src, dst) if scope == _FABRIC else self._enumerate(src, dst, scope)
            segments[key] = tuple(found)
        return segments[key]

    def _enumerate(self, src: int, dst: int, scope: str) -> list[tuple[int, ...]]:
        preds = self._dag(src, scope)
        if dst not in preds:
            return []
        return sorted(_walk(dst, preds, {src: [()]}))

    def _fabric_paths(self, src: int, dst: int) -> list[tuple[int, ...]]:
        """All least-cost paths from NIC ``src`` to NIC ``dst`` crossing only nodes outside every server.

        A bidirectional breadth-first search by hop count (Pohl, "Bi-directional search", Machine
        Intelligence 6, 1971) grows, layer by layer, whichever side has fewer links to read, and stops at
        the first layer where the sides meet: a query reads the switches near the two NICs, not the whole
        fabric. Among the fewest-hop paths it keeps those of least total delay, which is the least-cost
        set under hops · _HOP_PS + Σ delay, since one hop outweighs any path delay below 1000 s.
        """
        if src == dst:
            return [()]
        adj, radj, node_server = self._adj, self._radj, self._node_server
        fwd: dict[int, list[tuple[int, int, int]]] = {src: []}   # node → [(previous node, link, cost)]
        back: dict[int, list[tuple[int, int, int]]] = {dst: []}  # node → [(next node, link, cost)]
        f_front, b_front = [src], [dst]
        meet: list[int] = []
        while not meet and f_front and b_front:
            if sum(len(adj[u]) for u in f_front) <= sum(len(radj[v]) for v in b_front):
                f_front = _next_layer(f_front, adj, fwd, dst, node_server)
                meet = [v for v in f_front if v in back]
            else:
                b_front = _next_layer(b_front, radj, back, src, node_server)
                meet = [v for v in b_front if v in fwd]
        if not meet:
            return []
        # Every fewest-hop path crosses the meeting layer once; split it there into a head and a tail.
        f_cost, b_cost = {src: 0}, {dst: 0}
        best = min(_least_cost(v, fwd, f_cost) + _least_cost(v, back, b_cost) for v in meet)
        heads: dict[int, list[tuple[int, ...]]] = {src: [()]}
        tails: dict[int, list[tuple[int, ...]]] = {dst: [()]}
        return sorted(h + t for v in meet if f_cost[v] + b_cost[v] == best
                      for h in _heads(v, fwd, f_cost, heads) for t in _tails(v, back, b_cost, tails))

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
            paths = list((self._has_nvlink and self._paths(si, di, _NVLINK)) or self._paths(si, di, _SERVER)
                         or self._paths(si, di, _ALL))
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
            paths = list(self._paths(si, di, _ALL))
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
        return options[ecmp_index(ecmp_seed(src_gpu, dst_gpu), flow_id, len(options))]

    def reverse_route(self, route: tuple[int, ...]) -> tuple[int, ...]:
        """The links of the same cables in the opposite direction (the path ACKs take)."""
        return tuple(self._link_between[(self.links[i].dst, self.links[i].src)] for i in reversed(route))

    # ------------------------------------------------------------------ validation

    def check_routes(self, source: str = "") -> None:
        """Raise a one-line MoesimError naming a GPU that cannot reach another GPU.

        Checks exactly what ``routes`` needs: all GPUs mutually reachable; each GPU reaches its NIC
        inside its server and back; every NIC reaches every other NIC through the switches alone.
        Linear in links: graph searches from one GPU and from each NIC, none per pair.
        """
        where = f"{source}: " if source else f"topology {self.name}: "
        if not self.gpus:
            raise MoesimError(f"{where}the topology has no GPU")
        first = self._index[self.gpus[0].name]
        fwd, back = self._reach(first, self._adj), self._reach(first, self._radj)
        for g in self.gpus[1:]:
            gi = self._index[g.name]
            if gi not in fwd:
                raise MoesimError(f"{where}gpu '{g.name}': no route from gpu '{self.gpus[0].name}' to it")
            if gi not in back:
                raise MoesimError(f"{where}gpu '{g.name}': no route from it to gpu '{self.gpus[0].name}'")
        nic_reach: dict[int, tuple[set[int], set[int]]] = {}  # NIC → (nodes reaching it, nodes it reaches)
        for g in self.gpus:
            if g.nic is None:
                continue
            gi, ni = self._index[g.name], self._index[g.nic]
            if ni not in nic_reach:
                nic_reach[ni] = (self._reach(ni, self._radj, inside_server=True),
                                 self._reach(ni, self._adj, inside_server=True))
            into, out_of = nic_reach[ni]
            if gi not in into:
                raise MoesimError(f"{where}gpu '{g.name}': no route to its NIC '{g.nic}' inside its server")
            if gi not in out_of:
                raise MoesimError(f"{where}gpu '{g.name}': no route from its NIC '{g.nic}' inside its server")
        self._check_fabric(where)

    def _reach(self, start: int, edges: Edges, inside_server: bool = False) -> set[int]:
        """Nodes reachable from ``start`` over ``edges`` (``_adj``, or ``_radj`` for the nodes that reach
        ``start``); with ``inside_server``, only through nodes of ``start``'s server."""
        node_server = self._node_server
        home = node_server[start]
        seen, stack = {start}, [start]
        while stack:
            for v, _, _ in edges[stack.pop()]:
                if v not in seen and (not inside_server or node_server[v] == home):
                    seen.add(v)
                    stack.append(v)
        return seen

    def _check_fabric(self, where: str) -> None:
        """Every NIC used by a GPU reaches every such NIC of another server through external switches only.

        The switches' strongly connected components (Tarjan's algorithm) form a DAG; NIC a reaches
        NIC b when a component a links into leads to a component linking into b. NICs are grouped by
        the components they touch, so the work is linear in links plus one test per pair of groups.
        """
        used = sorted({self._index[g.nic] for g in self.gpus if g.nic is not None})
        node_server, adj, radj = self._node_server, self._adj, self._radj
        if len({node_server[n] for n in used}) < 2:
            return
        switch_edges = {u: [v for v, _, _ in adj[u] if node_server[v] is None]
                        for u, srv in enumerate(node_server) if srv is None}
        component = _components(switch_edges)
        dag: dict[int, set[int]] = defaultdict(set)  # component → components it links into
        for u, vs in switch_edges.items():
            dag[component[u]].update(component[v] for v in vs if component[v] != component[u])
        groups: dict[frozenset[int], list[int]] = defaultdict(list)  # components linking into b → [b, ...]
        for b in used:
            groups[frozenset(component[u] for u, _, _ in radj[b] if node_server[u] is None)].append(b)
        group_servers = {key: {node_server[b] for b in nics} for key, nics in groups.items()}
        unreached: dict[frozenset[int], list[frozenset[int]]] = {}  # components a enters → groups it misses
        for a in used:
            starts = frozenset(component[v] for v, _, _ in adj[a] if node_server[v] is None)
            if starts not in unreached:
                reach, stack = set(starts), list(starts)
                while stack:
                    for c in dag[stack.pop()]:
                        if c not in reach:
                            reach.add(c)
                            stack.append(c)
                unreached[starts] = [key for key in groups if reach.isdisjoint(key)]
            home = node_server[a]
            missed = [b for key in unreached[starts] if group_servers[key] != {home}
                      for b in groups[key] if node_server[b] != home]
            if missed:
                raise MoesimError(
                    f"{where}nic '{self.nodes[a].name}': no route to nic '{self.nodes[min(missed)].name}' "
                    f"through the external switches"
                )


def _components(edges: dict[int, list[int]]) -> dict[int, int]:
    """Strongly connected components of a directed graph (node → successors): node → component number.
    Tarjan's algorithm ("Depth-first search and linear graph algorithms", SIAM J. Comput. 1972), with
    an explicit stack so deep graphs do not hit Python's recursion limit; linear in nodes and edges."""
    index: dict[int, int] = {}
    low: dict[int, int] = {}
    on_stack: set[int] = set()
    stack: list[int] = []
    component: dict[int, int] = {}
    count = 0
    for root in edges:
        if root in index:
            continue
        work = [(root, 0)]
        while work:
            v, i = work.pop()
            if i == 0:
                index[v] = low[v] = len(index)
                stack.append(v)
                on_stack.add(v)
            succ = edges[v]
            while i < len(succ):
                w = succ[i]
                i += 1
                if w not in index:
                    work.append((v, i))
                    work.append((w, 0))
                    break
                if w in on_stack:
                    low[v] = min(low[v], index[w])
            else:
                if low[v] == index[v]:
                    while True:
                        w = stack.pop()
                        on_stack.discard(w)
                        component[w] = count
                        if w == v:
                            break
                    count += 1
                if work:
                    parent = work[-1][0]
                    low[parent] = min(low[parent], low[v])
    return component


def _next_layer(front: list[int], edges: Edges, seen: dict[int, list[tuple[int, int, int]]], end: int,
                node_server: tuple[int | None, ...]) -> list[int]:
    """One breadth-first layer of ``Topology._fabric_paths``: the nodes first reached from ``front`` over
    ``edges`` (switches, or ``end``), each with every link it is reached by from ``front``."""
    layer: list[int] = []
    fresh: set[int] = set()
    for u in front:
        for v, lid, cost in edges[u]:
            if v != end and node_server[v] is not None:
                continue
            if v not in seen:
                seen[v] = [(u, lid, cost)]
                layer.append(v)
                fresh.add(v)
            elif v in fresh:
                seen[v].append((u, lid, cost))
    return layer


# The path enumerations below recurse through module functions, not nested closures: a closure that calls
# itself is a reference cycle, left for the cyclic garbage collector on each of the thousands of route queries.
def _walk(v: int, preds: dict[int, tuple[tuple[int, int], ...]], memo: dict[int, list[tuple[int, ...]]]) -> list[tuple[int, ...]]:
    """Every path from the DAG's root to ``v`` over ``preds`` (node → [(previous node, link)]), memoised."""
    if v not in memo:
        memo[v] = [p + (lid,) for u, lid in preds[v] for p in _walk(u, preds, memo)]
    return memo[v]


def _heads(v: int, fwd: dict[int, list[tuple[int, int, int]]], cost: dict[int, int],
           memo: dict[int, list[tuple[int, ...]]]) -> list[tuple[int, ...]]:
    """The least-cost paths from the search's start to ``v`` over the forward layer links, memoised."""
    if v not in memo:
        memo[v] = [p + (lid,) for u, lid, c in fwd[v] if cost[u] + c == cost[v] for p in _heads(u, fwd, cost, memo)]
    return memo[v]


def _tails(v: int, back: dict[int, list[tuple[int, int, int]]], cost: dict[int, int],
           memo: dict[int, list[tuple[int, ...]]]) -> list[tuple[int, ...]]:
    """The least-cost paths from ``v`` to the search's end over the backward layer links, memoised."""
    if v not in memo:
        memo[v] = [(lid,) + p for w, lid, c in back[v] if c + cost[w] == cost[v] for p in _tails(w, back, cost, memo)]
    return memo[v]


def _least_cost(v: int, links: dict[int, list[tuple[int, int, int]]], memo: dict[int, int]) -> int:
    """Least cost from the search's start to ``v`` over the recorded layer links (memoised in ``memo``)."""
    if v not in memo:
        memo[v] = min(_least_cost(u, links, memo) + c for u, _, c in links[v])
    return memo[v]
