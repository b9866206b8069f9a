"""`moesim run`: JSON output, determinism across processes, one-line errors with exit code 2."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

ARGS = ["--model", "deepseek-v4-flash", "--topology", "2", "--strategy", "TP4EP8", "--algorithm", "dbt_direct",
        "--network", "roce_hpcc"]


def moesim(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "moesim.cli", *args], capture_output=True, text=True, check=False)


@pytest.mark.slow
def test_same_run_twice_gives_identical_json():
    a, b = moesim("run", *ARGS, "--json"), moesim("run", *ARGS, "--json")
    assert a.returncode == 0, a.stderr
    assert a.stdout == b.stdout
    record = json.loads(a.stdout)
    for key in ("model", "topology", "strategy", "tp", "ep", "algorithm", "network", "backend", "wall_s",
                "gpu_s", "comm_s", "bottleneck_rank", "version", "cc_model", "cc_policy"):
        assert key in record
    assert (record["tp"], record["ep"]) == (4, 8)
    assert record["wall_s"] > record["comm_s"] > 0 and record["gpu_s"] > 0


@pytest.mark.parametrize("args,needle", [
    (["--model", "nope", "--topology", "1", "--strategy", "TP2EP16"], "unknown"),
    (["--model", "deepseek-v4-flash", "--topology", "1", "--strategy", "TP4EP4"], "does not match 32"),
    (["--model", "mixtral-8x7b", "--topology", "1", "--strategy", "TP2EP16"], "does not divide"),
    (["--model", "deepseek-v4-flash", "--topology", "1", "--strategy", "TP2EP16", "--network", "wifi"], "allowed"),
    (["--model", "deepseek-v4-flash", "--topology", "1", "--strategy", "TP2EP16", "--backend", "ns3"],
     "allowed: analytical, flow, fluid, packet"),
    (["--model", "deepseek-v4-flash", "--topology", "1", "--strategy", "TP2EP16", "--algorithm", "ring"],
     "allowed: ring_direct, dbt_direct"),
    (["--model", "deepseek-v4-flash", "--topology", "1", "--strategy", "TP2EP16", "--set", "warp=9"], "warp"),
    (["--model", "deepseek-v4-flash", "--topology", "1", "--strategy", "TP2EP16", "--set", "fabric_bandwidth_bps=-5"],
     "fabric_bandwidth_bps"),
    (["--model", "deepseek-v4-flash", "--topology", "1", "--strategy", "TP2EP16", "--backend", "fluid",
      "--set", "fluid_marks=often"], "field 'fluid_marks': 'often' is not allowed (one of expected, random)"),
])
def test_bad_input_is_one_line_and_exit_code_2(args, needle):
    res = moesim("run", *args)
    assert res.returncode == 2
    assert needle in res.stderr and len(res.stderr.strip().splitlines()) == 1 and "Traceback" not in res.stderr


def test_run_and_export_take_their_defaults_and_algorithms_from_the_run_spec():
    """``--algorithm``, ``--network``, ``--backend`` default to RunSpec's field defaults, and the help of
    ``--algorithm`` names every combination of ALGORITHMS with its two implementations."""
    import typer

    from moesim.cli import app
    from moesim.system.spec import ALGORITHMS, RunSpec

    spec = RunSpec("m", "t", "s")
    root = typer.main.get_command(app)
    for command in ("run", "export"):
        options = {p.name: p for p in root.commands[command].params}
        for field in ("algorithm", "network", "backend")[: 3 if command == "run" else 2]:
            assert options[field].default == getattr(spec, field)
        for name, (tp, ep) in ALGORITHMS.items():
            assert f"{name} (TP all-reduce {tp}, EP all-to-all {ep})" in options["algorithm"].help
