"""The public topology builder: a server template instantiated N times, joined by an external fabric.

Two levels. ``TopologyBuilder`` adds devices and full-duplex cables one by one and derives each GPU's
CPU, PCIe switch and NIC affinity. ``build_topology(ClusterSpec)`` instantiates a ``ServerTemplate``
``num_servers`` times (device names are prefixed ``s<server>.``), attaches the fabric, and validates
everything; the six study topologies and user YAML files both go through it (docs/architecture.md).

NIC affinity of a GPU (docs/study.md §4): the NIC named in the template, else the NIC on the GPU's
PCIe switch, else the NIC on the GPU's CPU, else the nearest NIC of its server (fewest hops, then
template order), else none.

A cluster may hold at most ``MAX_DEVICES`` devices and ``MAX_CABLES`` cables (servers and fabric
together), checked before anything is built: about ten times a 100,000-GPU cluster, which builds in
seconds, so a mistyped server count is a one-line error instead of a machine running out of memory.
"""

from __future__ import annotations

import gc
import re
from collections import deque
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING

from moesim.errors import MoesimError, input_error
from moesim.schema import MAX_COUNT, Constraint, Param
from moesim.topology.fabrics import Fabric
from moesim.topology.model import GpuInfo, Link, NodeKind, Topology, TopoNode
from moesim.topology.units import DELAY_RANGE_S, DELAY_RANGE_TEXT, check_bandwidth_bps, check_delay_s

if TYPE_CHECKING:
    from moesim.topology.domains import GpuDomain

LINK_KINDS = ("pcie", "upi", "p2p", "fabric", "nvlink")
MAX_DEVICES = 2_000_000
SERVERS = Param("servers", "topology", int, "", Constraint(low=1, high=MAX_COUNT))
"""A topology's server count (``check_cluster`` bounds it further by the devices and cables it makes)."""
MAX_CABLES = 4_000_000
_ID = re.compile(r"[A-Za-z0-9_\-]+")


def infer_link_kind(a: NodeKind, b: NodeKind) -> str:
    """The link kind implied by its end devices (used when a cable's kind is left empty)."""
    ends = {a, b}
    if NodeKind.NVSWITCH in ends:
        return "nvlink"
    if NodeKind.SWITCH in ends:
        return "fabric"
    if ends == {NodeKind.CPU}:
        return "upi"
    if ends == {NodeKind.PCIE_SWITCH}:
        return "p2p"
    if ends == {NodeKind.GPU}:
        return "nvlink"
    return "pcie"


@dataclass(frozen=True)
class CableSpec:
    """A full-duplex cable between two devices of a server template (or two built nodes)."""

    a: str
    b: str
    bandwidth_bps: float
    delay_s: float
    kind: str = ""


@dataclass(frozen=True)
class GpuSpec:
    """A GPU of a server template; ``nic`` overrides the derived NIC affinity."""

    name: str
    nic: str | None = None


@dataclass(frozen=True)
class ServerTemplate:
    """The devices and intra-server cables of one server. GPU order = local rank order.

    ``domain``: the GPUs' interconnect (NVSwitch, full mesh; ``domains/``), expanded into devices and
    ``nvlink`` cables on top of ``cables``; None: only the listed cables join the GPUs.
    """

    cpus: tuple[str, ...] = ()
    pcie_switches: tuple[str, ...] = ()
    gpus: tuple[GpuSpec, ...] = ()
    nics: tuple[str, ...] = ()
    cables: tuple[CableSpec, ...] = ()
    domain: GpuDomain | None = None

    def device_kinds(self) -> dict[str, NodeKind]:
        out: dict[str, NodeKind] = {}
        for kind, names in ((NodeKind.CPU, self.cpus), (NodeKind.PCIE_SWITCH, self.pcie_switches),
                            (NodeKind.GPU, [g.name for g in self.gpus]), (NodeKind.NIC, self.nics)):
            for name in names:
                out.setdefault(name, kind)
        if self.domain is not None:
            for name, kind in self.domain.devices().items():
                out.setdefault(name, kind)
        return out

    def all_cables(self) -> tuple[tuple[str, CableSpec], ...]:
        """(where, cable) for every cable of the server: the listed ones, then the domain's."""
        listed = tuple((f"server.links[{i}]", c) for i, c in enumerate(self.cables))
        if self.domain is None:
            return listed
        return listed + tuple(("server.gpu_domain", c) for c in self.domain.cables(tuple(g.name for g in self.gpus)))


