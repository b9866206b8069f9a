"""Look up a topology by registry name ("1".."6"), a server template (``hgx-h100:4``, templates.py),
``star:N``, or the path of a YAML file, and build it.

Specs and built topologies are cached per process: a built-in by name, a YAML file by its resolved
path, re-read when its modification time or size changes (one entry per path, so editing a file in
a loop does not pile up old versions).
"""

from __future__ import annotations

import re
from pathlib import Path

from moesim.errors import MoesimError
from moesim.topology.builder import ClusterSpec, build_topology
from moesim.topology.model import GpuInfo, Link, NodeKind, Topology, TopoNode
from moesim.topology.study import TOPOLOGIES
from moesim.topology.templates import template_names, template_spec
from moesim.topology.yaml_io import load_cluster_yaml

_Stamp = tuple[int, int]
_SPECS: dict[str, tuple[_Stamp, ClusterSpec]] = {}
_BUILT: dict[tuple[str, float], tuple[_Stamp, Topology]] = {}
_BUILTIN: _Stamp = (0, 0)


STAR = re.compile(r"star:(\d+)")
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


def _resolve(name_or_path: str) -> tuple[str, _Stamp]:
    """(cache key, stamp) of a built-in name or a YAML file; raises the unknown-name or read error."""
    if name_or_path in TOPOLOGIES or template_spec(name_or_path) is not None:
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


def _builtin_spec(name: str) -> ClusterSpec:
    """A study topology ("1".."6") or a server template cluster (``hgx-h100:4``)."""
    spec = TOPOLOGIES.get(name) if name in TOPOLOGIES else template_spec(name)
    assert spec is not None  # _resolve accepted the name
    return spec


def get_cluster_spec(name_or_path: str) -> ClusterSpec:
    """The spec of a registered topology, or the validated spec of a YAML file (cached)."""
    name_or_path = str(name_or_path)
    key, stamp = _resolve(name_or_path)
    hit = _SPECS.get(key)
    if hit is None or hit[0] != stamp:
        spec = _builtin_spec(name_or_path) if stamp == _BUILTIN else load_cluster_yaml(name_or_path)
        hit = _SPECS[key] = (stamp, spec)
    return hit[1]


def topology_gpu_count(name_or_path: str) -> int:
    """The GPU count of a built-in topology or a topology YAML file, without building it (cached).

    Reads and validates the spec only (servers × GPUs per server), so a run can check its rank count
    (TP × EP) before paying for a large build; invalid files raise the same one-line errors.
    """
    hosts = star_hosts(str(name_or_path))
    return hosts if hosts is not None else get_cluster_spec(name_or_path).num_gpus


def get_topology(name_or_path: str, nic_switch_delay_s: float = 0.7e-6) -> Topology:
    """Build (once per process and delay; a YAML file again when it changes) the named topology.

    ``nic_switch_delay_s`` is the network mode's NIC–switch delay: 0.7 µs IB-like, 1 µs RoCE.
    """
    name_or_path = str(name_or_path)
    hosts = star_hosts(name_or_path)
    if hosts is not None:  # no NIC: the delay does not apply
        hit = _BUILT.get((name_or_path, 0.0))
        if hit is None:
            hit = _BUILT[(name_or_path, 0.0)] = (_BUILTIN, star_topology(hosts))
        return hit[1]
    key, stamp = _resolve(name_or_path)
    hit = _BUILT.get((key, nic_switch_delay_s))
    if hit is None or hit[0] != stamp:
        topo = build_topology(get_cluster_spec(name_or_path), nic_switch_delay_s)
        hit = _BUILT[(key, nic_switch_delay_s)] = (stamp, topo)
    return hit[1]
