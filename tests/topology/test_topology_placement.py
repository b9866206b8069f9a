"""Rank placement: contiguous by default, explicit rank → GPU maps validated."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from moesim.errors import MoesimError
from moesim.topology import Placement, contiguous_placement, get_topology, load_placement


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
    (list(range(16)), r"field 'servers': 32 GPUs .* do not match the run's 16 ranks"),
    (["s9.gpu0"] + list(range(1, 32)), r"field 'rank 0': unknown GPU 's9.gpu0'"),
])
def test_bad_maps(values: list[object], pattern: str) -> None:
    with pytest.raises(MoesimError, match=pattern):
        Placement.from_mapping(values, get_topology("4"), source="p.yaml")
