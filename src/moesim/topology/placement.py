"""Rank placement: which GPU each rank runs on.

The study's placement is contiguous (docs/study.md §4): rank r on server r // G, and because a
template lists its GPUs four per PCIe switch, each consecutive four local ranks share a switch. As
GPUs are numbered server-major in template order, contiguous placement is simply rank r = GPU r.
Any other bijection is either a named rule (``PLACEMENT_RULES``: TP groups or EP groups packed into
servers, or a server's GPUs taken round-robin over its NICs) or an explicit rank → GPU map in a YAML or
JSON file (GPU indices or names). Rank r of a [TP, EP] layout has TP index r mod TP and EP index r // TP.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from moesim.errors import MoesimError, input_error
from moesim.fileio import refuse_special_file
from moesim.registry import Registry
from moesim.topology.model import Topology

PlacementRule = Callable[[Topology, int, int], tuple[int, ...]]
"""(topology, TP, EP) → rank_to_gpu: one named way of mapping a [TP, EP] layout onto a topology's GPUs."""
PLACEMENT_RULES: Registry[PlacementRule] = Registry("placement rule")
DEFAULT_PLACEMENT = "contiguous"
INLINE = re.compile(r"\d+(,\d+)+")
"""An inline placement: GPU indices by rank, comma-separated (what ``moesim place`` prints)."""


def topology_source(topology: Topology) -> str:
    """How errors name a topology: its YAML file, or ``topology <name>`` for a built-in one."""
    src = topology.meta_value("source")
    return src if src and src != "builtin" else f"topology {topology.name}"


def check_rank_count(topology: Topology, num_ranks: int) -> None:
    """A run needs exactly one GPU per rank."""
    if topology.num_gpus != num_ranks:
        servers = topology.meta_value("servers", str(topology.num_servers))
        per = topology.meta_value("gpus_per_server", "?")
        raise input_error(
            topology_source(topology), "servers",
            f"{topology.num_gpus} GPUs ({servers} servers × {per} GPUs) do not match the run's {num_ranks} ranks",
        )


@dataclass(frozen=True)
class Placement:
    """``rank_to_gpu[r]`` is the GPU index of rank r (a permutation of the topology's GPUs)."""

    rank_to_gpu: tuple[int, ...]

    @classmethod
    def contiguous(cls, num_ranks: int) -> Placement:
        return cls(tuple(range(num_ranks)))

    @property
    def num_ranks(self) -> int:
        return len(self.rank_to_gpu)

    def gpu(self, rank: int) -> int:
        return self.rank_to_gpu[rank]

    def gpu_to_rank(self) -> dict[int, int]:
        return {g: r for r, g in enumerate(self.rank_to_gpu)}

    def is_contiguous(self) -> bool:
        return self.rank_to_gpu == tuple(range(self.num_ranks))

    def validate(self, topology: Topology, source: str = "placement") -> None:
        """Every GPU exactly once, one rank per GPU."""
        if self.num_ranks != topology.num_gpus:
            raise input_error(source, "ranks", f"{self.num_ranks} ranks for the {topology.num_gpus} GPUs of "
                              f"{topology_source(topology)} (one rank per GPU)")
        seen: dict[int, int] = {}
        for r, g in enumerate(self.rank_to_gpu):
            if not 0 <= g < topology.num_gpus:
                raise input_error(source, f"rank {r}", f"GPU index {g} out of range", [f"0..{topology.num_gpus - 1}"])
            if g in seen:
                raise input_error(source, f"rank {r}", f"GPU {g} already holds rank {seen[g]}")
            seen[g] = r

    @classmethod
    def from_mapping(cls, mapping: Sequence[Any] | Mapping[Any, Any], topology: Topology,
                     source: str = "placement") -> Placement:
        """A list (index = rank) or a {rank: gpu} mapping; GPUs by index or by name (e.g. ``s1.gpu3``)."""
        if isinstance(mapping, Mapping):
            try:
                items = {int(k): v for k, v in mapping.items()}
            except (TypeError, ValueError):
                raise input_error(source, "ranks", "keys must be rank numbers") from None
            missing = [r for r in range(len(items)) if r not in items]
            if missing:
                raise input_error(source, f"rank {missing[0]}", "missing (ranks must be 0..N-1)")
            values = [items[r] for r in range(len(items))]
        else:
            values = list(mapping)
        gpus = []
        for r, v in enumerate(values):
            if isinstance(v, str) and v in topology.gpu_index:
                gpus.append(topology.gpu_index[v])
            elif isinstance(v, int) and not isinstance(v, bool):
                gpus.append(v)
            else:
                raise input_error(source, f"rank {r}", f"unknown GPU {v!r} (a GPU index or a name such as "
                                  f"'{topology.gpus[0].name}')")
        placement = cls(tuple(gpus))
        placement.validate(topology, source)
        return placement


