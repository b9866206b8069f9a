"""Look up a topology by registry name ("1".."6") or by the path of a YAML file, and build it.

Specs and built topologies are cached per process: a built-in by name, a YAML file by its resolved
path, re-read when its modification time or size changes (one entry per path, so editing a file in
a loop does not pile up old versions).
"""

from __future__ import annotations

from pathlib import Path

from moesim.errors import MoesimError
from moesim.topology.builder import ClusterSpec, build_topology
from moesim.topology.model import Topology
from moesim.topology.study import TOPOLOGIES
from moesim.topology.yaml_io import load_cluster_yaml

_Stamp = tuple[int, int]
_SPECS: dict[str, tuple[_Stamp, ClusterSpec]] = {}
_BUILT: dict[tuple[str, float], tuple[_Stamp, Topology]] = {}
_BUILTIN: _Stamp = (0, 0)


def is_yaml_path(name_or_path: str) -> bool:
    return str(name_or_path).lower().endswith((".yaml", ".yml")) or Path(name_or_path).is_file()


def _resolve(name_or_path: str) -> tuple[str, _Stamp]:
    """(cache key, stamp) of a built-in name or a YAML file; raises the unknown-name or read error."""
    if name_or_path in TOPOLOGIES:
        return name_or_path, _BUILTIN
    if not is_yaml_path(name_or_path):
        raise MoesimError(f"unknown topology '{name_or_path}' "
                          f"(allowed: {', '.join(TOPOLOGIES.names())}, or a path to a .yaml file)")
    path = Path(name_or_path)
    try:
        st = path.stat()
        return f"yaml:{path.resolve()}", (st.st_mtime_ns, st.st_size)
    except (OSError, ValueError, RuntimeError):  # missing, a bad name, a symlink loop
        load_cluster_yaml(path)  # raises the one-line read error
        raise MoesimError(f"{path}: cannot read the topology file") from None


def get_cluster_spec(name_or_path: str) -> ClusterSpec:
    """The spec of a registered topology, or the validated spec of a YAML file (cached)."""
    name_or_path = str(name_or_path)
    key, stamp = _resolve(name_or_path)
    hit = _SPECS.get(key)
    if hit is None or hit[0] != stamp:
        spec = TOPOLOGIES.get(name_or_path) if stamp == _BUILTIN else load_cluster_yaml(name_or_path)
        hit = _SPECS[key] = (stamp, spec)
    return hit[1]


def topology_gpu_count(name_or_path: str) -> int:
    """The GPU count of a built-in topology or a topology YAML file, without building it (cached).

    Reads and validates the spec only (servers × GPUs per server), so a run can check its rank count
    (TP × EP) before paying for a large build; invalid files raise the same one-line errors.
    """
    return get_cluster_spec(name_or_path).num_gpus


def get_topology(name_or_path: str, nic_switch_delay_s: float = 0.7e-6) -> Topology:
    """Build (once per process and delay; a YAML file again when it changes) the named topology.

    ``nic_switch_delay_s`` is the network mode's NIC–switch delay: 0.7 µs IB-like, 1 µs RoCE.
    """
    name_or_path = str(name_or_path)
    key, stamp = _resolve(name_or_path)
    hit = _BUILT.get((key, nic_switch_delay_s))
    if hit is None or hit[0] != stamp:
        topo = build_topology(get_cluster_spec(name_or_path), nic_switch_delay_s)
        hit = _BUILT[(key, nic_switch_delay_s)] = (stamp, topo)
    return hit[1]
