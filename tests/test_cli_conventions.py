"""The command line's conventions (docs/cli.md): --version, -h, ``python -m moesim``, --json on every listing
and result command, ``moesim plugins``, exit codes (2 input error, 3 usage error), lazy imports, strategy
names. Each command runs as a real process (``python -m moesim``), on a small store of two flow runs."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

import moesim

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
TINY_MATRIX = """\
name: tiny
factors:
  model: deepseek-v4-flash
  topology: 3
  strategy: [TP2EP16, TP4EP8]
  algorithm: ring_direct
  network: ib_cc0
  backend: flow
  tokens: 64
"""


def moesim_cli(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "moesim", *args], capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("cli")
    (folder / "tiny.yaml").write_text(TINY_MATRIX)
    res = moesim_cli("sweep", "run", str(folder / "tiny.yaml"), "--out", str(folder / "store"), "--workers", "1",
                     "--progress", "none")
    assert res.returncode == 0, res.stderr
    return folder / "store"


# ------------------------------------------------------------------------------------------ version, help

def test_version_through_python_dash_m() -> None:
    res = moesim_cli("--version")
    assert (res.returncode, res.stdout, res.stderr) == (0, f"moesim {moesim.__version__}\n", "")


@pytest.mark.parametrize("command", [[], ["run"], ["sweep", "run"], ["topology", "show"], ["results"], ["plugins"],
                                     ["serve", "search"]])
def test_dash_h_is_help(command: list[str]) -> None:
    short, long = moesim_cli(*command, "-h"), moesim_cli(*command, "--help")
    assert short.returncode == long.returncode == 0 and short.stdout == long.stdout
    assert short.stdout.startswith(f"Usage: moesim {' '.join(command)}".rstrip() + " ") and short.stderr == ""


def test_no_command_prints_the_help_as_a_usage_error() -> None:
    res = moesim_cli()
    assert res.returncode == 3 and res.stdout.startswith("Usage: moesim ") and "Commands:" in res.stdout


def test_the_top_level_help_lists_every_command_and_the_exit_codes() -> None:
    out = moesim_cli("-h").stdout
    for command in ("run", "sweep", "results", "report", "compare", "plugins", "models", "topology", "workload", "serve"):
        assert f"\n  {command} " in out, command
    assert "2 input error, 3 usage error" in " ".join(out.split())


# ------------------------------------------------------------------------------------------ --json

def _json(*args: str) -> object:
    res = moesim_cli(*args)
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout)


def test_topology_list_json() -> None:
    rows = _json("topology", "list", "--json")
    assert isinstance(rows, list) and [r["name"] for r in rows if r["kind"] == "study"] == ["1", "2", "3", "4", "5", "6"]
    assert all(r["gpus"] == 32 for r in rows if r["kind"] == "study")
    assert {r["name"] for r in rows if r["kind"] == "template"} == {"hgx-h100", "hgx-h800", "hgx-h20", "hgx-h200",
                                                                        "hgx-b200", "mi300x", "gb200-nvl72"}
    assert {r["name"]: r["gpu"] for r in rows if r["kind"] == "template"}["hgx-h800"] == "h800"


@pytest.mark.parametrize(("topology", "gpus", "switches"), [("6", 32, 0), (str(EXAMPLES / "topology.yaml"), 32, 4)])
def test_topology_show_json(topology: str, gpus: int, switches: int) -> None:
    data = _json("topology", "show", topology, "--json")
    assert isinstance(data, dict) and data["devices"]["gpu"] == gpus and data["devices"]["switch"] == switches


def test_models_list_and_show_json() -> None:
    rows = _json("models", "list", "--json")
    assert isinstance(rows, list) and "deepseek-v4-flash" in [r["key"] for r in rows]
    model = _json("models", "show", "deepseek-v4-flash", "--json")
    assert isinstance(model, dict) and model["key"] == "deepseek-v4-flash"
    assert model["num_layers"] == moesim.load_model("deepseek-v4-flash").num_layers


def test_results_json(store: Path) -> None:
    rows = _json("results", str(store), "--json")
    assert isinstance(rows, list) and len(rows) == 2
    assert [r["strategy"] for r in rows] == ["TP2EP16", "TP4EP8"] and all(r["status"] == "ok" for r in rows)
    assert all(isinstance(r["wall_s"], float) and r["wall_s"] > 0 for r in rows)


def test_sweep_dry_run_json(store: Path, tmp_path: Path) -> None:
    plan = _json("sweep", "run", str(store.parent / "tiny.yaml"), "--out", str(tmp_path / "o"), "--dry-run", "--json")
    assert isinstance(plan, dict) and (plan["matrix"], plan["runs"], plan["valid"]) == ("tiny", 2, True)
    study = _json("sweep", "study", "--preset", "smoke", "--out", str(tmp_path / "o"), "--dry-run", "--json")
    assert isinstance(study, dict) and study["runs"] > 0 and study["valid"] is True
    assert not (tmp_path / "o").exists()


def test_compare_json(store: Path, tmp_path: Path) -> None:
    data = _json("compare", str(store), "--reference", "v4_flash", "--out", str(tmp_path / "cmp"), "--json")
    assert isinstance(data, dict) and data["backend"] == "flow" and data["checks"]
    assert {"label", "reference", "ours", "rel_diff"} <= set(data["checks"][0])


def test_residency_json() -> None:
    rows = _json("residency", "--json")
    assert isinstance(rows, list) and rows and all({"label", "per_rank_bytes", "fits"} <= set(r) for r in rows)


# ------------------------------------------------------------------------------------------ results to a pipe

def test_results_export_csv_to_standard_output_piped_into_head(store: Path) -> None:
    cmd = shlex.join([sys.executable, "-m", "moesim", "results", str(store), "--export", "csv", "--to", "-"])
    res = subprocess.run(f"{cmd} | head -n 2; exit ${{PIPESTATUS[0]}}", shell=True, executable="/bin/bash",
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0 and res.stderr == "", res.stderr
    header, row = res.stdout.splitlines()
    assert header.startswith('"run_id","spec_key","model"') and '"deepseek-v4-flash","3","TP2EP16"' in row


# ------------------------------------------------------------------------------------------ plugins

def test_plugins_json_lists_every_registry() -> None:
    from moesim.experiments.executors import EXECUTORS
    from moesim.network import BACKENDS
    from moesim.network.cc import CC_ALGORITHMS
    from moesim.system.collectives import COLLECTIVES
    from moesim.topology import TOPOLOGIES
    from moesim.topology.fabrics import FABRICS

    data = _json("plugins", "--json")
    assert isinstance(data, dict)
    names = {kind: [e["name"] for e in rows] for kind, rows in data.items()}
    assert names["backends"] == BACKENDS.names() and {"analytical", "flow", "fluid", "packet"} <= set(names["backends"])
    assert names["cc"] == CC_ALGORITHMS.names() and {"none", "dcqcn", "hpcc", "dctcp"} <= set(names["cc"])
    assert names["collectives"] == COLLECTIVES.names() and {"ring", "direct"} <= set(names["collectives"])
    assert names["topologies"] == TOPOLOGIES.names() and set(names["topologies"]) == {"1", "2", "3", "4", "5", "6"}
    assert names["fabrics"] == FABRICS.names() and {"none", "single_switch", "leaf_spine"} <= set(names["fabrics"])
    assert names["executors"] == EXECUTORS.names() and {"local", "ray", "dask"} <= set(names["executors"])
    assert {"generators", "hf-families", "progress", "server-templates", "gpu-domains", "placement-rules"} <= set(data)
    assert [e["name"] for e in data["serving-policies"]] == ["decode-first", "prefill-first"]
    for kind, rows in data.items():
        assert all(set(e) == {"name", "description", "reference"} and e["description"] for e in rows), kind


def test_plugins_of_some_kinds_and_as_tables() -> None:
    data = _json("plugins", "fabrics", "cc", "--json")
    assert isinstance(data, dict) and list(data) == ["cc", "fabrics"]
    res = moesim_cli("plugins")
    assert res.returncode == 0
    titles = [line.strip() for line in res.stdout.splitlines() if line.strip() and line.strip().isascii()
              and " " not in line.strip()]
    assert {"backends", "cc", "collectives", "topologies", "fabrics", "executors"} <= set(titles), titles
    assert "leaf_spine" in res.stdout and "dcqcn" in res.stdout


# ------------------------------------------------------------------------------------------ exit codes

@pytest.mark.parametrize(("args", "message"), [
    (["run", "--model", "no-such-model", "--topology", "3", "--strategy", "TP2EP16"], "unknown model 'no-such-model'"),
    (["run", "--model", "deepseek-v4-flash", "--topology", "3", "--strategy", "TP4EP16"], "does not match 32 ranks"),
    (["run", "--model", "deepseek-v4-flash", "--topology", "3", "--strategy", "TP2EP16", "--set", "tokens=abc"],
     "field 'tokens': expected an integer"),
    (["topology", "show", "9"], "unknown topology '9'"),
    (["models", "show", "no-such-model"], "unknown model 'no-such-model'"),
    (["results", "/nonexistent/store"], "no results store"),
    (["sweep", "run", "/nonexistent/matrix.yaml", "--out", "/nonexistent/out"], "/nonexistent/matrix.yaml"),
    (["plugins", "gizmos"], "plug-in kind 'gizmos': unknown"),
], ids=["unknown-model", "tp-ep-vs-gpus", "tokens-not-int", "unknown-topology", "models-show-unknown",
        "no-store", "no-matrix-file", "unknown-plugin-kind"])
def test_input_errors_exit_2_with_one_line(args: list[str], message: str) -> None:
    res = moesim_cli(*args)
    assert res.returncode == 2, (res.returncode, res.stderr)
    assert res.stderr.startswith("moesim: error: ") and res.stderr.count("\n") == 1, res.stderr
    assert message in res.stderr and res.stdout == ""


@pytest.mark.parametrize(("args", "message"), [
    (["frobnicate"], "No such command 'frobnicate'"),
    (["run", "--bogus"], "No such option: --bogus"),
    (["run", "--model", "deepseek-v4-flash", "--topology", "3", "--strategy", "TP2EP16", "--seeds", "abc"],
     "Invalid value for '--seeds'"),
    (["models", "list", "extra"], "unexpected extra argument"),
], ids=["unknown-command", "unknown-option", "not-an-integer", "extra-argument"])
def test_usage_errors_exit_3_with_the_usage(args: list[str], message: str) -> None:
    res = moesim_cli(*args)
    assert res.returncode == 3, (res.returncode, res.stderr)
    assert res.stderr.startswith("Usage: moesim ") and message in res.stderr and "Traceback" not in res.stderr


@pytest.mark.parametrize(("args", "message"), [
    (["run", "--topology", "3", "--strategy", "TP2EP16"], "moesim run: Missing option '--model'"),
    (["compare", "somewhere"], "moesim compare: Missing option '--reference'"),
    (["topology", "show"], "moesim topology show: Missing argument"),
    (["workload", "generate", "--strategy", "TP2EP16"], "field '--model': is required"),
    (["sweep", "study", "--dry-run"], "moesim sweep study: Missing option '--out'"),
], ids=["run", "compare", "argument", "workload-generate", "sweep"])
def test_a_required_input_left_out_exits_2_with_one_line(args: list[str], message: str) -> None:
    """Every command alike: a missing required option or argument is an input error (exit 2, one line)."""
    res = moesim_cli(*args)
    assert res.returncode == 2, (res.returncode, res.stderr)
    assert res.stderr.startswith("moesim: error: ") and res.stderr.count("\n") == 1, res.stderr
    assert message in res.stderr and res.stdout == ""


# ------------------------------------------------------------------------------------------ strategy names

def test_strategy_names_are_normalised_in_output(tmp_path: Path) -> None:
    record = _json("run", "--model", "deepseek-v4-flash", "--topology", "3", "--strategy", "tp2ep16", "--backend",
                   "flow", "--set", "tokens=64", "--json", "--progress", "none")
    assert isinstance(record, dict) and (record["strategy"], record["tp"], record["ep"]) == ("TP2EP16", 2, 16)
    plan = _json("sweep", "study", "--preset", "smoke", "--strategies", "tp4ep8", "--out", str(tmp_path / "o"),
                 "--dry-run", "--json")
    assert isinstance(plan, dict) and plan["factors"]["strategy"] == ["TP4EP8"]


# ------------------------------------------------------------------------------------------ lazy imports

HEAVY = ("numba", "numpy", "networkx", "pandas", "pyarrow", "duckdb", "matplotlib", "moesim.network",
         "moesim.system.run", "moesim.topology.builder")
PROBE = """\
import contextlib, io, sys
from moesim.cli import run_cli
with contextlib.redirect_stdout(io.StringIO()):
    code = run_cli(sys.argv[1:])