def contiguous_placement(topology: Topology, num_ranks: int | None = None) -> Placement:
    """Rank r on GPU r, after checking the rank count against the GPU count."""
    n = topology.num_gpus if num_ranks is None else num_ranks
    check_rank_count(topology, n)
    return Placement.contiguous(n)


def load_placement(path: str | Path, topology: Topology) -> Placement:
    """Read a rank → GPU map from a JSON or YAML file (a list, or a mapping of rank to GPU)."""
    path = Path(path)
    refuse_special_file(path, "placement file")
    try:
        text = path.read_text(encoding="utf-8")
        data = json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
    except (OSError, ValueError, yaml.YAMLError) as exc:
        raise MoesimError(f"{path}: cannot read the placement ({str(exc).splitlines()[0]})") from None
    if not isinstance(data, list | dict):
        raise input_error(str(path), "(top level)", "expected a list or a mapping of rank to GPU")
    return Placement.from_mapping(data, topology, source=str(path))


@PLACEMENT_RULES.register("contiguous", "rank r on GPU r: TP groups packed into servers and PCIe switches (default)",
                          "docs/study.md §4")
def _contiguous(topology: Topology, tp: int, ep: int) -> tuple[int, ...]:
    return tuple(range(tp * ep))


@PLACEMENT_RULES.register("ep-within-server", "EP groups packed into servers: rank (TP index t, EP index e) on GPU "
                          "t·EP + e", "docs/topology.md, Placement")
def _ep_within_server(topology: Topology, tp: int, ep: int) -> tuple[int, ...]:
    return tuple((r % tp) * ep + r // tp for r in range(tp * ep))


@PLACEMENT_RULES.register("round-robin-nic", "servers in order, each server's GPUs taken round-robin over its NICs, "
                          "so a TP group spreads over the NICs", "docs/topology.md, Placement")
def _round_robin_nic(topology: Topology, tp: int, ep: int) -> tuple[int, ...]:
    order: list[int] = []
    for server in topology.servers:
        by_nic: dict[str | None, list[int]] = {}
        for g, info in enumerate(topology.gpus):
            if info.server == server:
                by_nic.setdefault(info.nic, []).append(g)
        queues = list(by_nic.values())
        while any(queues):
            order.extend(q.pop(0) for q in queues if q)
    return tuple(order[: tp * ep])


def resolve_placement(value: str, topology: Topology, tp: int, ep: int, source: str = "placement") -> Placement:
    """A placement from a rule name (``PLACEMENT_RULES``), an inline GPU list (``"0,4,1,5,..."``: rank r on
    the r-th GPU index) or the path of a YAML/JSON rank → GPU file, checked against the topology; ``source``
    names the run in errors."""
    if value in PLACEMENT_RULES.names():
        check_rank_count(topology, tp * ep)
        placement = Placement(PLACEMENT_RULES.get(value)(topology, tp, ep))
        placement.validate(topology, f"placement rule {value}")
        return placement
    if INLINE.fullmatch(value.replace(" ", "")):
        return Placement.from_mapping([int(g) for g in value.split(",")], topology, source=f"{source}: placement")
    if not str(value).lower().endswith((".yaml", ".yml", ".json")):
        raise MoesimError(f"{source}: field 'placement': unknown rule {value!r} "
                          f"(allowed: {', '.join(PLACEMENT_RULES.names())}, a comma-separated GPU list, "
                           "or a .yaml/.json file)")
    placement = load_placement(value, topology)
    if placement.num_ranks != tp * ep:
        raise input_error(str(value), "ranks", f"{placement.num_ranks} ranks, the run has {tp * ep}")
    return placement


def check_ep_nodes(topology: Topology, placement: Placement, tp: int, ep: int, nodes: int, source: str) -> None:
    """EPLB's hierarchical policy (``workload/eplb.py``) takes node n of ``nodes`` to hold the consecutive
    EP ranks n·EP/nodes … (n+1)·EP/nodes − 1 of every EP group: each such block must sit in one server."""
    per = ep // nodes
    for t in range(tp):
        for n in range(nodes):
            block = [placement.gpu(t + e * tp) for e in range(n * per, (n + 1) * per)]
            servers = sorted({topology.gpus[g].server for g in block})
            if len(servers) > 1:
                raise input_error(source, "eplb_nodes", f"{nodes} nodes: EP ranks {n * per}..{(n + 1) * per - 1} "
                                  f"of TP index {t} sit on servers {', '.join(map(str, servers))}, not one "
                                  f"(one node per {per} consecutive EP ranks)")
