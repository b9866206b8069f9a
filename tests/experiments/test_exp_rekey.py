"""A store keyed by the earlier scheme (the network part of the key held every section of every algorithm)
resumes without simulating again: its rows and breakdown files take the current ids."""

from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq
from exp_helpers import store_rows

from moesim.experiments import ResultsStore, RunOutcome, plan_runs, run_sweep
from moesim.system.run import simulate_run


def test_a_store_under_legacy_ids_is_rekeyed_not_simulated_again(small_specs: list, tmp_path: Path) -> None:
    specs = small_specs[:3]
    planned = plan_runs(specs)
    assert all(p.legacy_run_id not in ("", p.run_id) for p in planned)
    with ResultsStore(tmp_path) as store:  # the store as the earlier scheme wrote it
        for p in planned:
            store.record(RunOutcome(p.legacy_run_id, p.spec, result=simulate_run(p.spec, breakdown="layers"),
                                    input_hash=p.legacy_run_id))
    before = {r["spec_key"]: (r["wall_s"], r["gpu_s"], r["comm_s"], r["params_json"]) for r in store_rows(tmp_path)}
    summary = run_sweep(specs, tmp_path, workers=1, progress="none")
    assert (summary.cached, summary.ran) == (3, 0)
    rows = store_rows(tmp_path)
    assert {(r["spec_key"], r["run_id"], r["input_hash"]) for r in rows} == \
        {(p.spec.key(), p.run_id, p.input_hash) for p in planned}
    assert {r["spec_key"]: (r["wall_s"], r["gpu_s"], r["comm_s"], r["params_json"]) for r in rows} == before
    files = sorted((tmp_path / "breakdown").iterdir())
    assert [f.stem for f in files] == sorted(p.run_id for p in planned)
    for f in files:
        assert set(pq.read_table(f).column("run_id").to_pylist()) == {f.stem}
