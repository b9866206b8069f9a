"""The NS-3 topology file of ASTRA-sim's NS-3 backend (docs/reference-semantics.md A.2, "Topology file").

    <node_num> <switch_num> <link_num>
    <switch id> <switch id> ...
    <src> <dst> <rate, e.g. 400Gbps> <delay, e.g. 0.0005ms> <error rate>     (one line per cable)

Hosts must be ids 0..N−1 because ASTRA-sim's rank = NS-3 node id, so the GPU of rank r (through the
placement) gets id r; every other node (CPU, PCIe switch, NIC, external switch) becomes an NS-3
switch node with ids N.. in topology order. NS-3 routes by shortest hop count with ECMP over all
next hops and never through a host (docs/reference-semantics.md A.2); it does not know NIC affinity,
so in a server whose PCIe switches meet at a CPU it also sends rail-crossing flows through the CPU to
another GPU's NIC. ``moesim_routes`` leaves out the cables that only such detours use (``ns3_cables``),
so that NS-3 finds moesim's paths (docs/topology.md).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING

from moesim.errors import MoesimError
from moesim.fileio import refuse_special_file
from moesim.topology.model import NodeKind, Topology
from moesim.topology.output import write_output
from moesim.topology.placement import Placement, contiguous_placement
from moesim.topology.units import check_bandwidth_bps, check_delay_s

if TYPE_CHECKING:
    import networkx as nx  # imported by to_networkx() only: listings stay fast

_RATE_UNITS = {"bps": 0, "b/s": 0, "kbps": 3, "Kbps": 3, "kb/s": 3, "Kb/s": 3, "Mbps": 6, "Mb/s": 6,
               "Gbps": 9, "Gb/s": 9}
_TIME_UNITS = {"s": 0, "ms": -3, "us": -6, "ns": -9, "ps": -12}
_VALUE = re.compile(r"^([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)([A-Za-z/]+)$")


def format_ns3_rate(bps: float) -> str:
    """4e11 → ``400Gbps``; rates that are not whole Gbps fall back to Mbps, Kbps, bps, and a rate with a
    fraction of a bit/s to its exact decimal in Gbps (``533.3333333333333Gbps``), so the file reads back
    as the same float. ns-3's DataRate holds whole bit/s: it truncates the fraction (A.2)."""
    exact = Decimal(repr(float(bps)))
    for unit, exp in (("Gbps", 9), ("Mbps", 6), ("Kbps", 3), ("bps", 0)):
        scaled = exact.scaleb(-exp)
        if scaled == scaled.to_integral_value():
            return f"{int(scaled)}{unit}"
    return format(exact.scaleb(-9).normalize(), "f") + "Gbps"


def format_ns3_delay(delay_s: float) -> str:
    """5e-7 → ``0.0005ms`` (milliseconds, as the files shipped with ASTRA-sim)."""
    return format(Decimal(repr(float(delay_s))).scaleb(3).normalize(), "f") + "ms"


def _parse_value(text: str, units: dict[str, int], where: str) -> float:
    m = _VALUE.match(text)
    if not m or m.group(2) not in units:
        raise MoesimError(f"{where}: cannot read {text!r} (units: {', '.join(units)})")
    try:
        return float(Decimal(m.group(1)).scaleb(units[m.group(2)]))
    except ArithmeticError:
        raise MoesimError(f"{where}: cannot read the number in {text!r}") from None


def routed_links(topology: Topology) -> frozenset[int]:
    """The ids of the links a GPU-to-GPU route of ``topology`` may cross: every link of a route between
    two GPUs of one server, of a GPU's way to and from its NIC, and every link with an end outside the
    servers (the fabric and the NICs' ports, whose fewest-hop paths moesim and NS-3 both take).
    A GPU's way to its NIC is the same for every destination on another server (``Topology.routes``),
    so one such route per GPU and direction covers it; a GPU without a NIC takes routes to all GPUs."""
    gpus = topology.gpus
    server_of = {n.name: n.server for n in topology.nodes}
    used = {link.id for link in topology.links if server_of[link.src] is None or server_of[link.dst] is None}
    by_server: dict[int, list[int]] = {}
    for g, info in enumerate(gpus):
        by_server.setdefault(info.server, []).append(g)
    firsts = [members[0] for members in by_server.values()]
    pairs: set[tuple[int, int]] = set()
    for g, info in enumerate(gpus):
        pairs.update((g, h) for h in by_server[info.server] if h != g)
        if info.nic is None:
            partners = [h for h in range(len(gpus)) if gpus[h].server != info.server]
        else:
            partners = [h for h in firsts if gpus[h].server != info.server][:1]
        for h in partners:
            pairs.update(((g, h), (h, g)))
    for a, b in pairs:
        for route in topology.routes(a, b):
            used.update(route)
    return frozenset(used)


