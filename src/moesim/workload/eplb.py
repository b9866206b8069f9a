"""Expert-parallel load balancing with redundant experts, after DeepSeek's EPLB
(github.com/deepseek-ai/EPLB, ``eplb.py``: ``replicate_experts``, ``balanced_packing``,
``rebalance_experts_hierarchical``, ``rebalance_experts``); reimplemented here on exact loads.

Given the expected load (token rows) of each of E logical experts in one MoE layer, E + N physical
experts are spread over the EP GPUs, (E + N)/EP on each:

* **replicate**: the N redundant replicas go one at a time to the expert with the highest load per
  replica (ties: the lower expert id), so the heaviest replica is as light as it can be;
* **pack**: items (expert groups; replicas: every expert, then the redundant ones in the order made) are
  taken heaviest first (ties: the earlier item) and each goes to
  the lightest pack that still has room (ties: the lower pack), every pack ending with the same count;
  when every pack holds one item, item i goes to pack i.

Policies (``rebalance``): **hierarchical** when the expert groups (G, consecutive blocks of E/G experts,
as in group-limited routing) divide evenly over the nodes: groups are packed onto nodes by their load,
replicas are made within each node (its groups' experts in packing order) (E/nodes logical → (E + N)/nodes physical experts), and each node's
replicas are packed onto its GPUs. Otherwise **global**: the same with one group and one node.
A node holds the consecutive GPUs EP/nodes · n … EP/nodes · (n + 1) − 1.

Loads are exact (integers or Fractions), so a placement is the same on every machine.
"""

from __future__ import annotations

import heapq
from collections import Counter
from collections.abc import Sequence
from fractions import Fraction

from moesim.errors import input_error

Load = int | Fraction
POLICIES = ("hierarchical", "global")


def replicate(loads: Sequence[Load], physical: int) -> list[int]:
    """The logical expert of each of ``physical`` ≥ len(loads) physical experts: first every expert once,
    then each redundant replica, in the order made, of the expert whose load per replica is then highest
    (EPLB ``replicate_experts``)."""
    counts = [1] * len(loads)
    out = list(range(len(loads)))
    heap = [(-Fraction(w), e) for e, w in enumerate(loads)]
    heapq.heapify(heap)
    for _ in range(physical - len(loads)):
        _, e = heapq.heappop(heap)
        counts[e] += 1
        out.append(e)
        heapq.heappush(heap, (-Fraction(loads[e], counts[e]), e))
    return out


def balanced_packing(weights: Sequence[Load], packs: int) -> list[tuple[int, int]]:
    """(pack, position in the pack) of each item: len(weights)/packs items per pack, heaviest item first
    onto the lightest pack with room (EPLB ``balanced_packing``)."""
    per = len(weights) // packs
    if per == 1:
        return [(i, 0) for i in range(len(weights))]
    order = sorted(range(len(weights)), key=lambda i: (-weights[i], i))
    heap: list[tuple[Load, int]] = [(0, p) for p in range(packs)]
    filled = [0] * packs
    out = [(0, 0)] * len(weights)
    for i in order:
        load, p = heapq.heappop(heap)
        out[i] = (p, filled[p])
        filled[p] += 1
        if filled[p] < per:
            heapq.heappush(heap, (load + weights[i], p))
    return out


def policy(experts: int, groups: int, nodes: int) -> str:
    """EPLB's choice: hierarchical when the expert groups split evenly over the nodes, else global."""
    return "hierarchical" if experts % groups == 0 and groups % nodes == 0 else "global"


def check(experts: int, gpus: int, redundant: int, groups: int, nodes: int, source: str = "workload options") -> None:
    """One-line errors for a balance that cannot be laid out."""
    if (experts + redundant) % gpus:
        raise input_error(source, "redundant_experts", f"{experts} routed + {redundant} redundant experts do not "
                          f"split evenly over EP = {gpus} GPUs")
    if gpus % nodes:
        raise input_error(source, "eplb_nodes", f"{nodes} nodes do not split EP = {gpus} GPUs evenly")
    if experts % groups:
        raise input_error(source, "eplb_groups", f"{groups} groups do not split {experts} experts evenly")


def rebalance(loads: Sequence[Load], gpus: int, redundant: int, groups: int = 1,
              nodes: int = 1) -> tuple[tuple[int, ...], ...]:
    """Per GPU (EP rank), the logical experts whose replicas it holds (sorted; an expert on k GPUs, or k
    times on one, has k replicas) for one layer's ``loads`` (EPLB ``rebalance_experts``)."""
    experts = len(loads)
    check(experts, gpus, redundant, groups, nodes)
    if policy(experts, groups, nodes) == "global":
        groups, nodes = 1, 1
    group_size, per_gpu = experts // groups, (experts + redundant) // gpus
    gpus_per_node = gpus // nodes
    # 1. expert groups onto nodes, by their summed load
    group_node = balanced_packing([sum(loads[g * group_size:(g + 1) * group_size]) for g in range(groups)], nodes)
    held: list[list[int]] = [[] for _ in range(gpus)]
    for node in range(nodes):
        mine = sorted((rank, g) for g, (n, rank) in enumerate(group_node) if n == node)  # in packing order
        local = [e for _, g in mine for e in range(g * group_size, (g + 1) * group_size)]
        # 2. replicas within the node
        physical = [local[i] for i in replicate([loads[e] for e in local], (experts + redundant) // nodes)]
        replicas = Counter(physical)
        # 3. the node's replicas onto its GPUs, each carrying its expert's load / replicas
        packs = balanced_packing([Fraction(loads[e], replicas[e]) for e in physical], gpus_per_node)
        for e, (p, _) in zip(physical, packs, strict=True):
            held[node * gpus_per_node + p].append(e)
    assert all(len(h) == per_gpu for h in held)
    return tuple(tuple(sorted(h)) for h in held)