@dataclass(frozen=True)
class ClusterSpec:
    """A whole cluster: ``num_servers`` copies of ``server`` joined by ``fabric``. ``source`` names the file."""

    name: str
    server: ServerTemplate
    num_servers: int
    fabric: Fabric
    description: str = ""
    source: str = ""

    @property
    def num_gpus(self) -> int:
        return self.num_servers * len(self.server.gpus)


class TopologyBuilder:
    """Add devices and cables, then ``build()`` an immutable, validated ``Topology``."""

    def __init__(self, name: str, description: str = "", source: str = "") -> None:
        self.name = name
        self.description = description
        self.source = source or f"topology {name}"
        self._nodes: dict[str, TopoNode] = {}
        self._links: list[Link] = []
        self._cables: set[tuple[str, str]] = set()
        self._nic_override: dict[str, str] = {}

    def add_node(self, name: str, kind: NodeKind, server: int | None = None, where: str = "nodes") -> None:
        if name in self._nodes:
            raise input_error(self.source, where, f"duplicate id '{name}'")
        if kind != NodeKind.SWITCH and server is None:
            raise input_error(self.source, where, f"{kind.value} '{name}' must belong to a server")
        self._nodes[name] = TopoNode(name, NodeKind(kind), server)

    def add_cable(self, a: str, b: str, bandwidth_bps: float, delay_s: float, kind: str = "",
                  where: str = "links") -> tuple[int, int]:
        """Add the two directed links of a full-duplex cable; returns their ids (a→b, b→a)."""
        na, nb = self._nodes.get(a), self._nodes.get(b)
        if na is None or nb is None:
            raise input_error(self.source, where, f"unknown device '{a if na is None else b}'")
        if a == b:
            raise input_error(self.source, where, f"a link joins '{a}' to itself")
        pair = (a, b) if a < b else (b, a)
        if pair in self._cables:
            raise input_error(self.source, where, f"duplicate link {a} – {b}")
        check_bandwidth_bps(bandwidth_bps, self.source, where)
        check_delay_s(delay_s, self.source, where)
        kind = kind or infer_link_kind(na.kind, nb.kind)
        if kind not in LINK_KINDS:
            raise input_error(self.source, where, f"unknown link kind '{kind}'", LINK_KINDS)
        self._cables.add(pair)
        first = len(self._links)
        a, b = na.name, nb.name  # the nodes' own name objects: one string per device, however many links
        self._links.append(Link(first, a, b, float(bandwidth_bps), float(delay_s), kind))
        self._links.append(Link(first + 1, b, a, float(bandwidth_bps), float(delay_s), kind))
        return first, first + 1

    def set_gpu_nic(self, gpu: str, nic: str, where: str = "gpus") -> None:
        """Pin a GPU's NIC affinity (otherwise derived, see the module docstring)."""
        g, n = self._nodes.get(gpu), self._nodes.get(nic)
        if g is None or g.kind != NodeKind.GPU:
            raise input_error(self.source, where, f"unknown gpu '{gpu}'")
        if n is None or n.kind != NodeKind.NIC or n.server != g.server:
            raise input_error(self.source, where, f"'{nic}' is not a NIC of gpu '{gpu}''s server")
        self._nic_override[gpu] = nic

    def build(self, meta: Iterable[tuple[str, str]] = ()) -> Topology:
        nodes = tuple(self._nodes.values())
        neighbours: dict[str, list[str]] = {n.name: [] for n in nodes}
        for link in self._links:
            neighbours[link.src].append(link.dst)
        order = {name: i for i, name in enumerate(self._nodes)}
        gpus = tuple(self._gpu_info(n, neighbours, order) for n in nodes if n.kind == NodeKind.GPU)
        topo = Topology(self.name, nodes, tuple(self._links), gpus, self.description, tuple(meta))
        topo.check_routes(self.source)
        return topo

    def _first(self, names: Iterable[str], kind: NodeKind) -> str | None:
        return next((n for n in names if self._nodes[n].kind == kind), None)

    def _gpu_info(self, gpu: TopoNode, neighbours: dict[str, list[str]], order: dict[str, int]) -> GpuInfo:
        server = gpu.server
        assert server is not None
        local = [n for n in neighbours[gpu.name] if self._nodes[n].server == server]
        psw = self._first(local, NodeKind.PCIE_SWITCH)
        cpu = self._first(local, NodeKind.CPU)
        if cpu is None and psw is not None:
            cpu = self._first(neighbours[psw], NodeKind.CPU)
        nic = self._nic_override.get(gpu.name)
        for anchor in (psw, cpu):
            if nic is None and anchor is not None:
                nic = self._first(neighbours[anchor], NodeKind.NIC)
        if nic is None:
            nic = self._nearest_nic(gpu.name, server, neighbours, order)
        return GpuInfo(gpu.name, server, cpu, psw, nic)

    def _nearest_nic(self, start: str, server: int, neighbours: dict[str, list[str]],
                     order: dict[str, int]) -> str | None:
        """Fewest hops inside the server; ties go to the NIC added first (``order``: node → position)."""
        dist, queue = {start: 0}, deque([start])
        while queue:
            u = queue.popleft()
            for v in neighbours[u]:
                if v not in dist and self._nodes[v].server == server:
                    dist[v] = dist[u] + 1
                    queue.append(v)
        nics = [n for n in dist if self._nodes[n].kind == NodeKind.NIC]
        return min(nics, key=lambda n: (dist[n], order[n]), default=None)


