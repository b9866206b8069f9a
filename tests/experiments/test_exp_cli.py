"""`moesim sweep study|run` and `moesim results` through the real entry point (moesim.cli.main)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pyarrow.csv as pcsv
import pytest
from exp_helpers import store_rows

from moesim import cli


def run_cli(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture, *args: str) -> tuple[int, str, str]:
    monkeypatch.setattr(sys, "argv", ["moesim", *args])
    code = 0
    try:
        cli.main()
    except SystemExit as exc:
        code = int(exc.code or 0)
    out, err = capsys.readouterr()
    return code, out, err


def test_dry_run_of_the_study(monkeypatch, capsys) -> None:
    code, out, _ = run_cli(monkeypatch, capsys, "sweep", "study", "--out", "unused", "--dry-run")
    assert code == 0 and "768 runs, all valid" in out
    code, out, _ = run_cli(monkeypatch, capsys, "sweep", "study", "--out", "unused", "--dry-run",
                           "--models", "deepseek-v4-flash", "--topologies", "1,6", "--networks", "ib_cc0")
    assert code == 0 and f"{1 * 2 * 4 * 2 * 1} runs" in out
    assert not Path("unused").exists()


def test_dry_run_counts_impossible_runs_without_running(monkeypatch, capsys) -> None:
    code, _, err = run_cli(monkeypatch, capsys, "sweep", "study", "--out", "unused", "--dry-run",
                           "--models", "deepseek-v4-flash", "--topologies", "1,6", "--strategies", "TP2EP16,TP4EP4")
    assert code == 2 and err.count("\n") == 1
    assert "16 of 32 runs are impossible combinations, nothing was run; topology 1, strategy TP4EP4: TP × EP = 16 " \
           "does not match 32 ranks; topology 6, strategy TP4EP4" in err
    assert not Path("unused").exists()


@pytest.mark.slow
def test_sweep_run_then_results(monkeypatch, capsys, small_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    code, stdout, _ = run_cli(monkeypatch, capsys, "sweep", "run", str(small_dir / "small.yaml"), "--out", str(out),
                              "--topologies", "1,6", "--strategies", "TP2EP16", "--set", "tokens=2048,4096",
                              "--workers", "2", "--progress", "none")
    assert code == 0, stdout
    # topology 6 (one server) reads the same inputs under ib_cc0 and roce_dcqcn: 4 of its runs, 2 simulations
    assert "8 runs: 0 already in the store, 8 done now in 6 simulations, 0 failed" in stdout
    rows = store_rows(out)
    assert sorted((r["topology"], r["network"], r["tokens"]) for r in rows) == sorted(
        (t, n, k) for t in ("1", "6") for n in ("ib_cc0", "roce_dcqcn") for k in ("2048", "4096"))
    code, stdout, _ = run_cli(monkeypatch, capsys, "results", str(out))
    assert code == 0 and "8 runs" in stdout
    code, stdout, _ = run_cli(monkeypatch, capsys, "results", str(out), "--json")  # the table may cut the model's path
    assert code == 0 and all("tiny" in r["model"] for r in json.loads(stdout))
    code, stdout, _ = run_cli(monkeypatch, capsys, "results", str(out), "--sql",
                              "SELECT count(*) AS n, count(DISTINCT tokens) AS k FROM runs WHERE status = 'ok'")
    assert code == 0 and "8" in stdout.split() and "2" in stdout.split()
    code, stdout, _ = run_cli(monkeypatch, capsys, "results", str(out), "--export", "csv", "--to",
                              str(tmp_path / "runs.csv"))
    assert code == 0 and "wrote 8 rows" in stdout
    assert pcsv.read_csv(tmp_path / "runs.csv").num_rows == 8
    # the same command again finds everything in the store
    code, stdout, _ = run_cli(monkeypatch, capsys, "sweep", "run", str(small_dir / "small.yaml"), "--out", str(out),
                              "--topologies", "1,6", "--strategies", "TP2EP16", "--set", "tokens=2048,4096",
                              "--workers", "2", "--progress", "none")
    assert code == 0 and "8 runs: 8 already in the store, 0 done now" in stdout


@pytest.mark.parametrize(("args", "pattern"), [
    (["--models", "gpt-9"], "command line: field 'model': unknown level 'gpt-9' (allowed: kimi-k3"),
    (["--set", "colour=red"], "command line --set: field 'colour': unknown factor (allowed: model, topology"),
    (["--set", "tokens"], "--set 'tokens': expected NAME=LEVEL"),
    (["--preset", "huge"], "unknown preset 'huge' (allowed: flash, feedback, roce, network, smoke)"),
    (["--executor", "slurm"], "unknown executor 'slurm' (allowed: dask, local, ray)"),
    (["--progress", "fancy"], "--progress: unknown display 'fancy' (allowed: auto, bar, none, periodic, plain)"),
    (["--strategies", "TP4EP4", "--models", "deepseek-v4-flash", "--topologies", "6"],
     "8 of 8 runs are impossible combinations, nothing was run; deepseek-v4-flash/6/TP4EP4/ring_direct/ib_cc0:"),
])
def test_bad_input_is_one_line_and_exit_2(monkeypatch, capsys, tmp_path: Path, args: list[str], pattern: str) -> None:
    out = tmp_path / "out"
    code, _, err = run_cli(monkeypatch, capsys, "sweep", "study", "--out", str(out), "--progress", "none", *args)
    assert code == 2
    assert pattern in err and err.count("\n") == 1
    assert not out.exists()


def test_bad_matrix_file_names_the_file(monkeypatch, capsys, tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("factors: {model: deepseek-v4-flash, topology: [1, 9], strategy: TP2EP16}\n")
    code, _, err = run_cli(monkeypatch, capsys, "sweep", "run", str(path), "--out", str(tmp_path / "o"))
    assert code == 2 and f"{path}: field 'topology': unknown level '9'" in err and err.count("\n") == 1


def test_results_of_a_folder_without_a_store(monkeypatch, capsys, tmp_path: Path) -> None:
    code, _, err = run_cli(monkeypatch, capsys, "results", str(tmp_path))
    assert code == 2 and "no results store (results.duckdb)" in err
    code, _, err = run_cli(monkeypatch, capsys, "results", str(tmp_path), "--export", "csv")
    assert code == 2 and "--export and --to go together" in err


@pytest.mark.slow
def test_failed_runs_are_listed_and_exit_1(monkeypatch, capsys, small_dir: Path, tmp_path: Path) -> None:
    # headroom 0 with no window and a small buffer drops packets in the incast: that run cannot finish
    code, stdout, _ = run_cli(monkeypatch, capsys, "sweep", "run", str(small_dir / "small.yaml"), "--out",
                              str(tmp_path), "--topologies", "1", "--strategies", "TP2EP16", "--networks", "ib_cc0",
                              "--backend", "packet", "--set", "has_win=false", "--set", "buffer_bytes=300000",
                              "--set", "headroom_factor=0,3", "--workers", "1", "--progress", "none")
    assert code == 1
    assert "2 runs: 0 already in the store, 1 done now, 1 failed" in stdout
    failed = [line for line in stdout.splitlines() if "cannot complete" in line]
    assert len(failed) == 1 and "headroom_factor=0.0" in failed[0]


def test_unreachable_ray_cluster_fails_fast_before_the_store(monkeypatch, capsys, tmp_path: Path) -> None:
    import socket

    pytest.importorskip("ray")
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    out = tmp_path / "out"
    code, _, err = run_cli(monkeypatch, capsys, "sweep", "study", "--preset", "smoke", "--out", str(out),
                           "--executor", "ray", "--address", f"127.0.0.1:{port}")
    assert code == 2 and f"--address 127.0.0.1:{port}: no Ray cluster reachable there" in err
    assert not out.exists()
