"""Look up a topology by registry name ("1".."6") or by the path of a YAML file, and build it."""

from __future__ import annotations

from pathlib import Path

from moesim.errors import MoesimError
from moesim.topology.builder import ClusterSpec, build_topology
from moesim.topology.model import Topology
from moesim.topology.study import TOPOLOGIES
from moesim.topology.yaml_io import load_cluster_yaml

_BUILT: dict[tuple[object, ...], Topology] = {}


def is_yaml_path(name_or_path: str) -> bool:
    return str(name_or_path).lower().endswith((".yaml", ".yml")) or Path(name_or_path).is_file()


def get_cluster_spec(name_or_path: str) -> ClusterSpec:
    """The spec of a registered topology, or the validated spec of a YAML file."""
    name_or_path = str(name_or_path)
    if name_or_path in TOPOLOGIES:
        return TOPOLOGIES.get(name_or_path)
    if is_yaml_path(name_or_path):
        return load_cluster_yaml(name_or_path)
    raise MoesimError(
        f"unknown topology '{name_or_path}' (allowed: {', '.join(TOPOLOGIES.names())}, or a path to a .yaml file)"
    )


def get_topology(name_or_path: str, nic_switch_delay_s: float = 0.7e-6) -> Topology:
    """Build (once per process and delay; a YAML file again when it changes) the named topology.

    ``nic_switch_delay_s`` is the network mode's NIC–switch delay: 0.7 µs IB-like, 1 µs RoCE.
    """
    name_or_path = str(name_or_path)
    if name_or_path in TOPOLOGIES:
        key: tuple[object, ...] = ("builtin", name_or_path, nic_switch_delay_s)
    elif is_yaml_path(name_or_path):
        path = Path(name_or_path)
        try:
            st = path.stat()
        except OSError:
            return build_topology(get_cluster_spec(name_or_path), nic_switch_delay_s)  # raises the read error
        key = ("yaml", str(path.resolve()), st.st_mtime_ns, st.st_size, nic_switch_delay_s)
    else:
        get_cluster_spec(name_or_path)  # raises the "unknown topology" error
        raise AssertionError("unreachable")
    topo = _BUILT.get(key)
    if topo is None:
        topo = _BUILT[key] = build_topology(get_cluster_spec(name_or_path), nic_switch_delay_s)
    return topo
