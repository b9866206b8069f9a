"""Words for the report's axes, legends and tables: what a factor is, what a topology number stands for.

A built-in topology is named by a number ("1".."6"); a reader needs its shape, so figures label it
from the topology registry (``moesim.topology.study``): servers, GPUs and NICs per server. Names the
registry does not know (a user's YAML topology) are shown as they are.
"""

from __future__ import annotations

from moesim.topology.study import TOPOLOGIES

FACTOR_WORDS = {
    "model": "model", "topology": "server topology", "strategy": "parallel strategy (TP × EP)",
    "algorithm": "collective algorithm", "network": "network mode", "backend": "network backend",
    "tokens": "tokens per batch", "jitter_seed": "start-jitter seed",
}
METRIC_WORDS = {"wall_s": "wall time", "gpu_s": "GPU time", "comm_s": "communication time"}


def factor_words(factor: str) -> str:
    """The factor as words for an axis label ("parallel strategy (TP × EP)"); unknown names as they are."""
    return FACTOR_WORDS.get(factor, factor.replace("_", " "))


def metric_words(metric: str) -> str:
    return METRIC_WORDS.get(metric, metric.replace("_", " "))


def _count(n: int, noun: str, plural: str = "") -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {plural or noun + 's'}"


def topology_shape(name: str) -> tuple[int, int, int, str] | None:
    """(servers, GPUs per server, NICs per server, what the GPUs hang on) of a built-in topology, else None."""
    if name not in TOPOLOGIES:
        return None
    spec = TOPOLOGIES.get(name)
    server = spec.server
    on = _count(len(server.pcie_switches), "PCIe switch", "PCIe switches") if server.pcie_switches else \
        _count(len(server.cpus), "CPU")
    return spec.num_servers, len(server.gpus), len(server.nics), on


def topology_label(name: str) -> str:
    """``T4: 4 servers × 8 GPUs on 2 PCIe switches, 2 NICs each`` for a built-in topology; others unchanged."""
    shape = topology_shape(name)
    if shape is None:
        return name
    servers, gpus, nics, on = shape
    nic = f"{_count(nics, 'NIC')} each" if nics else "no NIC"
    return f"T{name}: {_count(servers, 'server')} × {_count(gpus, 'GPU')} on {on}, {nic}"


def topology_tick(name: str) -> str:
    """A three-line tick label (``T4`` / ``4×8 GPU, 2 NIC`` / ``2 PCIe sw``); other names unchanged."""
    shape = topology_shape(name)
    if shape is None:
        return name
    servers, gpus, nics, on = shape
    return f"T{name}\n{servers}×{gpus} GPU, {nics or 'no'} NIC\n{on.replace('switches', 'sw').replace('switch', 'sw')}"


def level_label(factor: str, level: str, tick: bool = False) -> str:
    """A level as shown in a figure: topologies by their shape, other levels as they are."""
    if factor == "topology":
        return topology_tick(level) if tick else topology_label(level)
    return level


def topology_table_rows(names: tuple[str, ...]) -> list[dict[str, object]]:
    """One row per topology: label, servers, GPUs and NICs per server, and the registry's description."""
    rows: list[dict[str, object]] = []
    for name in names:
        shape = topology_shape(name)
        rows.append({"topology": name, "label": topology_label(name),
                     "servers": shape[0] if shape else None, "gpus_per_server": shape[1] if shape else None,
                     "nics_per_server": shape[2] if shape else None,
                     "description": TOPOLOGIES.entry(name).description if shape else "not a built-in topology"})
    return rows
