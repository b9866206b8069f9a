"""Look up a topology by registry name ("1".."6"), a server template (``hgx-h100:4``, templates.py),
``star:N``, or the path of a YAML file, and build it.

``parse_topology`` looks a name up once into a ``TopologyRef`` (template, servers, fabric, the checked
spec); its GPU count and its build read neither the name nor the file again. Specs and built topologies
are cached per process: a built-in by name, a YAML file by its resolved path, re-read when its
modification time or size changes (one entry per path, so editing a file in a loop does not pile up
old versions).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from moesim.errors import MoesimError
from moesim.topology.builder import ClusterSpec, build_topology
from moesim.topology.model import GpuInfo, Link, NodeKind, Topology, TopoNode
from moesim.topology.study import TOPOLOGIES
from moesim.topology.templates import parse_template, template_name, template_names, template_spec
from moesim.topology.yaml_io import load_cluster_yaml

_Stamp = tuple[int, int]
_SPECS: dict[str, tuple[_Stamp, ClusterSpec]] = {}
_BUILT: dict[tuple[str, float], tuple[_Stamp, Topology]] = {}
_BUILTIN: _Stamp = (0, 0)


DEFAULT_NIC_SWITCH_DELAY_S = 0.7e-6
"""NIC–switch delay of a build when the caller names no network mode: the IB-like modes' 0.7 µs."""

STAR = re.compile(r"star:(\d+)")
STAR_TEMPLATE = "star"
"""The template of ``star:N`` in a TopologyRef: N hosts, each its own one-GPU server."""
STAR_MAX_HOSTS = 65536
STAR_LINK = (400e9, 500e-9)
"""``star:N``: N hosts (GPUs), each its own server, cabled straight to one switch at 400 Gb/s and 500 ns
one way: the layout of ASTRA-sim's NS-3 microbenchmarks (docs/reference-runs.md S1, S3, S7)."""


def star_hosts(name: str) -> int | None:
    """N of a ``star:N`` name (None for any other name); N outside 2..STAR_MAX_HOSTS is an error."""
    m = STAR.fullmatch(name)
    if m is None:
        return None
    n = int(m.group(1))
    if not 2 <= n <= STAR_MAX_HOSTS:
        raise MoesimError(f"topology '{name}': {n} hosts is not allowed (2..{STAR_MAX_HOSTS})")
    return n


def star_topology(n: int, bandwidth_bps: float = STAR_LINK[0], delay_s: float = STAR_LINK[1]) -> Topology:
    """``n`` hosts on one switch, no NICs or PCIe: host ``h<i>`` is GPU i on server i."""
    nodes = [TopoNode(f"h{i}", NodeKind.GPU, i) for i in range(n)] + [TopoNode("sw", NodeKind.SWITCH)]
    links: list[Link] = []
    for i in range(n):
        links.append(Link(len(links), f"h{i}", "sw", bandwidth_bps, delay_s, "fabric"))
        links.append(Link(len(links), "sw", f"h{i}", bandwidth_bps, delay_s, "fabric"))
    gpus = [GpuInfo(f"h{i}", i, None, None, None) for i in range(n)]
    return Topology(f"star:{n}", tuple(nodes), tuple(links), tuple(gpus))


def is_yaml_path(name_or_path: str) -> bool:
    return str(name_or_path).lower().endswith((".yaml", ".yml")) or Path(name_or_path).is_file()


def _resolve(name_or_path: str, builtin: bool) -> tuple[str, _Stamp]:
    """(cache key, stamp) of a built-in name or a YAML file; raises the unknown-name or read error."""
    if builtin:
        return name_or_path, _BUILTIN
    if not is_yaml_path(name_or_path):
        raise MoesimError(f"unknown topology '{name_or_path}' (allowed: {', '.join(TOPOLOGIES.names())}, "
                          f"{', '.join(template_names())}, star:N, or a path to a .yaml file)")
    path = Path(name_or_path)
    try:
        st = path.stat()
        return f"yaml:{path.resolve()}", (st.st_mtime_ns, st.st_size)
    except (OSError, ValueError, RuntimeError):  # missing, a bad name, a symlink loop
        load_cluster_yaml(path)  # raises the one-line read error
        raise MoesimError(f"{path}: cannot read the topology file") from None


def _cluster_spec(name_or_path: str, key: str, stamp: _Stamp) -> ClusterSpec:
    """The spec of a study topology, a server template cluster or a YAML file (cached per key and stamp)."""
    hit = _SPECS.get(key)
    if hit is None or hit[0] != stamp:
        if stamp != _BUILTIN:
            spec = load_cluster_yaml(name_or_path)
        else:
            builtin = TOPOLOGIES.get(name_or_path) if name_or_path in TOPOLOGIES else template_spec(name_or_path)
            assert builtin is not None  # parse_topology accepted the name
            spec = builtin
        hit = _SPECS[key] = (stamp, spec)
    return hit[1]