def _ns3_routed_cables(ends: list[tuple[int, int]], is_host: list[bool]) -> set[int]:
    """The cables (indices into ``ends``, node-index pairs) NS-3's routing sends host-to-host traffic over:
    per destination host a breadth-first search that passes through switches only, then every fewest-hop
    next hop from every host (ANS3 ``scratch/common.h`` CalculateRoute; docs/reference-semantics.md A.2)."""
    nbr: list[list[tuple[int, int]]] = [[] for _ in is_host]
    for c, (a, b) in enumerate(ends):
        nbr[a].append((b, c))
        nbr[b].append((a, c))
    hosts = [v for v, host in enumerate(is_host) if host]
    used: set[int] = set()
    for dst in hosts:
        dist, queue = {dst: 0}, [dst]
        for u in queue:
            for w, _ in nbr[u]:
                if w not in dist:
                    dist[w] = dist[u] + 1
                    if not is_host[w]:
                        queue.append(w)
        stack = [h for h in hosts if h != dst and h in dist]
        seen = set(stack)
        while stack:
            u = stack.pop()
            for w, c in nbr[u]:
                if dist.get(w) == dist[u] - 1 and (w == dst or not is_host[w]):
                    used.add(c)
                    if w != dst and w not in seen:
                        seen.add(w)
                        stack.append(w)
    return used


def ns3_cables(topology: Topology) -> list[tuple[int, int]]:
    """The cables of the NS-3 file that reproduces moesim's routes: ``Topology.cables()`` without those
    that no moesim route uses but NS-3's fewest-hop routing would send GPU traffic over (e.g. a PCIe
    switch's cable to its CPU in the server templates, through which NS-3 would reach another GPU's NIC),
    and without the cables this cuts off from every GPU (repeated until NS-3 uses no such cable)."""
    cables = topology.cables()
    moesim_used = routed_links(topology)
    index = {n.name: i for i, n in enumerate(topology.nodes)}
    is_host = [n.kind == NodeKind.GPU for n in topology.nodes]
    while True:
        ends = [(index[topology.links[f].src], index[topology.links[f].dst]) for f, _ in cables]
        detours = {c for c in _ns3_routed_cables(ends, is_host)
                   if cables[c][0] not in moesim_used and cables[c][1] not in moesim_used}
        if not detours:
            break
        cables = [cable for c, cable in enumerate(cables) if c not in detours]
    # drop the islands left without a GPU (e.g. two CPUs joined only to each other)
    reach, stack = set(), [v for v, host in enumerate(is_host) if host]
    nbr: dict[int, list[int]] = {}
    for a, b in ([index[topology.links[f].src], index[topology.links[f].dst]] for f, _ in cables):
        nbr.setdefault(a, []).append(b)
        nbr.setdefault(b, []).append(a)
    while stack:
        v = stack.pop()
        if v not in reach:
            reach.add(v)
            stack.extend(nbr.get(v, ()))
    return [cable for cable in cables if index[topology.links[cable[0]].src] in reach]


def ns3_node_ids(topology: Topology, placement: Placement | None = None,
                 cables: list[tuple[int, int]] | None = None) -> dict[str, int]:
    """Node name → NS-3 id: the GPU of rank r is r, then every other node in topology order (with
    ``cables``: every other node at an end of one of them)."""
    placement = placement or contiguous_placement(topology)
    placement.validate(topology)
    ids = {topology.gpus[g].name: r for r, g in enumerate(placement.rank_to_gpu)}
    ends = None if cables is None else {topology.links[f].src for f, _ in cables} | {topology.links[f].dst
                                                                                    for f, _ in cables}
    for node in topology.nodes:
        if node.kind != NodeKind.GPU and (ends is None or node.name in ends):
            ids[node.name] = len(ids)
    return ids


def ns3_topology_text(topology: Topology, placement: Placement | None = None, moesim_routes: bool = False) -> str:
    """The topology file's text (one line per full-duplex cable, in link-id order; ``moesim_routes``: the
    cables of ``ns3_cables``, on which NS-3 routes as moesim does, and the nodes they join)."""
    cables = ns3_cables(topology) if moesim_routes else topology.cables()
    ids = ns3_node_ids(topology, placement, cables if moesim_routes else None)
    lines = []
    for fwd, back in cables:
        a, b = topology.links[fwd], topology.links[back]
        if (a.bandwidth_bps, a.delay_s) != (b.bandwidth_bps, b.delay_s):
            raise MoesimError(f"topology {topology.name}: cable {a.src} – {a.dst} differs by direction; "
                              "an NS-3 link is symmetric")
        lines.append(f"{ids[a.src]} {ids[a.dst]} {format_ns3_rate(a.bandwidth_bps)} {format_ns3_delay(a.delay_s)} 0")
    switches = sorted(i for name, i in ids.items() if topology.node_by_name[name].kind != NodeKind.GPU)
    head = [f"{len(ids)} {len(switches)} {len(lines)}", " ".join(str(s) for s in switches)]
    return "\n".join(head + lines) + "\n"


