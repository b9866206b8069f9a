"""Rank placement: which GPU each rank runs on.

The study's placement is contiguous (docs/study.md §4): rank r on server r // G, and because a
template lists its GPUs four per PCIe switch, each consecutive four local ranks share a switch. As
GPUs are numbered server-major in template order, contiguous placement is simply rank r = GPU r.
Any other bijection can be given as an explicit rank → GPU map (GPU indices or names).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from moesim.errors import MoesimError, input_error
from moesim.topology.model import Topology


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
        check_rank_count(topology, self.num_ranks)
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
    try:
        text = path.read_text(encoding="utf-8")
        data = json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
    except (OSError, ValueError, yaml.YAMLError) as exc:
        raise MoesimError(f"{path}: cannot read the placement ({str(exc).splitlines()[0]})") from None
    if not isinstance(data, list | dict):
        raise input_error(str(path), "(top level)", "expected a list or a mapping of rank to GPU")
    return Placement.from_mapping(data, topology, source=str(path))
