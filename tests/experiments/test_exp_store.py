"""The results store: the row contract the analysis reads, replacement by key, diagnostics side files, export."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow.csv as pcsv
import pyarrow.parquet as pq
import pytest
from exp_helpers import store_rows

from moesim.errors import MoesimError
from moesim.experiments import ResultsStore, RunOutcome, export_results, input_hash, query_results
from moesim.system.run import simulate_run
from moesim.system.spec import RunSpec

# The columns the analysis layer relies on (docs/architecture.md, "Interfaces other parts rely on").
CONTRACT = ("run_id", "model", "topology", "strategy", "tp", "ep", "algorithm", "network", "backend",
            "overrides_json", "wall_s", "gpu_s", "comm_s", "bottleneck_rank", "cc_model", "cc_policy", "status",
            "error", "version", "params_json", "input_hash", "diagnostics_path", "sim_wallclock_s", "finished_at")


@pytest.fixture(scope="module")
def tiny_spec(small_dir: Path) -> RunSpec:
    return RunSpec(str((small_dir / "tiny.yaml").resolve()), "1", "TP2EP16")


@pytest.fixture(scope="module")
def tiny_result(tiny_spec: RunSpec):
    return simulate_run(tiny_spec, diagnostics=True)


def test_rows_hold_the_summary_and_the_contract_columns(tmp_path: Path, tiny_spec: RunSpec, tiny_result) -> None:
    rid = input_hash(tiny_spec)
    with ResultsStore(tmp_path) as store:
        store.record(RunOutcome(rid, tiny_spec, result=tiny_result))
        bad = RunSpec(tiny_spec.model, "6", "TP4EP8")
        store.record(RunOutcome(input_hash(bad), bad, error="ZeroDivisionError: float division by zero\ntraceback"))
        assert store.completed_ids() == {rid}
    rows = {r["status"]: r for r in store_rows(tmp_path)}
    assert set(CONTRACT) <= set(rows["ok"])
    ok, s = rows["ok"], tiny_result.summary()
    for key in ("model", "topology", "strategy", "tp", "ep", "algorithm", "network", "backend", "wall_s", "gpu_s",
                "comm_s", "bottleneck_rank", "cc_model", "cc_policy", "version"):
        assert ok[key] == s[key], key
    assert ok["run_id"] == ok["input_hash"] == rid
    params = json.loads(ok["params_json"])
    assert {k: v for k, v in params.items() if k != "source_sha256"} == json.loads(json.dumps(s["parameters"]))
    err = rows["error"]
    assert err["wall_s"] is None and err["error"].startswith("ZeroDivisionError") and err["topology"] == "6"


def test_same_run_twice_is_one_row_and_changed_inputs_replace_it(tmp_path: Path, tiny_spec: RunSpec,
                                                                  tiny_result) -> None:
    with ResultsStore(tmp_path) as store:
        store.record(RunOutcome("a" * 64, tiny_spec, error="boom"))
        store.record(RunOutcome("a" * 64, tiny_spec, result=tiny_result))
        assert [(r["run_id"], r["status"]) for r in store_rows_open(store)] == [("a" * 64, "ok")]
        # the same spec with other inputs (another hash): the old row goes
        store.record(RunOutcome("b" * 64, tiny_spec, result=tiny_result))
        assert [r["run_id"] for r in store_rows_open(store)] == ["b" * 64]
        # a sweep that plans this spec under a third hash forgets the stale row before running
        assert store.forget_stale({tiny_spec.key(): "c" * 64}) == 1
        assert store_rows_open(store) == []


def store_rows_open(store: ResultsStore) -> list[dict]:
    cur = store.con.execute("SELECT run_id, status FROM runs ORDER BY run_id")
    return [{"run_id": a, "status": b} for a, b in cur.fetchall()]


def test_diagnostics_are_parquet_side_files(tmp_path: Path, tiny_spec: RunSpec, tiny_result) -> None:
    rid = input_hash(tiny_spec, diagnostics=True)
    with ResultsStore(tmp_path) as store:
        store.record(RunOutcome(rid, tiny_spec, result=tiny_result))
    (row,) = store_rows(tmp_path)
    folder = tmp_path / row["diagnostics_path"]
    table = pq.read_table(folder / "link_bytes.parquet")
    np.testing.assert_array_equal(table.column("link_bytes").to_numpy(), tiny_result.diagnostics["link_bytes"])
    assert table.column("link_id").to_pylist() == list(range(len(tiny_result.diagnostics["link_bytes"])))
    assert not [p for p in (tmp_path / "diagnostics").iterdir() if p.name.startswith(".tmp")]


def test_orphan_diagnostics_are_removed(tmp_path: Path, tiny_spec: RunSpec, tiny_result) -> None:
    # a sweep killed after renaming a run's diagnostics folder but before committing its row
    orphan = tmp_path / "diagnostics" / ("d" * 64)
    orphan.mkdir(parents=True)
    (orphan / "link_bytes.parquet").write_bytes(b"partial")
    (tmp_path / "diagnostics" / ".tmp-x").mkdir()
    with ResultsStore(tmp_path) as store:
        store.record(RunOutcome("e" * 64, tiny_spec, result=tiny_result))
        store.remove_orphans()
    assert sorted(p.name for p in (tmp_path / "diagnostics").iterdir()) == ["e" * 64]


def test_override_factors_get_columns(tmp_path: Path, tiny_spec: RunSpec, tiny_result) -> None:
    spec = RunSpec(tiny_spec.model, "1", "TP2EP16", overrides=(("tokens", 2048),))
    with ResultsStore(tmp_path) as store:
        store.add_factor_columns(["tokens"])
        store.record(RunOutcome("f" * 64, spec, error="x"))
        store.record(RunOutcome("g" * 64, tiny_spec, result=tiny_result))
    rows = {r["run_id"][0]: r for r in store_rows(tmp_path)}
    assert rows["f"]["tokens"] == "2048" and rows["g"]["tokens"] is None
    assert json.loads(rows["f"]["overrides_json"]) == {"tokens": 2048}


def test_query_and_export(tmp_path: Path, tiny_spec: RunSpec, tiny_result) -> None:
    with ResultsStore(tmp_path) as store:
        for topo in ("6", "1", "3"):
            spec = RunSpec(tiny_spec.model, topo, "TP2EP16")
            store.record(RunOutcome(topo * 64, spec, result=tiny_result))
    table = query_results(tmp_path)
    assert table.column("topology").to_pylist() == ["1", "3", "6"]  # ordered by the factors
    picked = query_results(tmp_path, "SELECT topology, wall_s FROM runs WHERE topology <> '3' ORDER BY topology")
    assert picked.to_pylist() == [{"topology": "1", "wall_s": tiny_result.wall_s},
                                  {"topology": "6", "wall_s": tiny_result.wall_s}]
    assert export_results(tmp_path, tmp_path / "r.parquet", "parquet") == 3
    assert pq.read_table(tmp_path / "r.parquet").equals(table)
    assert export_results(tmp_path, tmp_path / "r.csv", "csv", "SELECT topology, wall_s FROM runs ORDER BY 1") == 3
    csv = pcsv.read_csv(tmp_path / "r.csv")
    assert csv.column("wall_s").to_pylist() == [tiny_result.wall_s] * 3
    assert sorted(p.name for p in tmp_path.iterdir() if p.is_file()) == ["r.csv", "r.parquet", "results.duckdb"]
    with pytest.raises(MoesimError, match=r"--sql: .*nope"):
        query_results(tmp_path, "SELECT nope FROM runs")
    with pytest.raises(MoesimError, match=r"unknown format 'xlsx' \(allowed: parquet, csv\)"):
        export_results(tmp_path, tmp_path / "r.xlsx", "xlsx")


def test_reading_a_store_in_use_or_missing_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(MoesimError, match=r"no results store \(results.duckdb\)"):
        query_results(tmp_path)
    import subprocess
    import sys

    with ResultsStore(tmp_path):
        # another process (as `moesim results` would be) cannot open the store while a sweep writes it
        code = ("from moesim.experiments import query_results\nfrom moesim.errors import MoesimError\n"
                f"try:\n    query_results({str(tmp_path)!r})\nexcept MoesimError as e:\n    print(e)\n")
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120).stdout
    assert "in use by a running sweep" in out
