"""Built-in server templates of current GPU systems, joined by a rail-optimized or a classic leaf/spine fabric.

A template is selected by name wherever a topology is accepted: ``NAME[:SERVERS[:FABRIC]]``, e.g.
``hgx-h100`` (one server), ``hgx-h800:4`` (four servers, rail-optimized fabric), ``mi300x:16:ls3``
(sixteen servers on a classic leaf/spine, 3:1 oversubscribed). Each names its GPU model (``gpus.py``),
whose data sheet gives the GPU-link bandwidth (per direction: half the sheet's total, which counts both
directions); the NICs follow the server data sheets cited per template. Not
in the data sheets, so chosen here (docs/topology.md): NVLink/Infinity Fabric delay 0.1 µs per hop;
PCIe Gen5 x16 = 512 Gbps per direction, 0.2 µs, as in the study topologies; each GPU and its NIC on
one PCIe switch (x86 servers) or cabled straight together (GB200 compute trays); NIC–switch delay
from the run's network mode; gb200-nvl72's one 400 Gb/s NIC per GPU (ConnectX-7 class, as in the
x86 servers; the NVL72 page does not fix the scale-out NIC).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

from moesim.errors import MoesimError
from moesim.registry import Registry
from moesim.topology.builder import CableSpec, ClusterSpec, GpuSpec, ServerTemplate
from moesim.topology.domains import GpuDomain, MeshDomain, NvSwitchDomain
from moesim.topology.fabrics import Fabric, LeafSpine, RailOptimized
from moesim.topology.gpus import GPU_MODELS

PCIE_BPS, PCIE_DELAY_S = 512e9, 0.2e-6        # PCIe Gen5 x16: 64 GB/s per direction
UPI_BPS, UPI_DELAY_S = 400e9, 2e-6            # CPU ↔ CPU, as in the study topologies
GPU_LINK_DELAY_S = 0.1e-6                     # one NVLink / Infinity Fabric hop (assumed)
NIC_BPS = 400e9                               # ConnectX-7 / 400G Ethernet NIC
RAIL_SERVERS_PER_LEAF = 32                    # a DGX SuperPOD scalable unit: 32 servers per rail leaf
SPINES = 8
LEAF_NIC_PORTS = 32                           # classic leaf: 64 ports, half to NICs, half to spines

FABRIC_FORMS = ("rail", "ls", "ls<R> (R:1 oversubscribed, e.g. ls3)")
_NAME = re.compile(r"(?P<name>[a-z0-9-]+)(?::(?P<servers>[^:]*))?(?::(?P<fabric>[^:]*))?")
_LEAF_SPINE = re.compile(r"ls(?P<ratio>[0-9]+(?:\.[0-9]+)?)?")


@dataclass(frozen=True)
class ServerKind:
    """A built-in server: its template; the name of a cluster of N of them is ``<name>:<N>``."""

    name: str
    server: ServerTemplate
    description: str
    gpu: str
    """Its GPU model (``gpus.GPU_MODELS``): the source of its GPU-link bandwidth."""

    def cluster(self, servers: int = 1, fabric: Fabric | None = None) -> ClusterSpec:
        """``servers`` copies on ``fabric`` (default: rail-optimized, non-blocking)."""
        fabric = fabric or RailOptimized(servers_per_leaf=RAIL_SERVERS_PER_LEAF, spines=SPINES, nic_bandwidth_bps=NIC_BPS)
        return ClusterSpec(self.name, self.server, servers, fabric, self.description)


SERVER_TEMPLATES: Registry[ServerKind] = Registry("server template")


def _x86_server(gpus: int, domain: GpuDomain) -> ServerTemplate:
    """Two CPUs joined by UPI; GPU k and NIC k on PCIe switch k (switches 0..n/2−1 under CPU 0)."""
    cables = [CableSpec("cpu0", "cpu1", UPI_BPS, UPI_DELAY_S, "upi")]
    for k in range(gpus):
        cables += [CableSpec(f"psw{k}", "cpu0" if k < gpus // 2 else "cpu1", PCIE_BPS, PCIE_DELAY_S, "pcie"),
                   CableSpec(f"gpu{k}", f"psw{k}", PCIE_BPS, PCIE_DELAY_S, "pcie"),
                   CableSpec(f"nic{k}", f"psw{k}", PCIE_BPS, PCIE_DELAY_S, "pcie")]
    return ServerTemplate(("cpu0", "cpu1"), tuple(f"psw{k}" for k in range(gpus)),
                          tuple(GpuSpec(f"gpu{k}", f"nic{k}") for k in range(gpus)),
                          tuple(f"nic{k}" for k in range(gpus)), tuple(cables), domain)


def _rack(gpus: int, domain: GpuDomain) -> ServerTemplate:
    """A rack-scale NVLink domain: GPU k cabled to its own NIC k; no CPU on the data path."""
    return ServerTemplate((), (), tuple(GpuSpec(f"gpu{k}", f"nic{k}") for k in range(gpus)),
                          tuple(f"nic{k}" for k in range(gpus)),
                          tuple(CableSpec(f"gpu{k}", f"nic{k}", PCIE_BPS, PCIE_DELAY_S, "pcie") for k in range(gpus)),
                          domain)


def _per_direction_bps(gpu: str, links: int = 1) -> float:
    """A GPU's NVLink / Infinity Fabric bandwidth per direction and link in bit/s: its data sheet's total
    (both directions) halved, split over ``links`` links."""
    return GPU_MODELS.get(gpu).gpu_link_bytes_per_s * 8 / 2 / links


def _nvswitch(gpu: str) -> NvSwitchDomain:
    return NvSwitchDomain(_per_direction_bps(gpu), GPU_LINK_DELAY_S)


# name, GPU model, description, source, server
_SERVERS = (
    ("hgx-h100", "h100", "8 × H100 on an NVSwitch, 450 GB/s per GPU and direction; 8 × 400 Gb/s NICs",
     "NVIDIA DGX H100 data sheet (NVLink 900 GB/s per GPU, 8 × ConnectX-7 400 Gb/s)",
     _x86_server(8, _nvswitch("h100"))),
    ("hgx-h800", "h800", "8 × H800 on an NVSwitch, 200 GB/s per GPU and direction; 8 × 400 Gb/s NICs",
     "NVIDIA H800 data sheet (NVLink 400 GB/s per GPU); DeepSeek-V3 technical report §3.1, §3.2.2 (IB 50 GB/s "
     "per GPU) and 'Insights into DeepSeek-V3' (ISCA 2025): eight 400 Gb/s InfiniBand ConnectX-7 per node, one per GPU",
     _x86_server(8, _nvswitch("h800"))),
    ("hgx-h20", "h20", "8 × H20 on an NVSwitch, 450 GB/s per GPU and direction; 8 × 400 Gb/s NICs",
     "NVIDIA HGX H20 partner specification (NVLink 900 GB/s per GPU); one 400 Gb/s ConnectX-7 per GPU as in "
     "the HGX H100 servers it replaces (the NIC is the server vendor's choice)",
     _x86_server(8, _nvswitch("h20"))),
    ("hgx-h200", "h200", "8 × H200 on an NVSwitch, 450 GB/s per GPU and direction; 8 × 400 Gb/s NICs",
     "NVIDIA H200 data sheet (NVLink 900 GB/s per GPU); DGX H200 data sheet (8 × ConnectX-7 400 Gb/s)",
     _x86_server(8, _nvswitch("h200"))),
    ("hgx-b200", "b200", "8 × B200 on an NVSwitch, 900 GB/s per GPU and direction; 8 × 400 Gb/s NICs",
     "NVIDIA HGX B200 specification (NVLink 5, 1.8 TB/s per GPU); DGX B200 data sheet (8 × single-port "
     "ConnectX-7 400 Gb/s)",
     _x86_server(8, _nvswitch("b200"))),
    ("mi300x", "mi300x", "8 × MI300X in a full mesh, 7 links of 64 GB/s per direction each; 8 × 400 Gb/s NICs",
     "AMD Instinct MI300X platform data sheet (7 Infinity Fabric links of 128 GB/s per GPU)",
     _x86_server(8, MeshDomain(_per_direction_bps("mi300x", 7), GPU_LINK_DELAY_S))),
    ("gb200-nvl72", "gb200",
     "a rack of 72 GPUs on one NVLink domain, 900 GB/s per GPU and direction; a 400 Gb/s NIC per GPU",
     "NVIDIA GB200 NVL72 page (72 GPUs, 130 TB/s NVLink = 1.8 TB/s per GPU)",
     _rack(72, _nvswitch("gb200"))),
)

for _name, _gpu, _desc, _ref, _server in _SERVERS:
    SERVER_TEMPLATES.register(_name, _desc, _ref)(ServerKind(_name, _server, _desc, _gpu))


def template_names() -> list[str]:
    """Names as shown in listings and errors: ``hgx-h100[:N[:FABRIC]]``, ..."""
    return [f"{n}[:N[:FABRIC]]" for n in SERVER_TEMPLATES.names()]


def _fabric(text: str, nics_per_server: int, name: str) -> Fabric:
    if text == "rail":
        return RailOptimized(servers_per_leaf=RAIL_SERVERS_PER_LEAF, spines=SPINES, nic_bandwidth_bps=NIC_BPS)
    m = _LEAF_SPINE.fullmatch(text)
    ratio = float(m.group("ratio") or 1) if m else 0.0
    if not 1 <= ratio <= 1000:
        raise MoesimError(f"topology '{name}': unknown fabric '{text}' (allowed: {', '.join(FABRIC_FORMS)}; "
                          "R from 1 to 1000)")
    return LeafSpine(servers_per_leaf=max(1, LEAF_NIC_PORTS // nics_per_server), spines=SPINES,
                     oversubscription=ratio, nic_bandwidth_bps=NIC_BPS)


def parse_template(name: str) -> tuple[ServerKind, int, str | None] | None:
    """(template, servers, fabric as written) of ``NAME[:SERVERS[:FABRIC]]`` for a registered template NAME,
    else None; a known NAME with a bad server count is a one-line error listing the allowed forms."""
    m = _NAME.fullmatch(name)
    if m is None or m.group("name") not in SERVER_TEMPLATES:
        return None
    kind = SERVER_TEMPLATES.get(m.group("name"))
    servers_text = m.group("servers")
    if servers_text is None:
        return kind, 1, None
    if not re.fullmatch(r"[0-9]+", servers_text) or int(servers_text) < 1:
        raise MoesimError(f"topology '{name}': the server count '{servers_text}' is not a positive integer "
                          f"(allowed: {kind.name}, {kind.name}:N, {kind.name}:N:FABRIC)")
    return kind, int(servers_text), m.group("fabric")


def template_name(template: str, servers: int, fabric: str | None = None) -> str:
    """The name ``NAME:SERVERS[:FABRIC]`` that ``parse_template`` reads back."""
    return ":".join([template, str(servers), *([fabric] if fabric is not None else [])])


def template_spec(name: str) -> ClusterSpec | None:
    """The cluster named ``NAME[:SERVERS[:FABRIC]]`` for a registered template NAME, else None.

    A known NAME with a bad server count or fabric is a one-line error listing the allowed forms.
    """
    parsed = parse_template(name)
    if parsed is None:
        return None
    kind, servers, fabric_text = parsed
    fabric = _fabric(fabric_text, len(kind.server.nics), name) if fabric_text is not None else None
    return replace(kind.cluster(servers, fabric), name=name)
