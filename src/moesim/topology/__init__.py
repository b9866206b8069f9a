"""moesim.topology: server topologies (docs/study.md §4), server templates, GPU interconnect domains,
routing, placement, YAML, NS-3 export.

Diagrams live in ``moesim.topology.draw`` (imported on demand: it loads matplotlib).
"""

from moesim.topology.builder import (
    LINK_KINDS,
    CableSpec,
    ClusterSpec,
    GpuSpec,
    ServerTemplate,
    TopologyBuilder,
    build_topology,
)
from moesim.topology.catalog import TopologyRef, get_cluster_spec, get_topology, parse_topology
from moesim.topology.domains import GPU_DOMAINS, GpuDomain, MeshDomain, NvSwitchDomain
from moesim.topology.fabrics import FABRICS, Fabric, LeafSpine, NoFabric, RailOptimized, SingleSwitch
from moesim.topology.model import GpuInfo, Link, NodeKind, Topology, TopoNode
from moesim.topology.ns3_export import Ns3Topology, read_ns3_topology, write_ns3_topology
from moesim.topology.placement import Placement, check_rank_count, contiguous_placement, load_placement
from moesim.topology.study import TOPOLOGIES
from moesim.topology.templates import SERVER_TEMPLATES
from moesim.topology.yaml_io import dump_cluster_yaml, load_cluster_yaml, write_cluster_yaml

__all__ = [
    "FABRICS", "GPU_DOMAINS", "LINK_KINDS", "SERVER_TEMPLATES", "TOPOLOGIES",
    "CableSpec", "ClusterSpec", "Fabric", "GpuDomain", "GpuInfo", "GpuSpec", "LeafSpine", "Link", "MeshDomain",
    "NoFabric", "NodeKind", "Ns3Topology", "NvSwitchDomain", "Placement", "RailOptimized", "ServerTemplate",
    "SingleSwitch", "TopoNode", "Topology", "TopologyBuilder", "TopologyRef",
    "build_topology", "check_rank_count", "contiguous_placement", "dump_cluster_yaml", "get_cluster_spec",
    "get_topology", "load_cluster_yaml", "load_placement", "parse_topology", "read_ns3_topology", "write_cluster_yaml",
    "write_ns3_topology",
]
