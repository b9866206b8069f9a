"""examples/: the quick-start notebook runs from start to end, and the example matrix and topology are valid."""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

import moesim

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def test_the_examples_folder() -> None:
    assert sorted(p.name for p in EXAMPLES.iterdir() if not p.name.startswith(".")) == [
        "matrix.yaml", "quickstart.ipynb", "servers", "topology.yaml"]
    assert sorted(p.name for p in (EXAMPLES / "servers").iterdir()) == [
        "gb200-nvl72.yaml", "hgx-h100-rail.yaml", "mi300x-leaf-spine.yaml"]  # checked in tests/topology


def test_the_notebook_is_stored_without_outputs() -> None:
    nb = nbformat.read(EXAMPLES / "quickstart.ipynb", as_version=4)
    nbformat.validate(nb)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert code and all(not c.outputs and c.execution_count is None for c in code)


@pytest.mark.slow
def test_the_quickstart_notebook_executes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Executed in a copy of examples/ (it writes results/quickstart/ beside itself) by a real kernel that
    imports this source tree, as do the sweep's worker processes."""
    work = tmp_path / "examples"
    shutil.copytree(EXAMPLES, work, ignore=shutil.ignore_patterns("results", ".ipynb_checkpoints"))
    src = str(Path(moesim.__file__).resolve().parents[1])
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(p for p in (src, os.environ.get("PYTHONPATH")) if p))
    nb = nbformat.read(work / "quickstart.ipynb", as_version=4)
    NotebookClient(nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(work)}}).execute()

    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    text = "\n".join(str(o.get("text", "")) + str(o.get("data", {}).get("text/plain", "")) for o in outputs)
    assert f"'{moesim.__version__}'" in text
    assert "RunOutput(deepseek-v4-flash topology 4 TP2EP16 ring_direct roce_dcqcn [fluid]" in text
    assert "4 runs: 0 already in the store, 4 done now, 0 failed" in text
    assert "('example-4x8-leaf-spine', 32)" in text
    pngs = [o["data"]["image/png"] for o in outputs if "image/png" in o.get("data", {})]
    assert len(pngs) == 1 and base64.b64decode(pngs[0]).startswith(b"\x89PNG")

    runs = moesim.load_results(work / "results" / "quickstart")
    assert len(runs) == 4 and set(runs["tokens"]) == {512} and set(runs["network"]) == {"ib_cc0"}
    assert sorted(set(runs["strategy"])) == ["TP2EP16", "TP4EP8"]
    assert {Path(t).name for t in runs["topology"]} == {"4", "topology.yaml"}


def _moesim(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "moesim", *args], capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize(("preset", "runs", "networks", "tokens"), [
    (None, 16, ["ib_cc0", "roce_dcqcn"], ["2048", "4096"]),
    ("quick", 4, ["ib_cc0"], ["512"]),
])
def test_the_example_matrix_is_valid(preset: str | None, runs: int, networks: list[str], tokens: list[str],
                                     tmp_path: Path) -> None:
    """Every run of the matrix resolves (the dry run prepares each one: models, topologies, TP × EP)."""
    args = ["sweep", "run", str(EXAMPLES / "matrix.yaml"), "--out", str(tmp_path / "out"), "--dry-run", "--json"]
    res = _moesim(*args, *(["--preset", preset] if preset else []))
    assert res.returncode == 0, res.stderr
    plan = json.loads(res.stdout)
    assert plan["runs"] == runs and plan["valid"] is True
    assert plan["factors"]["topology"] == ["4", str(EXAMPLES / "topology.yaml")]
    assert plan["factors"]["network"] == networks and plan["factors"]["tokens"] == tokens
    assert not (tmp_path / "out").exists()


def test_the_example_topology() -> None:
    topo = moesim.load_topology(EXAMPLES / "topology.yaml")
    assert topo.name == "example-4x8-leaf-spine" and topo.num_gpus == 32
    kinds = {n.kind.value for n in topo.nodes}
    assert {"gpu", "cpu", "pcie_switch", "nic", "switch"} <= kinds
    assert sum(n.kind.value == "switch" for n in topo.nodes) == 4  # 2 leaves, 2 spines
    # each GPU uses the NIC on its own PCIe switch: GPUs 0-3 of a server share one NIC, 4-7 the other
    assert len({g.nic for g in topo.gpus}) == 8
    assert all(g.nic is not None and g.nic.split(".")[1] == f"nic{(i % 8) // 4}" for i, g in enumerate(topo.gpus))
    assert {round(link.bandwidth_bps) for link in topo.links if link.kind == "upi"} == {400_000_000_000}
