"""The six study topologies (docs/study.md §4), as ClusterSpecs for the public builder.

Link parameters: GPU/NIC ↔ CPU or PCIe switch 512 Gbps, 0.2 µs ("pcie"); PCIe switch ↔ PCIe switch
400 Gbps, 0.1 µs ("p2p"); CPU ↔ CPU UPI 400 Gbps, 2 µs; NIC ↔ external switch 400 Gbps with the
run's NIC–switch delay (0.7 µs IB-like, 1 µs RoCE). Choices the study leaves open (docs/topology.md):
each PCIe switch hangs under a CPU by a 512 Gbps, 0.2 µs "pcie" uplink (switches 0..k/2−1 under
CPU 0, the rest under CPU 1), and the two CPUs of topologies 4–6 are joined by UPI as in topology 3.
Neither changes a route: direct switch–switch links are fewer hops.
GPUs are listed so that each consecutive four share a PCIe switch (contiguous placement).
"""

from __future__ import annotations

from itertools import combinations

from moesim.registry import Registry
from moesim.topology.builder import CableSpec, ClusterSpec, GpuSpec, ServerTemplate
from moesim.topology.fabrics import NoFabric, SingleSwitch

PCIE_BPS, PCIE_DELAY_S = 512e9, 0.2e-6
P2P_BPS, P2P_DELAY_S = 400e9, 0.1e-6
UPI_BPS, UPI_DELAY_S = 400e9, 2e-6
NIC_SWITCH_BPS = 400e9
GPUS_PER_PCIE_SWITCH = 4
STUDY_REFERENCE = "docs/study.md §4"

TOPOLOGIES: Registry[ClusterSpec] = Registry("topology")


def _pcie(a: str, b: str) -> CableSpec:
    return CableSpec(a, b, PCIE_BPS, PCIE_DELAY_S, "pcie")


def _upi(a: str, b: str) -> CableSpec:
    return CableSpec(a, b, UPI_BPS, UPI_DELAY_S, "upi")


def _gpus(n: int) -> tuple[GpuSpec, ...]:
    return tuple(GpuSpec(f"gpu{i}") for i in range(n))


def _switched_server(num_switches: int, with_nics: bool) -> ServerTemplate:
    """Topologies 4–6: 2 CPUs, four GPUs (+ one NIC) per PCIe switch, switches in a full mesh."""
    cpus = ("cpu0", "cpu1")
    psws = tuple(f"psw{k}" for k in range(num_switches))
    nics = tuple(f"nic{k}" for k in range(num_switches)) if with_nics else ()
    cables: list[CableSpec] = [_upi("cpu0", "cpu1")]
    for k, psw in enumerate(psws):
        cables.append(_pcie(psw, cpus[0] if k < num_switches // 2 else cpus[1]))
        for i in range(k * GPUS_PER_PCIE_SWITCH, (k + 1) * GPUS_PER_PCIE_SWITCH):
            cables.append(_pcie(f"gpu{i}", psw))
        if with_nics:
            cables.append(_pcie(nics[k], psw))
    cables += [CableSpec(a, b, P2P_BPS, P2P_DELAY_S, "p2p") for a, b in combinations(psws, 2)]
    return ServerTemplate(cpus, psws, _gpus(num_switches * GPUS_PER_PCIE_SWITCH), nics, tuple(cables))


_FABRIC = SingleSwitch(nic_bandwidth_bps=NIC_SWITCH_BPS)

_STUDY = (
    ("1", "32 servers × (1 CPU, 1 GPU, 1 NIC); GPU and NIC on the CPU", 32, ServerTemplate(
        ("cpu0",), (), _gpus(1), ("nic0",), (_pcie("gpu0", "cpu0"), _pcie("nic0", "cpu0"))), _FABRIC),
    ("2", "16 servers × (1 CPU, 1 PCIe switch with 2 GPUs + 1 NIC)", 16, ServerTemplate(
        ("cpu0",), ("psw0",), _gpus(2), ("nic0",),
        (_pcie("psw0", "cpu0"), _pcie("gpu0", "psw0"), _pcie("gpu1", "psw0"), _pcie("nic0", "psw0"))), _FABRIC),
    ("3", "16 servers × (2 CPUs joined by UPI, one GPU each, NIC on CPU 0)", 16, ServerTemplate(
        ("cpu0", "cpu1"), (), _gpus(2), ("nic0",),
        (_upi("cpu0", "cpu1"), _pcie("gpu0", "cpu0"), _pcie("gpu1", "cpu1"), _pcie("nic0", "cpu0"))), _FABRIC),
    ("4", "4 servers × (2 CPUs, 2 PCIe switches directly linked, 4 GPUs + 1 NIC each)", 4,
     _switched_server(2, with_nics=True), _FABRIC),
    ("5", "2 servers × (2 CPUs, 4 PCIe switches in a full mesh K4, 4 GPUs + 1 NIC each)", 2,
     _switched_server(4, with_nics=True), _FABRIC),
    ("6", "1 server × (2 CPUs, 8 PCIe switches in a full mesh K8, 4 GPUs each); no NIC, no network", 1,
     _switched_server(8, with_nics=False), NoFabric()),
)

for _name, _desc, _servers, _template, _fabric in _STUDY:
    TOPOLOGIES.register(_name, _desc, STUDY_REFERENCE)(
        ClusterSpec(name=_name, server=_template, num_servers=_servers, fabric=_fabric, description=_desc)
    )
