"""Placement as a run input: the ``placement`` override (a rule or a rank → GPU file) reaches the engine,
the input hash and the export, and the default leaves every result and key as it was."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from moesim.errors import MoesimError
from moesim.experiments.inputs import input_hash
from moesim.system.export import export_run
from moesim.system.run import prepare, simulate_run
from moesim.system.spec import RunSpec

V4 = "deepseek-v4-flash"


def _spec(topology: str, strategy: str = "TP4EP8", **overrides: object) -> RunSpec:
    over = tuple(sorted({"tokens": 256, **overrides}.items()))
    return RunSpec(V4, topology, strategy, "ring_direct", "ib_cc0", "flow", over)


def test_contiguous_rule_is_the_default_bit_for_bit() -> None:
    default, named = _spec("4"), _spec("4", placement="contiguous")
    assert input_hash(default) == input_hash(named)
    a, b = simulate_run(default), simulate_run(named)
    assert a.ranks == b.ranks and "placement" not in a.parameters


def test_permuting_interchangeable_servers_scores_the_same(tmp_path: Path) -> None:
    """Topology 1: 32 identical one-GPU servers on one switch, so any rank → GPU permutation is a symmetry."""
    perm = list(range(32))
    random.Random(7).shuffle(perm)
    path = tmp_path / "shuffled.json"
    path.write_text(json.dumps(perm))
    base, moved = simulate_run(_spec("1")), simulate_run(_spec("1", placement=str(path)))
    assert moved.parameters["placement"] == perm
    assert moved.wall_s == pytest.approx(base.wall_s, rel=1e-12)
    assert input_hash(_spec("1")) != input_hash(_spec("1", placement=str(path)))


def test_a_placement_that_splits_tp_groups_over_pcie_switches_is_slower() -> None:
    """Topology 4 (4 GPUs per PCIe switch, one NIC per switch): TP4 groups packed on one switch (contiguous)
    against each TP group spread over both switches of its server (round-robin-nic): the TP all-reduce ring
    then crosses the switch-to-switch link, which contiguous never does."""
    packed, spread = simulate_run(_spec("4")), simulate_run(_spec("4", placement="round-robin-nic"))
    assert spread.comm_s > packed.comm_s


def test_prepare_checks_the_file_against_the_topology(tmp_path: Path) -> None:
    short = tmp_path / "short.yaml"
    short.write_text("[0, 1, 2]\n")
    with pytest.raises(MoesimError, match=r"short.yaml: field 'ranks': 3 ranks for the 32 GPUs of topology 4"):
        prepare(_spec("4", placement=str(short)))
    with pytest.raises(MoesimError, match=r"field 'placement': unknown rule 'nearest' \(allowed: contiguous"):
        prepare(_spec("4", placement="nearest"))


def test_export_follows_the_placement(tmp_path: Path) -> None:
    """The NS-3 topology numbers host r = rank r at its placed GPU; CC-exempt pairs are ranks on one server."""
    out = tmp_path / "ep"
    export_run(_spec("4", placement="ep-within-server"), out)
    ranks_on_server0 = {r for r in range(32) if ((r % 4) * 8 + r // 4) // 8 == 0}
    exempt = json.loads((out / "cc_policy.json").read_text())["no_cc_pairs"]
    assert {a for a, b in exempt if b == 0} == ranks_on_server0 - {0}
    assert len(exempt) == 4 * 8 * 7  # 4 servers × 8 ranks × 7 peers
    cables = [line.split() for line in (out / "topology.txt").read_text().splitlines()[2:]]
    peer = {int(a): int(b) for a, b, *_ in cables if int(a) < 32}  # host → its PCIe switch
    # GPUs 0..3 share a PCIe switch; under ep-within-server they hold ranks 0, 4, 8, 12 (GPU t·8 + e)
    assert len({peer[r] for r in (0, 4, 8, 12)}) == 1 and peer[1] != peer[0]
