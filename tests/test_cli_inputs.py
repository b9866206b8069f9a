"""Inputs that could be accepted silently, run away or give a misleading message: each is one line on stderr
naming what is wrong, with exit code 2, and nothing runs."""

from __future__ import annotations

import contextlib
import io
import os
import subprocess
import sys
from importlib import resources
from pathlib import Path

import pytest
import yaml

from moesim.cli import run_cli

RUN = ["run", "--model", "deepseek-v4-flash", "--topology", "1", "--strategy", "TP2EP16", "--backend", "flow",
       "--progress", "none"]
DRY = ["sweep", "study", "--out", "/nonexistent/never-written", "--dry-run"]


def one_line_error(args: list[str], *needles: str) -> str:
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        code = run_cli(args)
    lines = err.getvalue().strip().splitlines()
    assert code == 2, (code, err.getvalue())
    assert len(lines) == 1 and lines[0].startswith("moesim: error: "), err.getvalue()
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]


def model_file(folder: Path, **fields: object) -> Path:
    data = yaml.safe_load((resources.files("moesim.models") / "data" / "deepseek-v4-flash.yaml").read_text())
    data.update(key="edited", **fields)
    path = folder / "model.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


@pytest.mark.parametrize(("args", "needles"), [
    ([*RUN, "--set", "tokens=1", "--set", "tokens=2"], ("--set tokens: given twice",)),
    ([*DRY, "--set", "tokens=1", "--set", "tokens=2"], ("factor 'tokens': given twice",)),
    ([*DRY, "--models", "deepseek-v3", "--set", "model=deepseek-v3"], ("factor 'model': given twice",)),
    ([*RUN, "--jitter", "1e-9"], ("--jitter", "give --seeds N")),
    ([*RUN, "--seeds", "2", "--jitter", "1e300"], ("--jitter: field 'start_jitter_s'", "[0, 1]")),
    ([*RUN, "--seeds", "1000000"], ("--seeds: 1000000 runs is too many",)),
    ([*DRY, "--seeds", "1000000"], ("--seeds: 1000000 runs is too many",)),
    ([*DRY, "--progress", "bogus"], ("--progress: unknown display 'bogus'",)),
    ([*DRY, "--executor", "bogus"], ("--executor: unknown executor 'bogus'",)),
    ([*DRY, "--breakdown", "bogus"], ("--breakdown: unknown level 'bogus'",)),
    ([*DRY, "--workers", "0"], ("field '--workers': 0 is not allowed",)),
    ([*RUN, "--set", "dataset_splits=1e12"], ("field 'dataset_splits'", "[1, 1024]")),
    ([*RUN, "--set", "cc_mode=99"], ("field 'cc_mode'", "one of 0, 1, 3, 7, 8, 10, 12")),
    ([*RUN, "--set", "expert_placement=bogus"], ("field 'expert_placement'", "neither a rule nor a file")),
    ([*RUN, "--set", "peak_flops=1e-300"], ("field 'peak_flops'",)),
    ([*RUN, "--set", "packet_payload_bytes=0"], ("field 'packet_payload_bytes'",)),
    ([*RUN, "--set", "kmax_kb=5"], ("field 'kmax_kb': expected a list",)),
    ([*RUN, "--set", "kmin_kb=[[4e11, 4000]]"], ("field 'kmin_kb': 4000 KB exceeds kmax_kb 3200 KB",)),
    ([*RUN, "--set", "logical_dims=[[[[1]]]]"], ("field 'logical_dims': expected an integer",)),
    ([*RUN[:2], "", *RUN[3:]], ("unknown model ''",)),
    (["workload", "generate", "--model", "deepseek-v4-flash", "--strategy", "TP2EP16", "--tokens",
      "99999999999999999999"], ("field 'tokens'", "[1, 1e+09]")),
    (["residency", "deepseek-v4-flash", "--size-gb", "inf"], ("field '--size-gb': inf is not allowed",)),
], ids=["run-set-twice", "sweep-set-twice", "sweep-option-and-set", "jitter-without-seeds", "jitter-huge",
        "run-seeds-huge", "sweep-seeds-huge", "dry-run-progress", "dry-run-executor", "dry-run-breakdown",
        "dry-run-workers", "dataset-splits-runaway", "cc-mode-unknown", "expert-placement-bogus",
        "peak-flops-tiny", "payload-zero", "ecn-map-not-a-list", "ecn-kmin-above-kmax", "nested-logical-dims",
        "empty-model", "workload-tokens-huge", "residency-size-inf"])
def test_refused_with_one_line(args: list[str], needles: tuple[str, ...]) -> None:
    one_line_error(args, *needles)


def test_report_on_a_file_says_a_results_folder_is_expected(tmp_path: Path) -> None:
    file = tmp_path / "results.csv"
    file.write_text("x\n")
    for command in ("report", "compare"):
        extra = ["--reference", "v4_flash"] if command == "compare" else []
        one_line_error([command, str(file), *extra], "is a file; expected a results folder")
    assert file.read_text() == "x\n"


def test_absurd_model_sizes_are_refused(tmp_path: Path) -> None:
    for field, value in (("hidden_size", 10**15), ("routed_experts", 10**12), ("num_layers", 10**7)):
        one_line_error(["models", "show", str(model_file(tmp_path, **{field: value}))], f"field '{field}'")


def test_a_run_too_large_to_hold_is_refused_before_anything_is_built(tmp_path: Path) -> None:
    """1024 layers × 1024 decode steps × 32 ranks: the up-front estimate refuses it (it would need ~130 GB)."""
    model = model_file(tmp_path, num_layers=1024)
    one_line_error(["run", "--model", str(model), "--topology", "1", "--strategy", "TP2EP16", "--phase", "decode",
                    "--steps", "1024", "--progress", "none"], "graph nodes", "GB to simulate")


def test_a_run_beyond_the_exact_clock_is_an_error_not_a_wrong_result(tmp_path: Path) -> None:
    """A GPU of 1 GFLOP/s on 10^9 tokens computes for ~10^10 s: beyond 2^53 ns, microseconds of
    communication would round away (comm_s = 0 with exit 0 were it not refused)."""
    model = model_file(tmp_path, num_layers=1, first_dense_layers=0)
    one_line_error(["run", "--model", str(model), "--topology", "1", "--strategy", "TP2EP16", "--backend", "flow",
                    "--set", "peak_flops=1e9", "--set", "tokens=1000000000", "--progress", "none"],
                   "simulated seconds", "nanosecond clock")


def test_a_topology_nic_without_a_link_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "topo.yaml"
    data = yaml.safe_load((Path(__file__).parents[1] / "examples" / "topology.yaml").read_text())
    data["server"]["nics"].append("nic9")
    path.write_text(yaml.safe_dump(data))
    one_line_error(["topology", "show", str(path)], "field 'server.nics[2]'", "NIC 'nic9' has no link")


@pytest.mark.slow
def test_a_fifo_as_an_input_file_is_refused_not_waited_on(tmp_path: Path) -> None:
    fifo = tmp_path / "topology.yaml"
    os.mkfifo(fifo)
    for args in (["topology", "show", str(fifo)], [*RUN[:4], str(fifo), *RUN[5:]]):
        res = subprocess.run([sys.executable, "-m", "moesim", *args], capture_output=True, text=True, timeout=120)
        assert res.returncode == 2 and "not a regular file" in res.stderr and res.stderr.count("\n") == 1, res.stderr
