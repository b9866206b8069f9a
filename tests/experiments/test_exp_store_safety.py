"""No command destroys a results store: exports never write over the store's own files or through links, and a
damaged store, a store of another schema version or one moesim did not write is refused with one line that
names it and says how to recover; the store is byte for byte as it was afterwards."""

from __future__ import annotations

import csv
import hashlib
import os
import shutil
from pathlib import Path

import duckdb
import pytest

from moesim.cli import run_cli
from moesim.experiments import run_sweep

MODEL_RUNS = ("--models", "{model}", "--topologies", "1", "--strategies", "TP2EP16,TP4EP8", "--networks",
              "ib_cc0", "--backend", "flow", "--workers", "1", "--progress", "none")


@pytest.fixture(scope="module")
def two_run_store(small_specs: list, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("two")
    run_sweep(small_specs[:2], out, workers=1, progress="none")
    return out


@pytest.fixture()
def store(two_run_store: Path, tmp_path: Path) -> Path:
    copy = tmp_path / "store"
    shutil.copytree(two_run_store, copy)
    return copy


def fingerprint(folder: Path) -> dict[str, str]:
    """sha256 of every file under ``folder`` (links not followed), by relative path."""
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file() and not p.is_symlink()}


def one_line_error(capsys: pytest.CaptureFixture[str], args: list[str], *needles: str) -> str:
    code = run_cli(args)
    err = capsys.readouterr().err
    assert code == 2, (code, err)
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("moesim: error: "), err
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]


def sweep_args(store: Path, small_dir: Path) -> list[str]:
    return ["sweep", "study", "--out", str(store),
            *(a.format(model=small_dir / "tiny.yaml") for a in MODEL_RUNS)]


# ------------------------------------------------------------------------- exports


@pytest.mark.parametrize("target", ["results.duckdb", "results.duckdb.wal", "./sub/../results.duckdb",
                                    "breakdown/new.parquet", "diagnostics/x.csv"])
def test_an_export_never_writes_over_the_store_files(store: Path, capsys, target: str) -> None:
    (store / "sub").mkdir()
    before = fingerprint(store)
    one_line_error(capsys, ["results", str(store), "--export", "csv", "--to", str(store / target)],
                   "is a file of the results store")
    assert fingerprint(store) == before


def test_an_export_through_a_link_to_the_store_is_refused(store: Path, tmp_path: Path, capsys) -> None:
    link = tmp_path / "runs.csv"
    link.symlink_to(store / "results.duckdb")
    before = fingerprint(store)
    one_line_error(capsys, ["results", str(store), "--export", "csv", "--to", str(link)], "symbolic link")
    assert fingerprint(store) == before and link.is_symlink()


def test_an_export_through_a_link_to_another_file_is_refused(store: Path, tmp_path: Path, capsys) -> None:
    target = tmp_path / "precious.txt"
    target.write_text("keep me\n")
    link = tmp_path / "runs.csv"
    link.symlink_to(target)
    one_line_error(capsys, ["results", str(store), "--export", "csv", "--to", str(link)],
                   f"--to {link}: is a symbolic link to {target}")
    assert target.read_text() == "keep me\n" and os.readlink(link) == str(target)


def test_an_export_next_to_the_store_is_written(store: Path, capsys) -> None:
    assert run_cli(["results", str(store), "--export", "csv", "--to", str(store / "runs.csv")]) == 0
    with open(store / "runs.csv", newline="") as f:
        exported = {r["run_id"]: float(r["wall_s"]) for r in csv.DictReader(f)}
    con = duckdb.connect(str(store / "results.duckdb"), read_only=True)
    try:
        stored = dict(con.execute("SELECT run_id, wall_s FROM runs").fetchall())
    finally:
        con.close()
    assert len(stored) == 2 and exported == stored  # every run, each with its own wall time, to the last bit


# ------------------------------------------------------------------------- damaged or foreign stores


def truncate(store: Path, fraction: float) -> None:
    db = store / "results.duckdb"
    with open(db, "r+b") as f:
        f.truncate(int(db.stat().st_size * fraction))


@pytest.mark.parametrize("fraction", [0.0, 0.3])
def test_a_truncated_store_is_one_line_everywhere_and_a_sweep_leaves_it_alone(
        store: Path, small_dir: Path, capsys, fraction: float) -> None:
    truncate(store, fraction)
    before = fingerprint(store)
    for args in (["results", str(store)], ["results", str(store), "--json"], ["report", str(store)],
                 ["results", str(store), "--sql", "SELECT count(*) FROM runs"], sweep_args(store, small_dir)):
        line = one_line_error(capsys, args, str(store / "results.duckdb"), "damaged", "move it away")
        assert "--sql" not in line
    assert fingerprint(store) == before


def test_a_store_of_another_schema_version_is_refused(store: Path, small_dir: Path, capsys) -> None:
    con = duckdb.connect(str(store / "results.duckdb"))
    con.execute("UPDATE store_meta SET value = '999' WHERE key = 'schema_version'")
    con.close()
    before = fingerprint(store)
    for args in (sweep_args(store, small_dir), ["results", str(store)], ["report", str(store)]):
        one_line_error(capsys, args, "schema version '999'", "reads and writes version '1'")
    assert fingerprint(store) == before


def test_a_runs_table_without_a_store_column_is_named_not_taken_for_an_override(
        store: Path, small_dir: Path, capsys) -> None:
    con = duckdb.connect(str(store / "results.duckdb"))
    con.execute("ALTER TABLE runs DROP COLUMN comm_s")
    con.close()
    before = fingerprint(store)
    line = one_line_error(capsys, sweep_args(store, small_dir), "table runs has no column comm_s")
    assert "override" not in line
    line = one_line_error(capsys, ["results", str(store)], "table runs has no column comm_s")
    assert "Binder" not in line
    assert fingerprint(store) == before
