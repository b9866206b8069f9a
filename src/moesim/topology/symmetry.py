"""Interchangeable parts of a topology, so that a placement search scores one mapping per symmetry class.

Two kinds of symmetry are detected, each checked exactly (the swap maps every link onto a link of the same
bandwidth, delay and kind, and every GPU's NIC affinity onto the swapped GPU's):

* **servers**: servers built alike and cabled to the same fabric ports' peers (e.g. every server of a
  single-switch fabric, or the servers under one leaf);
* **GPU slots**: GPUs of one server with the same neighbours and the same NIC (e.g. the four GPUs under one
  PCIe switch of study topology 6).

Swapping whole sub-server groups (two PCIe switches with their GPUs) is not detected: such mappings are
scored separately, which costs evaluations, never correctness. A placement's canonical key is equal for two
placements exactly when one follows from the other by the detected swaps.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from moesim.topology.model import Topology

CanonicalKey = tuple[object, ...]


def _local(name: str, server: int | None) -> str:
    """A node's name inside its server (``s3.gpu1`` → ``gpu1``); fabric nodes keep their name."""
    if server is None:
        return name
    return name.split(".", 1)[1] if "." in name else "host"


@dataclass(frozen=True)
class Symmetry:
    """``server_class[s]``: the class of server s; ``slot[g]``: the label of GPU g's slot class (the local
    name of the class's first GPU, equal across servers of one class)."""

    server_class: dict[int, int]
    slot: tuple[str, ...]
    gpu_server: tuple[int, ...]

    @classmethod
    def of(cls, topology: Topology) -> Symmetry:
        nodes = topology.node_by_name
        server_of = {n.name: n.server for n in topology.nodes}

        def end(name: str, home: int) -> tuple[str, str]:
            s = server_of[name]
            return ("in", _local(name, s)) if s == home else ("out", name)

        # servers: local structure, with links leaving the server named by their far end
        signature: dict[int, list[tuple[object, ...]]] = defaultdict(list)
        for link in topology.links:
            for home in {server_of[link.src], server_of[link.dst]} - {None}:
                assert home is not None
                signature[home].append((end(link.src, home), end(link.dst, home), link.bandwidth_bps,
                                        link.delay_s, link.kind))
        for g in topology.gpus:
            signature[g.server].append(("affinity", _local(g.name, g.server),
                                        _local(g.nic, g.server) if g.nic else ""))
        classes: dict[tuple[object, ...], int] = {}
        server_class = {s: classes.setdefault(tuple(sorted(map(repr, sig))), len(classes))
                        for s, sig in sorted(signature.items())}

        # GPU slots: same neighbours (the other GPU of the pair counted as itself), same NIC
        neighbours: dict[str, list[tuple[str, str, float, float, str]]] = defaultdict(list)
        for link in topology.links:
            if nodes[link.src].kind == "gpu":
                neighbours[link.src].append(("out", link.dst, link.bandwidth_bps, link.delay_s, link.kind))
            if nodes[link.dst].kind == "gpu":
                neighbours[link.dst].append(("in", link.src, link.bandwidth_bps, link.delay_s, link.kind))

        def swappable(a: str, b: str) -> bool:
            def view(g: str, other: str) -> list[tuple[str, str, float, float, str]]:
                return sorted((d, "*" if n in (g, other) else n, bw, dl, k) for d, n, bw, dl, k in neighbours[g])

            return view(a, b) == view(b, a)

        slot: list[str] = []
        reps: dict[tuple[int, str | None], list[int]] = defaultdict(list)  # (server, NIC) → slot representatives
        for i, g in enumerate(topology.gpus):
            group = reps[(g.server, g.nic)]
            rep = next((j for j in group if swappable(topology.gpus[j].name, g.name)), None)
            if rep is None:
                group.append(i)
                rep = i
            slot.append(_local(topology.gpus[rep].name, g.server))
        return cls(server_class, tuple(slot), tuple(g.server for g in topology.gpus))

    def canonical_key(self, rank_to_gpu: tuple[int, ...]) -> CanonicalKey:
        """Equal for placements that differ only by swaps of interchangeable servers and GPU slots."""
        per_server: dict[int, dict[str, list[int]]] = defaultdict(lambda: defaultdict(list))
        for rank, gpu in enumerate(rank_to_gpu):
            per_server[self.gpu_server[gpu]][self.slot[gpu]].append(rank)
        by_class: dict[int, list[tuple[tuple[str, tuple[int, ...]], ...]]] = defaultdict(list)
        for server, slots in per_server.items():
            by_class[self.server_class[server]].append(tuple(sorted((s, tuple(sorted(r))) for s, r in slots.items())))
        return tuple(sorted((c, tuple(sorted(v))) for c, v in by_class.items()))

    def count_classes(self) -> tuple[int, int]:
        """(server classes, GPU slot classes) — how much symmetry was found."""
        return len(set(self.server_class.values())), len(set(zip(self.gpu_server, self.slot, strict=True)))
