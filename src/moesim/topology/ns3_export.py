"""The NS-3 topology file of ASTRA-sim's NS-3 backend (docs/reference-semantics.md A.2, "Topology file").

    <node_num> <switch_num> <link_num>
    <switch id> <switch id> ...
    <src> <dst> <rate, e.g. 400Gbps> <delay, e.g. 0.0005ms> <error rate>     (one line per cable)

Hosts must be ids 0..N−1 because ASTRA-sim's rank = NS-3 node id, so the GPU of rank r (through the
placement) gets id r; every other node (CPU, PCIe switch, NIC, external switch) becomes an NS-3
switch node with ids N.. in topology order. NS-3 routes by shortest hop count with ECMP over all
next hops; it does not know NIC affinity (for the six study topologies the two agree).
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
    """4e11 → ``400Gbps``; rates that are not whole Gbps fall back to Mbps, Kbps, then whole bps."""
    exact = Decimal(repr(float(bps)))
    for unit, exp in (("Gbps", 9), ("Mbps", 6), ("Kbps", 3)):
        scaled = exact.scaleb(-exp)
        if scaled == scaled.to_integral_value():
            return f"{int(scaled)}{unit}"
    return f"{round(bps)}bps"


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


def ns3_node_ids(topology: Topology, placement: Placement | None = None) -> dict[str, int]:
    """Node name → NS-3 id: the GPU of rank r is r, then every other node in topology order."""
    placement = placement or contiguous_placement(topology)
    placement.validate(topology)
    ids = {topology.gpus[g].name: r for r, g in enumerate(placement.rank_to_gpu)}
    for node in topology.nodes:
        if node.kind != NodeKind.GPU:
            ids[node.name] = len(ids)
    return ids


def ns3_topology_text(topology: Topology, placement: Placement | None = None) -> str:
    """The topology file's text (one line per full-duplex cable, in link-id order)."""
    ids = ns3_node_ids(topology, placement)
    lines = []
    for fwd, back in topology.cables():
        a, b = topology.links[fwd], topology.links[back]
        if (a.bandwidth_bps, a.delay_s) != (b.bandwidth_bps, b.delay_s):
            raise MoesimError(f"topology {topology.name}: cable {a.src} – {a.dst} differs by direction; "
                              "an NS-3 link is symmetric")
        lines.append(f"{ids[a.src]} {ids[a.dst]} {format_ns3_rate(a.bandwidth_bps)} {format_ns3_delay(a.delay_s)} 0")
    switches = sorted(i for name, i in ids.items() if topology.node_by_name[name].kind != NodeKind.GPU)
    head = [f"{len(ids)} {len(switches)} {len(lines)}", " ".join(str(s) for s in switches)]
    return "\n".join(head + lines) + "\n"


def write_ns3_topology(topology: Topology, path: str | Path, placement: Placement | None = None) -> Path:
    """Write the NS-3 topology file (atomically); ranks come from ``placement`` (default contiguous)."""
    return write_output(path, ns3_topology_text(topology, placement))


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
