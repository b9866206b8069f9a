"""Rank placement: contiguous by default, explicit rank → GPU maps validated."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from moesim.errors import MoesimError
from moesim.topology import Placement, contiguous_placement, get_topology, load_placement
from moesim.topology.placement import resolve_placement


@pytest.mark.parametrize("name,per_server", [("1", 1), ("2", 2), ("3", 2), ("4", 8), ("5", 16), ("6", 32)])
def test_contiguous_placement_follows_the_study(name: str, per_server: int) -> None:
    topo = get_topology(name)
    placement = contiguous_placement(topo, 32)
    for r in range(32):
        gpu = topo.gpus[placement.gpu(r)]
        assert gpu.server == r // per_server
        local = r % per_server
        if gpu.pcie_switch is not None:  # each consecutive four local ranks share one switch
            first = topo.gpus[placement.gpu(r - local % 4)]
            assert gpu.pcie_switch == first.pcie_switch
            if local % 4 == 0 and local:
                assert gpu.pcie_switch != topo.gpus[placement.gpu(r - 1)].pcie_switch


def test_explicit_map_by_index_and_by_name(tmp_path: Path) -> None:
    topo = get_topology("4")
    names = [g.name for g in topo.gpus]
    mapping = {str(r): names[(r + 8) % 32] for r in range(32)}  # shift every rank by one server
    path = tmp_path / "p.json"
    path.write_text(json.dumps(mapping))
    placement = load_placement(path, topo)
    assert placement.rank_to_gpu == tuple((r + 8) % 32 for r in range(32))
    assert placement.gpu_to_rank()[8] == 0 and not placement.is_contiguous()


@pytest.mark.parametrize("values,pattern", [
    ([0] * 32, r"field 'rank 1': GPU 0 already holds rank 0"),
    (list(range(31)) + [40], r"field 'rank 31': GPU index 40 out of range"),
    (list(range(16)), r"p.yaml: field 'ranks': 16 ranks for the 32 GPUs of topology 4"),
    (["s9.gpu0"] + list(range(1, 32)), r"field 'rank 0': unknown GPU 's9.gpu0'"),
])
def test_bad_maps(values: list[object], pattern: str) -> None:
    with pytest.raises(MoesimError, match=pattern):
        Placement.from_mapping(values, get_topology("4"), source="p.yaml")


@pytest.mark.parametrize("rule", ["contiguous", "ep-within-server", "round-robin-nic"])
@pytest.mark.parametrize("name,tp", [("1", 2), ("4", 4), ("5", 8), ("6", 16)])
def test_every_rule_is_a_permutation(rule: str, name: str, tp: int) -> None:
    topo = get_topology(name)
    placement = resolve_placement(rule, topo, tp, 32 // tp)
    assert sorted(placement.rank_to_gpu) == list(range(32))


def test_ep_within_server_packs_ep_groups() -> None:
    """TP4EP8 on topology 4 (8 GPUs per server): each EP group (ranks t, t+4, …) fills one server."""
    topo = get_topology("4")
    placement = resolve_placement("ep-within-server", topo, 4, 8)
    for t in range(4):
        servers = {topo.gpus[placement.gpu(r)].server for r in range(t, 32, 4)}
        assert servers == {t}


def test_round_robin_nic_spreads_each_tp_group_over_its_servers_nics() -> None:
    """Topology 4: 2 NICs per server; a TP2 group takes one GPU behind each NIC, inside one server."""
    topo = get_topology("4")
    placement = resolve_placement("round-robin-nic", topo, 2, 16)
    for first in range(0, 32, 2):
        a, b = (topo.gpus[placement.gpu(r)] for r in (first, first + 1))
        assert a.server == b.server and a.nic != b.nic


def test_unknown_rule_and_wrong_rank_count(tmp_path: Path) -> None:
    topo = get_topology("4")
    with pytest.raises(MoesimError, match=r"unknown rule 'nearest' \(allowed: contiguous, ep-within-server"):
        resolve_placement("nearest", topo, 4, 8)
    path = tmp_path / "p.yaml"
    path.write_text("[" + ", ".join(str(g) for g in range(32)) + "]\n")
    with pytest.raises(MoesimError, match=r"p.yaml: field 'ranks': 32 ranks, the run has 16"):
        resolve_placement(str(path), topo, 4, 4)
