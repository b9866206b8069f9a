"""prepare(): the rank count (TP × EP) is checked against the topology spec before the topology is built."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from moesim.errors import MoesimError
from moesim.system.run import prepare
from moesim.system.spec import RunSpec

# Two servers of 16 GPUs, but GPU 15 has no link: the spec is valid, building it fails its route check.
UNROUTABLE = {
    "name": "unroutable",
    "servers": 2,
    "server": {
        "cpus": ["cpu0"],
        "gpus": [f"gpu{i}" for i in range(16)],
        "nics": ["nic0"],
        "links": [{"a": f"gpu{i}", "b": "cpu0", "bandwidth": "512Gbps", "delay": "0.2us"} for i in range(15)]
                 + [{"a": "nic0", "b": "cpu0", "bandwidth": "512Gbps", "delay": "0.2us"}],
    },
    "fabric": {"kind": "single_switch"},
}


@pytest.fixture()
def unroutable(tmp_path: Path) -> str:
    path = tmp_path / "unroutable.yaml"
    path.write_text(yaml.safe_dump(UNROUTABLE, sort_keys=False))
    return str(path)


def test_rank_count_is_refused_before_the_topology_is_built(unroutable: str) -> None:
    # TP2EP8 = 16 ranks on 32 GPUs: the rank-count error, not the build's route error
    with pytest.raises(MoesimError, match=r"strategy TP2EP8: TP × EP = 16 does not match 32 ranks"):
        prepare(RunSpec("deepseek-v4-flash", unroutable, "TP2EP8"))


def test_a_matching_rank_count_goes_on_to_build(unroutable: str) -> None:
    with pytest.raises(MoesimError, match=r"gpu 's0.gpu15': no route"):
        prepare(RunSpec("deepseek-v4-flash", unroutable, "TP2EP16"))