def check_template(template: ServerTemplate, source: str) -> None:
    """Validate ids, link ends, bandwidths, delays and kinds, naming the offending template entry."""
    seen: dict[str, str] = {}
    lists = (("cpus", template.cpus), ("pcie_switches", template.pcie_switches),
             ("gpus", [g.name for g in template.gpus]), ("nics", template.nics))
    for field, names in lists:
        for i, name in enumerate(names):
            where = f"server.{field}[{i}]"
            if not isinstance(name, str) or not _ID.fullmatch(name):
                raise input_error(source, where, f"invalid id {name!r}: use letters, digits, '_' or '-'")
            if name in seen:
                raise input_error(source, where, f"duplicate id '{name}' (already {seen[name]})")
            seen[name] = where
    if not template.gpus:
        raise input_error(source, "server.gpus", "a server needs at least one GPU")
    if template.domain is not None:
        for name in template.domain.devices():
            if name in seen:
                raise input_error(source, seen[name], f"id '{name}' is taken by the {template.domain.kind} "
                                  "GPU domain's device; rename it")
    for i, gpu in enumerate(template.gpus):
        if gpu.nic is not None and gpu.nic not in template.nics:
            raise input_error(source, f"server.gpus[{i}].nic", f"unknown NIC '{gpu.nic}'", template.nics)
    cables: dict[frozenset[str], int] = {}
    for i, c in enumerate(template.cables):
        where = f"server.links[{i}]"
        for end, name in (("a", c.a), ("b", c.b)):
            if name not in seen:
                raise input_error(source, f"{where}.{end}", f"unknown device '{name}'", list(seen))
        if c.a == c.b:
            raise input_error(source, where, f"a link joins '{c.a}' to itself")
        pair = frozenset((c.a, c.b))
        if pair in cables:
            raise input_error(source, where, f"duplicate link {c.a} – {c.b} (already server.links[{cables[pair]}])")
        cables[pair] = i
        check_bandwidth_bps(c.bandwidth_bps, source, f"{where}.bandwidth")
        check_delay_s(c.delay_s, source, f"{where}.delay")
        if c.kind and c.kind not in LINK_KINDS:
            raise input_error(source, f"{where}.kind", f"unknown link kind '{c.kind}'", LINK_KINDS)
    linked = {name for c in template.cables for name in (c.a, c.b)}
    for i, nic in enumerate(template.nics):
        if nic not in linked:
            raise input_error(source, f"server.nics[{i}]", f"NIC '{nic}' has no link in the server (traffic "
                              "between servers could not reach it); add one to server.links")


