"""``moesim place``: the search finds the brute-force optimum of a small case, skips mappings equivalent under
the topology's symmetries, is deterministic for a seed, and the command reports and writes the mapping."""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import write_tiny_model

from moesim.experiments.placement_search import SearchSpec, search_placement
from moesim.system.run import prepare, simulate_run
from moesim.system.spec import RunSpec
from moesim.topology.symmetry import Symmetry

TWO_BY_TWO = """\
name: two-by-two
servers: 2
server:
  cpus: [cpu0]
  gpus: [gpu0, gpu1]
  nics: [nic0]
  links:
    - {a: gpu0, b: cpu0, bandwidth: 512Gbps, delay: 0.2us}
    - {a: gpu1, b: cpu0, bandwidth: 512Gbps, delay: 0.2us}
    - {a: nic0, b: cpu0, bandwidth: 512Gbps, delay: 0.2us}
fabric:
  kind: single_switch
  nic_bandwidth: 100Gbps
"""


@pytest.fixture(scope="module")
def case(tmp_path_factory: pytest.TempPathFactory) -> RunSpec:
    """Two servers of two GPUs behind one NIC each; TP2EP2 of the one-layer model."""
    d = tmp_path_factory.mktemp("place")
    (d / "two.yaml").write_text(TWO_BY_TWO)
    model = write_tiny_model(d)
    return RunSpec(str(model), str(d / "two.yaml"), "TP2EP2", "ring_direct", "ib_cc0", "flow", (("tokens", 256),))


def _with(spec: RunSpec, mapping: tuple[int, ...]) -> RunSpec:
    return RunSpec(spec.model, spec.topology, spec.strategy, spec.algorithm, spec.network, spec.backend,
                   (*spec.overrides, ("placement", ",".join(map(str, mapping)))))


def test_search_finds_the_brute_force_optimum_and_skips_equivalents(case: RunSpec) -> None:
    """24 mappings fall into 3 classes (which rank shares a server with rank 0); equivalent mappings score
    the same, and the search simulates or prunes each class once and reports the fastest."""
    sym = Symmetry.of(prepare(case).topology)
    by_class: dict[object, set[float]] = {}
    for perm in itertools.permutations(range(4)):
        by_class.setdefault(sym.canonical_key(perm), set()).add(simulate_run(_with(case, perm)).wall_s)
    assert len(by_class) == 3 and all(len(walls) == 1 for walls in by_class.values())
    optimum = min(w for walls in by_class.values() for w in walls)

    result = search_placement(SearchSpec(case, evaluations=24, rescore_backend=None), workers=1)
    assert result.best.wall_s == optimum
    assert result.evaluated + result.pruned == 3 and result.exhausted and result.skipped_symmetric > 0
    assert result.gain == pytest.approx(1 - optimum / result.default.wall_s)


def test_same_seed_same_search(case: RunSpec) -> None:
    runs = [search_placement(SearchSpec(case, evaluations=5, seed=11, rescore_backend=None), workers=1)
            for _ in range(2)]
    assert [(r.best.rank_to_gpu, r.evaluated, r.skipped_symmetric, r.pruned) for r in runs][0] == \
        [(r.best.rank_to_gpu, r.evaluated, r.skipped_symmetric, r.pruned) for r in runs][1]


def test_topology_1_has_one_class(tmp_path: Path) -> None:
    """32 alike one-GPU servers on one switch: every mapping is the default; nothing else is simulated."""
    model = write_tiny_model(tmp_path)
    spec = RunSpec(str(model), "1", "TP4EP8", "ring_direct", "ib_cc0", "flow", (("tokens", 128),))
    result = search_placement(SearchSpec(spec, evaluations=10, rescore_backend=None), workers=1)
    assert result.evaluated == 1 and result.exhausted and result.best.origin == "contiguous"
    assert result.skipped_symmetric > 0 and result.gain == 0.0


def test_place_command_reports_rescores_and_writes(case: RunSpec, tmp_path: Path) -> None:
    out = tmp_path / "best.json"
    proc = subprocess.run(
        [sys.executable, "-m", "moesim", "place", "--model", case.model, "--topology", case.topology,
         "--strategy", "TP2EP2", "--set", "tokens=256", "--workers", "1", "--evaluations", "8",
         "--rescore", "fluid", "--top", "2", "--json", "--quiet", "--out", str(out)],
        capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    record = json.loads(proc.stdout)
    best = record["best"]["placement"]
    assert json.loads(out.read_text()) == best and sorted(best) == [0, 1, 2, 3]
    assert record["best"]["wall_s"] <= record["default"]["wall_s"]
    assert {r["backend"] for r in record["rescored"]} == {"fluid"}
    assert record["default"]["placement"] in [r["placement"] for r in record["rescored"]]


def test_bad_budget_is_one_line() -> None:
    proc = subprocess.run([sys.executable, "-m", "moesim", "place", "--model", "deepseek-v4-flash", "--topology",
                           "4", "--strategy", "TP4EP8", "--evaluations", "0"], capture_output=True, text=True)
    assert proc.returncode == 3 and "--evaluations" in proc.stderr and "Traceback" not in proc.stderr
