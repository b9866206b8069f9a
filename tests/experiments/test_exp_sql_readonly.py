"""`moesim results --sql` is read-only: one SELECT, on a connection that reaches no other file.

Each escape below returned exit code 0 on a plain read-only DuckDB connection: it emptied or destroyed
another store, wrote a file anywhere, or read the machine's files.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from moesim.errors import MoesimError
from moesim.experiments import ResultsStore, RunOutcome, query_results
from moesim.system.spec import RunSpec


def _store(directory: Path) -> Path:
    with ResultsStore(directory) as store:
        store.record(RunOutcome("a" * 64, RunSpec("deepseek-v4-flash", "1", "TP2EP16"), error="x"))
    return directory


@pytest.fixture()
def stores(tmp_path: Path) -> tuple[Path, Path]:
    return _store(tmp_path / "mine"), _store(tmp_path / "other")


def _rows(directory: Path) -> int:
    return query_results(directory, "SELECT count(*) AS n FROM runs").column("n").to_pylist()[0]


ESCAPES = {
    "attach_other_store_writable": "ATTACH '{other}/results.duckdb' AS o (READ_ONLY false); DELETE FROM o.runs",
    "attach_other_store": "ATTACH '{other}/results.duckdb' AS o",
    "delete_own_rows": "DELETE FROM runs",
    "copy_select_over_other_store": "COPY (SELECT 1) TO '{other}/results.duckdb'",
    "copy_runs_anywhere": "COPY runs TO '{tmp}/leak.csv'",
    "read_text_etc_shadow": "SELECT * FROM read_text('/etc/shadow')",
    "read_text_etc_passwd": "SELECT * FROM read_text('/etc/passwd')",
    "read_csv": "SELECT * FROM read_csv('/etc/passwd')",
    "glob_root": "SELECT * FROM glob('/root/*')",
    "read_parquet": "SELECT * FROM read_parquet('{other}/*.parquet')",
    "set_external_access": "SET enable_external_access = true",
    "select_then_set": "SELECT 1; SET enable_external_access = true",
    "install_extension": "INSTALL httpfs",
    "load_extension": "LOAD httpfs",
    "create_table": "CREATE TABLE t AS SELECT 1",
    "pragma": "PRAGMA enable_profiling",
    "export_database": "EXPORT DATABASE '{tmp}/dump'",
}


@pytest.mark.parametrize("name", sorted(ESCAPES))
def test_escape_is_refused_and_changes_nothing(name: str, stores: tuple[Path, Path], tmp_path: Path) -> None:
    mine, other = stores
    sql = ESCAPES[name].format(other=other, tmp=tmp_path)
    with pytest.raises(MoesimError, match=r"^--sql: "):
        query_results(mine, sql)
    assert _rows(mine) == 1 and _rows(other) == 1
    assert not (tmp_path / "leak.csv").exists() and not (tmp_path / "dump").exists()


def test_a_select_reading_a_file_through_a_subquery_is_refused(stores: tuple[Path, Path]) -> None:
    mine, _ = stores
    with pytest.raises(MoesimError, match=r"Permission|disabled"):
        query_results(mine, "WITH f AS (SELECT * FROM read_text('/etc/hostname')) SELECT count(*) FROM f, runs")


def test_select_and_with_queries_still_work(stores: tuple[Path, Path]) -> None:
    mine, _ = stores
    assert query_results(mine, "WITH t AS (SELECT status FROM runs) SELECT * FROM t").to_pylist() == [
        {"status": "error"}]
    assert query_results(mine, "FROM runs SELECT topology").to_pylist() == [{"topology": "1"}]


def test_cli_refuses_with_exit_code_2(stores: tuple[Path, Path], tmp_path: Path) -> None:
    import subprocess
    import sys

    mine, other = stores
    sql = ESCAPES["copy_select_over_other_store"].format(other=other)
    proc = subprocess.run([sys.executable, "-m", "moesim.cli", "results", str(mine), "--sql", sql],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.count("\n") == 1 and "COPY statements are not allowed" in proc.stderr
    assert _rows(other) == 1
