"""ruff and mypy, run as part of the test suite (so CI runs them: the ``test`` extra installs both).

``ruff check src tests benchmarks`` and ``mypy src`` from the repository root, with the settings in
``pyproject.toml``; each test fails on any finding and prints the tool's report. Skipped when the tool is
not installed or the source tree is not at hand (an installed package without its repository).
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _tool(module: str) -> None:
    if importlib.util.find_spec(module) is None:
        pytest.skip(f"{module} is not installed (pip install -e '.[test]')")
    if not (ROOT / "pyproject.toml").is_file() or not (ROOT / "src" / "moesim").is_dir():
        pytest.skip("not run from a source checkout")


def run(module: str, *args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", module, *args], cwd=cwd, capture_output=True, text=True,
                          timeout=600)


def test_ruff_finds_nothing():
    _tool("ruff")
    out = run("ruff", "check", "src", "tests", "benchmarks")
    assert out.returncode == 0, out.stdout + out.stderr


def test_mypy_finds_nothing():
    _tool("mypy")
    out = run("mypy", "src")
    assert out.returncode == 0, out.stdout + out.stderr


def test_ruff_catches_a_finding(tmp_path):
    _tool("ruff")
    (tmp_path / "bad.py").write_text("import os\n")  # F401, unused import
    out = run("ruff", "check", "--no-cache", "--isolated", "bad.py", cwd=tmp_path)
    assert out.returncode == 1 and "F401" in out.stdout, out.stdout + out.stderr


def test_mypy_catches_a_finding(tmp_path):
    _tool("mypy")
    (tmp_path / "bad.py").write_text("x: int = 'one'\n")
    out = run("mypy", "--no-incremental", "--cache-dir", str(tmp_path / ".mypy_cache"), "bad.py", cwd=tmp_path)
    assert out.returncode == 1 and "Incompatible types" in out.stdout, out.stdout + out.stderr