def write_ns3_topology(topology: Topology, path: str | Path, placement: Placement | None = None,
                       moesim_routes: bool = False) -> Path:
    """Write the NS-3 topology file (atomically); ranks come from ``placement`` (default contiguous);
    ``moesim_routes``: only the cables on which NS-3 routes as moesim does (``ns3_cables``)."""
    return write_output(path, ns3_topology_text(topology, placement, moesim_routes))


@dataclass(frozen=True)
class Ns3Link:
    """One line of the file: a full-duplex link."""

    src: int
    dst: int
    rate_bps: float
    delay_s: float
    error_rate: float


@dataclass(frozen=True)
class Ns3Topology:
    """A parsed NS-3 topology file."""

    num_nodes: int
    switch_ids: tuple[int, ...]
    links: tuple[Ns3Link, ...]

    @property
    def num_hosts(self) -> int:
        return self.num_nodes - len(self.switch_ids)

    def to_networkx(self) -> nx.Graph:
        """Undirected graph: node attribute ``host``; edge attributes rate_bps, delay_s, error_rate."""
        import networkx as nx

        g = nx.Graph()
        switches = set(self.switch_ids)
        for i in range(self.num_nodes):
            g.add_node(i, host=i not in switches)
        for link in self.links:
            g.add_edge(link.src, link.dst, rate_bps=link.rate_bps, delay_s=link.delay_s, error_rate=link.error_rate)
        return g


def read_ns3_topology(path: str | Path) -> Ns3Topology:
    """Parse a topology file strictly (errors name the file and line)."""
    path = Path(path)
    refuse_special_file(path, "NS-3 topology file")
    try:
        raw = path.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise MoesimError(f"{path}: cannot read the NS-3 topology file ({exc.strerror or exc})") from None
    except UnicodeDecodeError as exc:
        raise MoesimError(f"{path}: not UTF-8 text (byte 0x{exc.object[exc.start]:02x} at offset {exc.start})") from None
    rows = [(n, line.split()) for n, line in enumerate(raw, start=1) if line.strip()]

    def ints(n: int, parts: list[str], what: str) -> list[int]:
        try:
            return [int(p) for p in parts]
        except ValueError:
            raise MoesimError(f"{path}: line {n}: expected {what}, got {' '.join(parts)!r}") from None

    if not rows or len(rows[0][1]) != 3:
        raise MoesimError(f"{path}: line 1: expected 'node_num switch_num link_num'")
    num_nodes, num_switches, num_links = ints(*rows[0], what="'node_num switch_num link_num'")
    switch_rows = rows[1:2] if num_switches else []
    switch_ids = ints(*switch_rows[0], what="switch ids") if switch_rows else []
    if num_switches and not switch_rows:
        raise MoesimError(f"{path}: line 2: expected {num_switches} switch ids")
    if len(switch_ids) != num_switches or len(set(switch_ids)) != num_switches:
        raise MoesimError(f"{path}: line {switch_rows[0][0]}: expected {num_switches} distinct switch ids")
    if any(not 0 <= s < num_nodes for s in switch_ids):
        raise MoesimError(f"{path}: switch ids must be in 0..{num_nodes - 1}")
    if any(s < num_nodes - num_switches for s in switch_ids):  # distinct and in range: the rest are hosts
        raise MoesimError(f"{path}: hosts must be ids 0..N-1 (ASTRA-sim rank = NS-3 node id)")
    link_rows = rows[1 + len(switch_rows):]
    if len(link_rows) != num_links:
        raise MoesimError(f"{path}: header says {num_links} links, found {len(link_rows)} link lines")
    links = []
    for n, parts in link_rows:
        where = f"{path}: line {n}"
        if len(parts) != 5:
            raise MoesimError(f"{where}: expected 'src dst rate delay error_rate', got {' '.join(parts)!r}")
        src, dst = ints(n, parts[:2], "two node ids")
        if not (0 <= src < num_nodes and 0 <= dst < num_nodes) or src == dst:
            raise MoesimError(f"{where}: bad node ids {src} {dst} (allowed: 0..{num_nodes - 1}, distinct)")
        try:
            error_rate = float(parts[4])
        except ValueError:
            raise MoesimError(f"{where}: bad error rate {parts[4]!r}") from None
        rate = check_bandwidth_bps(_parse_value(parts[2], _RATE_UNITS, where), where, "rate")
        delay = check_delay_s(_parse_value(parts[3], _TIME_UNITS, where), where, "delay")
        links.append(Ns3Link(src, dst, rate, delay, error_rate))
    return Ns3Topology(num_nodes, tuple(switch_ids), tuple(links))
