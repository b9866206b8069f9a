"""Double Binary Tree all-reduce with ASTRA-sim's semantics (``DoubleBinaryTreeAllReduce.cc``; B.3).

Two in-order-numbered trees alternate per chunk (DBMAX: root = largest id, DBMIN: root = smallest id),
on a count of chunks per rank and dimension that carries over between collectives.
Every tree edge carries the *whole* chunk, up (reduced at each parent) and back down. That is what makes
it slower than Ring here. N must be a power of two, as in the reference.
"""

from __future__ import annotations

from moesim.errors import MoesimError
from moesim.system.collectives.base import COLLECTIVES, Algorithm, Plan, StepTiming, Transfer
from moesim.workload.graph import CollectiveType


def _inorder_tree(lo: int, hi: int, parent: dict[int, int], children: dict[int, list[int]]) -> int:
    """Complete binary tree over ids lo..hi (2^k - 1 of them) numbered in order; returns its root."""
    mid = (lo + hi) // 2
    children.setdefault(mid, [])
    for a, b in ((lo, mid - 1), (mid + 1, hi)):
        if a <= b:
            c = _inorder_tree(a, b, parent, children)
            parent[c] = mid
            children[mid].append(c)
    return mid


def dbt_tree(n: int, use_max: bool) -> tuple[int, dict[int, int], dict[int, list[int]]]:
    """(root, parent map, children map) of the DBMAX (``use_max``) or DBMIN tree over members 0..n-1."""
    if n & (n - 1):
        raise MoesimError(f"doubleBinaryTree needs a power-of-two group size, got {n}")
    parent: dict[int, int] = {}
    children: dict[int, list[int]] = {}
    root = n - 1 if use_max else 0
    children[root] = []
    if n > 1:
        lo, hi = (0, n - 2) if use_max else (1, n - 1)
        sub = _inorder_tree(lo, hi, parent, children)
        parent[sub] = root
        children[root].append(sub)
    return root, parent, children


def dbt_plan(ctype: CollectiveType, n: int, size: int, timing: StepTiming, chunk_index: int = 0,
             window: int = 0) -> Plan:
    if n == 1:
        return Plan(n, (), ((),) * n, (0.0,) * n)
    root, parent, children = dbt_tree(n, use_max=chunk_index % 2 == 0)
    d, red = timing.endpoint_delay_s, timing.reduction_s(size)
    members = sorted(parent)  # every non-root member has one up and one down edge
    up = {v: i for i, v in enumerate(members)}
    down = {v: len(members) + i for i, v in enumerate(members)}
    transfers: list[Transfer] = []
    for v in members:  # up: leaves start at once; parents wait for (and reduce) both children
        kids = children[v]
        after = tuple(up[c] for c in kids)
        transfers.append(Transfer(v, parent[v], size, after, d + (red if kids else 0.0)))
    for v in members:  # down: after the parent got the reduced result (root: from its only child)
        p = parent[v]
        after = (up[v],) if p == root else (down[p],)
        transfers.append(Transfer(p, v, size, after, d + red))
    exit_after, exit_delay = [], []
    for m in range(n):
        if m == root:
            exit_after.append((up[children[root][0]],))
            exit_delay.append(d + red)
        else:
            exit_after.append((down[m],))
            exit_delay.append(d + (red if children[m] else 0.0))
    return Plan(n, tuple(transfers), tuple(exit_after), tuple(exit_delay))


COLLECTIVES.register(
    "dbt", "Double Binary Tree all-reduce, full chunk on every edge, trees alternating per chunk",
    "ASTRA-sim 2.0 DoubleBinaryTreeAllReduce.cc (docs/reference-semantics.md B.3)",
)(Algorithm(frozenset({CollectiveType.ALL_REDUCE}), dbt_plan))