print(code, *[m for m in {heavy!r} if m in sys.modules])
"""


def _heavy_imports(*args: str) -> list[str]:
    res = subprocess.run([sys.executable, "-c", PROBE.format(heavy=HEAVY), *args], capture_output=True, text=True,
                         timeout=120)
    code, *loaded = res.stdout.split()
    assert code == "0", res.stderr
    return loaded


@pytest.mark.parametrize("args", [["--help"], ["--version"], ["run", "-h"], ["sweep", "study", "-h"],
                                  ["results", "-h"], ["topology", "-h"], ["plugins", "-h"], ["serve", "-h"]])
def test_help_imports_nothing_heavy(args: list[str]) -> None:
    assert _heavy_imports(*args) == []


@pytest.mark.parametrize("args", [["models", "list"], ["models", "show", "deepseek-v4-flash", "--json"],
                                  ["topology", "list", "--json"]])
def test_listings_import_no_simulator(args: list[str]) -> None:
    loaded = _heavy_imports(*args)
    assert not {"numba", "numpy", "networkx", "pandas", "moesim.network", "moesim.system.run"} & set(loaded), loaded


# ------------------------------------------------------------------------------------------ shell completion

def test_shell_completion_in_bash() -> None:
    """``eval "$(_MOESIM_COMPLETE=bash_source moesim)"`` installs the completion; bash then completes commands
    and options by asking moesim (``_MOESIM_COMPLETE=complete_bash``)."""
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    script = subprocess.run(["moesim"], env={**env, "_MOESIM_COMPLETE": "bash_source"}, capture_output=True,
                            text=True, timeout=120)
    assert script.returncode == 0 and "complete -o default -F _moesim_completion moesim" in script.stdout
    probe = ('source <(_MOESIM_COMPLETE=bash_source moesim); for line in "moesim topo" "moesim sweep study --ba"; '
             'do read -ra COMP_WORDS <<< "$line"; COMP_CWORD=$((${#COMP_WORDS[@]} - 1)); '
             '_moesim_completion moesim; echo "${COMPREPLY[*]}"; done')
    res = subprocess.run(["bash", "-c", probe], env=env, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0 and res.stdout.splitlines() == ["topology", "--backend --backends"], res