def check_cluster(spec: ClusterSpec) -> None:
    """Validate ``spec`` without building it: server count, template, and the size limits."""
    source = spec.source or f"topology {spec.name}"
    n = SERVERS.check(spec.num_servers, source, strict=True)
    t = spec.server
    check_template(t, source)
    switches, fabric_cables = spec.fabric.size(n, len(t.nics))
    devices, cables = n * len(t.device_kinds()) + switches, n * len(t.all_cables()) + fabric_cables
    for what, count, limit in (("devices", devices, MAX_DEVICES), ("cables", cables, MAX_CABLES)):
        if count > limit:
            raise input_error(source, "servers", f"{n} servers and the fabric make {count:,} {what}, more than "
                              f"a cluster may have", [f"at most {limit:,} {what}"])


@contextmanager
def _collector_paused() -> Iterator[None]:
    """Pause Python's cyclic garbage collector during a build: the build makes no reference cycles, and
    full collections scanning its millions of new objects would cost more than the build itself."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def build_topology(spec: ClusterSpec, nic_switch_delay_s: float = 0.7e-6) -> Topology:
    """Instantiate ``spec``: servers ``s0 .. s<N-1>``, then the fabric. ``nic_switch_delay_s`` is the
    NIC–switch delay of the run's network mode, used unless the fabric fixes its own."""
    source = spec.source or f"topology {spec.name}"
    check_cluster(spec)
    if isinstance(nic_switch_delay_s, bool) or not isinstance(nic_switch_delay_s, int | float) or \
            not DELAY_RANGE_S[0] <= nic_switch_delay_s <= DELAY_RANGE_S[1]:
        raise MoesimError(f"{source}: NIC–switch delay {nic_switch_delay_s!r} s is out of range "
                          f"(allowed: {DELAY_RANGE_TEXT})")
    t = spec.server
    kinds = t.device_kinds()
    b = TopologyBuilder(spec.name, spec.description, source)
    fabric_delay = getattr(spec.fabric, "nic_delay_s", None)
    meta = (
        ("source", spec.source or "builtin"),
        ("servers", str(spec.num_servers)),
        ("gpus_per_server", str(len(t.gpus))),
        ("fabric", spec.fabric.kind),
        ("fabric_description", spec.fabric.describe()),
        ("nic_switch_delay_s", repr(nic_switch_delay_s if fabric_delay is None else fabric_delay)),
    ) + ((("gpu_domain", t.domain.describe()),) if t.domain is not None else ())
    server_nics: list[list[str]] = []
    cables = t.all_cables()
    with _collector_paused():
        for s in range(spec.num_servers):
            p = f"s{s}."
            for name, kind in kinds.items():
                b.add_node(p + name, kind, s, where="server")
            for where, c in cables:
                b.add_cable(p + c.a, p + c.b, c.bandwidth_bps, c.delay_s, c.kind, where=where)
            for i, g in enumerate(t.gpus):
                if g.nic is not None:
                    b.set_gpu_nic(p + g.name, p + g.nic, where=f"server.gpus[{i}].nic")
            server_nics.append([p + n for n in t.nics])
        spec.fabric.attach(b, server_nics, nic_switch_delay_s)
        return b.build(meta)
