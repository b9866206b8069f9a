"""`moesim workload ...` as a user runs it (subprocess `python -m moesim.cli`)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from moesim.models.catalog import STUDY_MODELS

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "chakra" / "astra-sim-microbenchmarks"


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "moesim.cli", "workload", *args], capture_output=True, text=True, timeout=120
    )


def test_generate_json() -> None:
    res = run("generate", "--model", "deepseek-v4-flash", "--strategy", "TP4EP8", "--json")
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout)
    assert out["num_ranks"] == 32 and out["logical_dims"] == [4, 8]
    assert out["tp_bytes"] == 32 * 2 * 43 * 4096 * 4096 * 2  # 2 all-reduces per layer, V_TP = T·h·2
    assert out["ep_bytes"] == 32 * 2 * 43 * 4096 * 4096 * 6 * 2 // 8  # V_EP = T·h·k·2/EP


def test_study_table_is_fast_and_complete() -> None:
    start = time.perf_counter()
    res = run("generate", "--study", "--json")
    elapsed = time.perf_counter() - start
    assert res.returncode == 0, res.stderr
    rows = json.loads(res.stdout)
    assert [(r["model"], r["strategy"]) for r in rows] == [
        (m, s) for m in STUDY_MODELS for s in ("TP2EP16", "TP4EP8", "TP8EP4", "TP16EP2")
    ]
    assert elapsed < 10
    text = run("generate", "--study")
    assert text.returncode == 0 and all(m in text.stdout for m in STUDY_MODELS)


def test_export_then_inspect(tmp_path: Path) -> None:
    res = run(
        "export",
        "--model",
        "glm-5.3",
        "--strategy",
        "TP8EP4",
        "--format",
        "chakra",
        "--out",
        str(tmp_path),
        "--prefix",
        "glm",
    )
    assert res.returncode == 0, res.stderr
    assert sorted(p.name for p in tmp_path.glob("glm.*.et")) == sorted(f"glm.{r}.et" for r in range(32))
    assert json.loads((tmp_path / "glm.comm_groups.json").read_text())["1"] == list(range(8))
    res = run("inspect", str(tmp_path / "glm"), "--json")
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout)["tp_bytes"] == 32 * 2 * 78 * 4096 * 6144 * 2


def test_inspect_astra_sim_files() -> None:
    res = run("inspect", str(FIXTURES / "all_to_all" / "16npus_1MB"), "--json")
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout)
    assert out["num_ranks"] == 16 and out["ep_bytes"] == 16 * 1048576 and out["logical_dims"] == [16]


# one case per kind of error (each is a ~1 s subprocess); the rest is covered in-process
@pytest.mark.parametrize(
    "args,needle",
    [
        (("generate", "--model", "deepseek-v4-flash", "--strategy", "TP4XP8"), "TP<n>EP<m>"),
        (("generate", "--model", "no-such-model", "--strategy", "TP4EP8"), "unknown model"),
        (
            ("generate", "--model", "deepseek-v4-flash", "--strategy", "TP4EP4", "--ranks", "32"),
            "does not match 32",
        ),
        (
            ("export", "--model", "mixtral-8x7b", "--strategy", "TP4EP8", "--format", "onnx", "--out", "x"),
            "chakra",
        ),
    ],
)
def test_bad_input_exits_2_with_one_line(args: tuple[str, ...], needle: str) -> None:
    res = run(*args)
    assert res.returncode == 2
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0]


def test_corrupt_et_exits_2(tmp_path: Path) -> None:
    (tmp_path / "c.0.et").write_bytes(b"\x07\x0a\x050.0.4" + b"\x40\x08")
    res = run("inspect", str(tmp_path))
    assert res.returncode == 2 and "byte offset 8" in res.stderr and len(res.stderr.strip().splitlines()) == 1


def test_bad_option_type_is_a_usage_error() -> None:
    res = run("generate", "--model", "deepseek-v4-flash", "--strategy", "TP4EP8", "--tokens", "many")
    assert res.returncode == 3 and "Traceback" not in res.stderr  # usage error (docs/experiments.md, exit codes)


@pytest.mark.parametrize(
    "args,needle",
    [
        (["generate", "--strategy", "TP4EP8"], "'--model': is required"),
        (["generate", "--model", "deepseek-v4-flash", "--strategy", "TP1EP3"], "does not divide"),
        (["generate", "--study", "--model", "kimi-k3"], "--study cannot be combined"),
        (["inspect", "/nonexistent/prefix"], "no ET files"),
    ],
)
def test_bad_input_in_process(args: list[str], needle: str) -> None:
    """The same commands in-process: the MoesimError (which cli.main turns into exit 2) and its text."""
    from typer.testing import CliRunner

    from moesim.commands.workload import workload_app
    from moesim.errors import MoesimError

    result = CliRunner().invoke(workload_app, args)
    assert isinstance(result.exception, MoesimError) and needle in str(result.exception)
