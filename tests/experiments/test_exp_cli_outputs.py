"""What a user can get wrong about where moesim writes and reads: each input is one line on stderr with exit
code 2 (docs/experiments.md, "Exit codes"), never a traceback, and nothing is written where it should not be.

Read-only folders are made with chmod; as root (which ignores permissions) the command runs without the
CAP_DAC_OVERRIDE capability, so the kernel applies them as it would for any user.
"""

from __future__ import annotations

import ctypes
import os
import shutil
import socket
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from exp_helpers import moesim_cmd

PR_CAPBSET_DROP = 24
CAP_DAC_OVERRIDE = 1


def _drop_dac_override() -> None:
    """preexec_fn: as root, lose the capability to write where permissions forbid it."""
    if os.geteuid() == 0:
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(PR_CAPBSET_DROP, CAP_DAC_OVERRIDE, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_CAPBSET_DROP)")


def moesim(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(moesim_cmd(*args), capture_output=True, text=True, timeout=300, cwd=cwd,
                          preexec_fn=_drop_dac_override)


def assert_one_line_error(res: subprocess.CompletedProcess[str], *needles: str) -> None:
    assert res.returncode == 2, (res.returncode, res.stderr)
    assert "Traceback" not in res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("moesim: error: "), res.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]


@pytest.fixture()
def store(reference_store: Path, tmp_path: Path) -> Path:
    """A private copy of the 24-run reference store (tests may make it read-only)."""
    copy = tmp_path / "store"
    shutil.copytree(reference_store, copy)
    return copy


@pytest.fixture()
def readonly(tmp_path: Path):
    """Make folders read-only for the test; restore their permissions afterwards (for cleanup)."""
    made: list[Path] = []

    def make(folder: Path) -> Path:
        folder.mkdir(parents=True, exist_ok=True)
        folder.chmod(0o555)
        made.append(folder)
        return folder

    yield make
    for folder in made:
        folder.chmod(0o755)


# ------------------------------------------------------------------------- --out naming an existing file

@pytest.mark.parametrize("command", [
    pytest.param(["report", "{store}", "--out", "{file}"], id="report-out-is-a-file"),
    pytest.param(["compare", "{store}", "--reference", "v4_flash", "--out", "{file}"], id="compare-out-is-a-file"),
    pytest.param(["export", "--model", "deepseek-v4-flash", "--topology", "1", "--strategy", "TP2EP16",
                  "--out", "{file}"], id="export-out-is-a-file"),
    pytest.param(["workload", "export", "--model", "deepseek-v4-flash", "--strategy", "TP2EP16", "--out", "{file}"],
                 id="workload-export-out-is-a-file"),
    pytest.param(["topology", "export", "1", "--out", "{file}"], id="topology-export-out-is-a-file"),
    pytest.param(["sweep", "study", "--preset", "smoke", "--out", "{file}"], id="sweep-out-is-a-file"),
])
def test_out_naming_an_existing_file(command: list[str], store: Path, tmp_path: Path) -> None:
    file = tmp_path / "taken.txt"
    file.write_text("keep me\n")
    res = moesim(*(a.format(store=store, file=file) for a in command))
    assert_one_line_error(res, str(file))
    assert file.read_text() == "keep me\n"


# ------------------------------------------------------------------------- results --export --to

def test_export_to_a_folder_is_refused_before_writing(store: Path, tmp_path: Path) -> None:
    folder = tmp_path / "exports"
    folder.mkdir()
    res = moesim("results", str(store), "--export", "csv", "--to", str(folder))
    assert_one_line_error(res, f"--to {folder}: is a folder")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["exports", "store"]  # no temporary file beside it
    assert not any(folder.iterdir())


def test_export_to_standard_output(store: Path) -> None:
    res = moesim("results", str(store), "--export", "csv", "--to", "-")
    assert res.returncode == 0 and res.stderr == "", res.stderr
    header, *rows = res.stdout.splitlines()
    assert header.startswith('"run_id","spec_key"') and len(rows) == 24


def test_export_to_standard_output_piped_into_head(store: Path) -> None:
    cmd = " ".join(f"'{a}'" for a in moesim_cmd("results", str(store), "--export", "csv", "--to", "-"))
    res = subprocess.run(f"{cmd} | head -n 3", shell=True, capture_output=True, text=True, timeout=120,
                         executable="/bin/bash")
    assert res.returncode == 0 and len(res.stdout.splitlines()) == 3
    assert "Traceback" not in res.stderr and "Broken pipe" not in res.stderr, res.stderr


def test_export_through_a_symlink_is_refused(store: Path, tmp_path: Path) -> None:
    """A link to a regular file is not written through (its target is a file the user did not name)."""
    target = tmp_path / "real.csv"
    target.write_text("old\n")
    link = tmp_path / "link.csv"
    link.symlink_to(target)
    res = moesim("results", str(store), "--export", "csv", "--to", str(link))
    assert_one_line_error(res, f"--to {link}: is a symbolic link to {target}")
    assert link.is_symlink() and os.readlink(link) == str(target) and target.read_text() == "old\n"