@dataclass(frozen=True)
class TopologyRef:
    """A topology as a run names it, looked up once (``parse_topology``): a study topology ("1".."6"),
    a server template cluster (``hgx-h100:4:rail``: template, servers, fabric), ``star:N`` (template
    ``star``: N one-GPU servers) or a YAML file. It holds the checked spec, so its GPU count, the same
    template on other servers and its build read neither the name nor the file again."""

    name: str
    """As given: a registry name, a template cluster's name or the path of a YAML file."""
    template: str | None
    """The server template (``hgx-h100``), STAR_TEMPLATE for ``star:N``; None for a study topology or a file."""
    servers: int
    gpus_per_server: int
    fabric: str | None = None
    """A template cluster's fabric as written (``rail``, ``ls3``); None: the template's default (or none)."""
    spec: ClusterSpec | None = field(default=None, compare=False, repr=False)
    """The checked cluster spec; None for ``star:N`` (hosts on one switch, no servers or NICs)."""
    cache_key: str = field(default="", compare=False, repr=False)
    stamp: _Stamp = field(default=_BUILTIN, compare=False, repr=False)
    """The version of a YAML file the spec was read from ((0, 0): built in)."""

    @property
    def num_gpus(self) -> int:
        return self.servers * self.gpus_per_server

    def with_servers(self, servers: int) -> TopologyRef:
        """The same template, and fabric, on ``servers`` servers (``star:N``: hosts); a study topology or a
        file only on its own servers (else a one-line error)."""
        if servers == self.servers:
            return self
        if self.template == STAR_TEMPLATE:
            return parse_topology(f"star:{servers}")
        if self.template is not None:
            return parse_topology(template_name(self.template, servers, self.fabric))
        raise MoesimError(f"topology {self.name}: {servers} of its {self.servers} servers need a server template "
                          f"(allowed: {', '.join(template_names())}, star:N; this topology is only itself)")

    def resolve(self, nic_switch_delay_s: float = DEFAULT_NIC_SWITCH_DELAY_S) -> Topology:
        """The built topology (once per process, spec version and NIC–switch delay: 0.7 µs IB-like, 1 µs
        RoCE, the network mode's; ``star:N`` has no NIC, so the delay does not apply)."""
        if self.spec is None:
            hit = _BUILT.get((self.cache_key, 0.0))
            if hit is None:
                hit = _BUILT[(self.cache_key, 0.0)] = (_BUILTIN, star_topology(self.servers))
            return hit[1]
        hit = _BUILT.get((self.cache_key, nic_switch_delay_s))
        if hit is None or hit[0] != self.stamp:
            hit = _BUILT[(self.cache_key, nic_switch_delay_s)] = (self.stamp,
                                                                  build_topology(self.spec, nic_switch_delay_s))
        return hit[1]


def parse_topology(name_or_path: str) -> TopologyRef:
    """Look a topology name up once: ``star:N``, a study topology, ``NAME[:SERVERS[:FABRIC]]`` of a server
    template or a YAML file (read and checked, cached per version). Unknown names and bad files are
    one-line errors."""
    name = str(name_or_path)
    hosts = star_hosts(name)
    if hosts is not None:
        return TopologyRef(name, STAR_TEMPLATE, hosts, 1, cache_key=name)
    parsed = parse_template(name) if name not in TOPOLOGIES else None
    key, stamp = _resolve(name, builtin=name in TOPOLOGIES or parsed is not None)
    spec = _cluster_spec(name, key, stamp)
    per_server = len(spec.server.gpus)
    if parsed is None:
        return TopologyRef(name, None, spec.num_servers, per_server, None, spec, key, stamp)
    kind, servers, fabric = parsed
    return TopologyRef(name, kind.name, servers, per_server, fabric, spec, key, stamp)


def get_cluster_spec(name_or_path: str) -> ClusterSpec:
    """The spec of a registered topology, or the validated spec of a YAML file (cached)."""
    ref = parse_topology(name_or_path)
    if ref.spec is None:
        raise MoesimError(f"topology '{ref.name}': star:N is hosts on one switch, without servers or NICs to "
                          "describe (allowed: a study topology, a server template or a .yaml file)")
    return ref.spec


def topology_gpu_count(name_or_path: str) -> int:
    """The GPU count of a built-in topology or a topology YAML file, without building it (cached).

    Reads and validates the spec only (servers × GPUs per server), so a run can check its rank count
    (TP × EP) before paying for a large build; invalid files raise the same one-line errors.
    """
    return parse_topology(name_or_path).num_gpus


def get_topology(name_or_path: str, nic_switch_delay_s: float = DEFAULT_NIC_SWITCH_DELAY_S) -> Topology:
    """Build (once per process and delay; a YAML file again when it changes) the named topology.

    ``nic_switch_delay_s`` is the network mode's NIC–switch delay: 0.7 µs IB-like, 1 µs RoCE.
    """
    return parse_topology(name_or_path).resolve(nic_switch_delay_s)
