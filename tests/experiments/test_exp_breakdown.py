"""The breakdown side table of the results store: one Parquet file per run, written before the run's row,
resumable without duplicates, readable by DuckDB as one table, shown by `moesim results --breakdown`."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import duckdb
import pyarrow.parquet as pq
import pytest
from exp_helpers import moesim_cmd, store_rows

from moesim.errors import MoesimError
from moesim.experiments import ResultsStore, RunOutcome, run_sweep
from moesim.experiments.store import read_breakdown, resolve_run
from moesim.system.breakdown import LAYER_COLUMNS, NODE_COLUMNS
from moesim.system.run import simulate_run


@pytest.fixture(scope="module")
def specs(small_specs: list) -> list:
    return [s for s in small_specs if s.topology in ("1", "3") and s.network == "ib_cc0"]  # 4 runs


@pytest.fixture(scope="module")
def store(specs: list, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("breakdown")
    summary = run_sweep(specs, out, workers=1, progress="none")
    assert summary.ran == len(specs) and not summary.failures
    return out


def test_each_run_has_its_breakdown_as_recorded_alone(store: Path, specs: list) -> None:
    rows = store_rows(store)
    assert sorted(p.name for p in (store / "breakdown").iterdir()) == sorted(f"{r['run_id']}.parquet" for r in rows)
    for r in rows:
        table = pq.read_table(store / "breakdown" / f"{r['run_id']}.parquet")
        assert table.column_names == ["run_id", *LAYER_COLUMNS]
        spec = next(s for s in specs if s.key() == r["spec_key"])
        alone = simulate_run(spec, breakdown="layers").breakdown
        assert read_breakdown(store, r["run_id"]).equals(alone)  # the same rows, bit for bit
        # every rank's compute adds up to its GPU time; the bottleneck's to the stored gpu_s
        mine = [x for x in table.to_pylist() if x["rank"] == r["bottleneck_rank"]]
        assert sum(x["busy_s"] for x in mine if x["kind"] == "compute") == pytest.approx(r["gpu_s"], rel=1e-9)
        assert max(x["end_s"] for x in mine) == pytest.approx(r["wall_s"], rel=1e-12)


def test_duckdb_reads_every_breakdown_as_one_table(store: Path) -> None:
    con = duckdb.connect()
    n_files, n_runs, n_rows = con.execute(
        f"SELECT count(DISTINCT filename), count(DISTINCT run_id), count(*) "
        f"FROM read_parquet('{store}/breakdown/*.parquet', filename=true)").fetchone()
    con.close()
    assert n_files == n_runs == len(store_rows(store))
    assert n_rows == sum(pq.read_metadata(p).num_rows for p in (store / "breakdown").iterdir())


def test_rerun_replaces_files_and_orphans_go(store: Path, specs: list, tmp_path: Path) -> None:
    out = tmp_path / "s"
    shutil.copytree(store, out)
    rows = store_rows(out)
    # left by a sweep killed after writing a breakdown but before committing its row, or mid-write
    (out / "breakdown" / f"{'f' * 64}.parquet").write_bytes(b"partial")
    (out / "breakdown" / ".tmp-x-1234").write_bytes(b"partial")
    summary = run_sweep(specs, out, workers=1, progress="none", rerun=True)
    assert summary.ran == len(specs)
    assert sorted(p.name for p in (out / "breakdown").iterdir()) == sorted(f"{r['run_id']}.parquet" for r in rows)
    assert len(store_rows(out)) == len(rows)
    # a spec redone with other inputs drops its old breakdown with its row
    with ResultsStore(out) as s:
        assert s.forget_stale({specs[0].key(): "0" * 64}) == 1
    assert len(list((out / "breakdown").iterdir())) == len(rows) - 1


@pytest.mark.parametrize("level,columns", [("nodes", NODE_COLUMNS), ("none", None)])
def test_levels(specs: list, tmp_path: Path, level: str, columns: dict | None) -> None:
    run_sweep(specs[:1], tmp_path, workers=1, progress="none", breakdown=level)
    (row,) = store_rows(tmp_path)
    if columns is None:
        assert not (tmp_path / "breakdown").exists()
        with pytest.raises(MoesimError, match="has no breakdown"):
            read_breakdown(tmp_path, row["run_id"])
    else:
        table = read_breakdown(tmp_path, row["run_id"])
        assert table.column_names == list(columns) and table.num_rows == len(set(zip(
            table.column("rank").to_pylist(), table.column("node_id").to_pylist(), strict=True)))
    with pytest.raises(MoesimError, match="allowed: none, layers, nodes"):
        run_sweep(specs[:1], tmp_path, workers=1, progress="none", breakdown="all")


def test_a_failed_run_has_no_breakdown(specs: list, tmp_path: Path) -> None:
    with ResultsStore(tmp_path) as s:
        s.record(RunOutcome("a" * 64, specs[0], error="boom"))
    assert not (tmp_path / "breakdown").exists()


def _results(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(moesim_cmd("results", *args), capture_output=True, text=True, check=False)


def test_cli_shows_the_slowest_runs_layers(store: Path) -> None:
    rows = store_rows(store)
    slowest = max(rows, key=lambda r: r["wall_s"])
    assert resolve_run(store, "slowest")["run_id"] == slowest["run_id"]
    assert resolve_run(store, slowest["run_id"][:8])["run_id"] == slowest["run_id"]
    proc = _results(str(store), "--breakdown", "slowest")
    assert proc.returncode == 0, proc.stderr
    assert slowest["run_id"][:12] in proc.stdout and "ep_dispatch_s" in proc.stdout
    as_json = json.loads(_results(str(store), "--breakdown", slowest["run_id"][:10], "--json").stdout)
    assert as_json["run_id"] == slowest["run_id"] and as_json["bottleneck_rank"] == slowest["bottleneck_rank"]
    assert len(as_json["rows"]) == read_breakdown(store, slowest["run_id"]).num_rows


@pytest.mark.parametrize("run,needle", [("zzzz", "is not a run"), ("0000000", "no successful run"),
                                        ("slowest --sql x", "")])
def test_cli_errors_are_one_line(store: Path, run: str, needle: str) -> None:
    proc = _results(str(store), "--breakdown", *run.split())
    assert proc.returncode != 0 and needle in proc.stderr and "Traceback" not in proc.stderr


def test_a_store_without_breakdowns_still_loads(store: Path, tmp_path: Path) -> None:
    from moesim.analysis.report import build_report
    from moesim.analysis.results import load_results

    out = tmp_path / "old"
    shutil.copytree(store, out)
    shutil.rmtree(out / "breakdown")
    assert load_results(out).num_rows == len(store_rows(store))
    proc = _results(str(out), "--breakdown", "slowest")
    assert proc.returncode != 0 and "has no breakdown" in proc.stderr and len(proc.stderr.strip().splitlines()) <= 3
    page = build_report(out, tmp_path / "rep").html.read_text()
    assert "No run in these results has a stored breakdown" in page