def test_export_to_a_link_to_standard_output(store: Path, tmp_path: Path) -> None:
    """``--to /dev/stdout`` once replaced the /dev/stdout symlink by a regular file; a link of our own to it
    must stay a link and the data must come out on standard output."""
    link = tmp_path / "stdout"
    link.symlink_to("/dev/stdout")
    res = moesim("results", str(store), "--export", "csv", "--to", str(link))
    assert res.returncode == 0, res.stderr
    assert link.is_symlink() and os.readlink(link) == "/dev/stdout"
    assert res.stdout.startswith('"run_id","spec_key"') and res.stdout.count("\n") >= 25


def test_export_to_a_fifo_writes_into_it(store: Path, tmp_path: Path) -> None:
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    reader = subprocess.Popen(["cat", str(fifo)], stdout=subprocess.PIPE, text=True)
    res = moesim("results", str(store), "--export", "csv", "--to", str(fifo))
    data, _ = reader.communicate(timeout=60)
    assert res.returncode == 0, res.stderr
    assert stat.S_ISFIFO(fifo.lstat().st_mode) and data.count("\n") == 25


# ------------------------------------------------------------------------- read-only output or store folder

def test_report_into_a_read_only_folder(store: Path, tmp_path: Path, readonly) -> None:
    out = readonly(tmp_path / "ro")
    res = moesim("report", str(store), "--out", str(out))
    assert_one_line_error(res, f"--out {out}: the folder is not writable")
    res = moesim("report", str(store), "--out", str(out / "sub"))
    assert_one_line_error(res, f"--out {out / 'sub'}: {out} is not writable")


def test_report_of_a_read_only_store_folder(store: Path, readonly) -> None:
    readonly(store)
    res = moesim("report", str(store))
    assert_one_line_error(res, f"DIR {store}: the folder is not writable")
    table = moesim("results", str(store))  # reading a read-only store works
    assert table.returncode == 0 and "24 runs" in table.stdout, table.stderr


def test_sweep_into_a_read_only_folder(small_dir: Path, tmp_path: Path, readonly) -> None:
    out = readonly(tmp_path / "ro")
    res = moesim("sweep", "run", str(small_dir / "small.yaml"), "--out", str(out), "--topologies", "6",
                 "--progress", "none")
    assert_one_line_error(res, str(out / "results.duckdb"), "cannot open the results store")
    res = moesim("sweep", "run", str(small_dir / "small.yaml"), "--out", str(out / "new"), "--topologies", "6",
                 "--progress", "none")
    assert_one_line_error(res, f"{out / 'new'}: cannot create the output folder")


def test_export_into_a_read_only_folder(store: Path, tmp_path: Path, readonly) -> None:
    out = readonly(tmp_path / "ro")
    res = moesim("results", str(store), "--export", "parquet", "--to", str(out / "runs.parquet"))
    assert_one_line_error(res, str(out / "runs.parquet"), "Permission denied")
    res = moesim("workload", "export", "--model", "deepseek-v4-flash", "--strategy", "TP2EP16", "--out", str(out))
    assert_one_line_error(res, f"--out {out}: the folder is not writable")
    assert not any(out.iterdir())


# ------------------------------------------------------------------------- a junk runs.parquet

@pytest.mark.parametrize("command", [
    pytest.param(["report", "{dir}"], id="report-junk-runs-parquet"),
    pytest.param(["compare", "{dir}", "--reference", "v4_flash"], id="compare-junk-runs-parquet"),
])
def test_junk_runs_parquet(command: list[str], tmp_path: Path) -> None:
    folder = tmp_path / "junk"
    folder.mkdir()
    (folder / "runs.parquet").write_bytes(b"this is not a parquet file\n")
    res = moesim(*(a.format(dir=folder) for a in command))
    assert_one_line_error(res, f"{folder / 'runs.parquet'}: not a readable Parquet results table")


# ------------------------------------------------------------------------- a cluster address

@pytest.mark.parametrize("address", ["not an address", "10.0.0.1", "host:port"],
                         ids=["ray-address-with-spaces", "ray-address-without-port", "ray-address-bad-port"])
def test_bad_ray_address_leaves_no_store(address: str, tmp_path: Path) -> None:
    pytest.importorskip("ray")
    out = tmp_path / "out"
    res = moesim("sweep", "study", "--preset", "smoke", "--out", str(out), "--executor", "ray", "--address", address)
    assert_one_line_error(res, f"--address '{address}': not a Ray address (allowed: HOST:PORT, ray://HOST:PORT or auto)")
    assert not out.exists()


def test_unreachable_ray_cluster_leaves_no_store(tmp_path: Path) -> None:
    pytest.importorskip("ray")
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    out = tmp_path / "out"
    res = moesim("sweep", "study", "--preset", "smoke", "--out", str(out), "--executor", "ray",
                 "--address", f"127.0.0.1:{port}")
    assert_one_line_error(res, f"--address 127.0.0.1:{port}: no Ray cluster reachable there")
    assert not out.exists()


def test_python_runs_the_cli_as_a_module() -> None:
    res = subprocess.run([sys.executable, "-m", "moesim", "--version"], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0 and res.stdout.startswith("moesim ") and res.stdout.count("\n") == 1
