"""Interchangeable servers and GPU slots: what is detected, and that the canonical key is invariant under
exactly those swaps."""

from __future__ import annotations

import random

import pytest

from moesim.topology import get_topology
from moesim.topology.symmetry import Symmetry


@pytest.mark.parametrize("name,servers,slots", [
    ("1", 1, 32),   # 32 alike servers on one switch, one GPU each
    ("2", 1, 16),   # one slot class per server: two GPUs under one PCIe switch
    ("3", 1, 32),   # the GPU under CPU 0 shares it with the NIC, the one under CPU 1 does not
    ("4", 1, 8),    # four alike GPUs per PCIe switch
    ("6", 1, 8),    # one server, eight PCIe switches of four
])
def test_detected_classes(name: str, servers: int, slots: int) -> None:
    assert Symmetry.of(get_topology(name)).count_classes() == (servers, slots)


def test_every_placement_of_topology_1_is_one_class() -> None:
    sym = Symmetry.of(get_topology("1"))
    rng = random.Random(3)
    keys = set()
    for _ in range(20):
        perm = list(range(32))
        rng.shuffle(perm)
        keys.add(sym.canonical_key(tuple(perm)))
    assert keys == {sym.canonical_key(tuple(range(32)))}


def test_topology_6_key_sees_switch_membership_only() -> None:
    """Permuting GPUs inside a PCIe switch keeps the key; moving one rank to another switch changes it."""
    topo = get_topology("6")
    sym = Symmetry.of(topo)
    base = list(range(32))
    inside = base[:]
    inside[0], inside[3] = inside[3], inside[0]  # GPUs 0 and 3 share a PCIe switch
    across = base[:]
    across[0], across[4] = across[4], across[0]  # GPU 4 is under the next switch
    assert topo.gpus[0].pcie_switch == topo.gpus[3].pcie_switch != topo.gpus[4].pcie_switch
    assert sym.canonical_key(tuple(inside)) == sym.canonical_key(tuple(base))
    assert sym.canonical_key(tuple(across)) != sym.canonical_key(tuple(base))
