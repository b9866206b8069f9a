"""Loading result stores (real DuckDB / Parquet files) and normalising results tables."""

from __future__ import annotations

import random

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from analysis_data import small_rows, study_rows, write_store

from moesim.analysis.results import (
    as_table,
    describe_configs,
    factor_columns,
    levels,
    load_results,
    natural_key,
)
from moesim.analysis.stats import group_means, overall
from moesim.errors import MoesimError


def test_load_duckdb_keeps_only_ok_runs(tmp_path):
    rows = small_rows()
    write_store(tmp_path, rows)
    t = load_results(tmp_path)
    assert t.num_rows == sum(r["status"] == "ok" for r in rows) == 17
    assert set(t.column("status").to_pylist()) == {"ok"}
    assert load_results(tmp_path, include_failed=True).num_rows == 18


def test_load_parquet_when_no_duckdb(tmp_path):
    pq.write_table(pa.Table.from_pylist(small_rows()), tmp_path / "runs.parquet")
    assert load_results(tmp_path).num_rows == 17


def test_store_errors_are_one_line(tmp_path):
    with pytest.raises(MoesimError, match="no results store found"):
        load_results(tmp_path)
    con = duckdb.connect(str(tmp_path / "results.duckdb"))
    con.execute("CREATE TABLE other (x INT)")
    con.close()
    with pytest.raises(MoesimError, match="field 'runs'"):
        load_results(tmp_path)


def test_missing_required_column_names_the_field():
    with pytest.raises(MoesimError, match="field 'comm_s'"):
        as_table([{"model": "A", "wall_s": 1.0, "gpu_s": 0.5}])


def test_accepts_duckdb_relation_and_list_of_dicts():
    rows = small_rows(extra_unmatched=False)
    con = duckdb.connect()
    con.register("t", pa.Table.from_pylist(rows))
    from_rel = as_table(con.sql("SELECT * FROM t"))
    from_list = as_table(rows)
    assert from_rel.to_pylist() == from_list.to_pylist()


def test_row_order_does_not_change_any_bit():
    rows = study_rows()
    shuffled = rows[:]
    random.Random(7).shuffle(shuffled)
    a, b = as_table(rows), as_table(shuffled)
    assert group_means(a, ("model", "strategy")).to_pylist() == group_means(b, ("model", "strategy")).to_pylist()
    assert overall(a).to_pylist() == overall(b).to_pylist()


def test_integer_factors_become_strings_and_sort_naturally():
    rows = [{"model": "m", "topology": t, "tokens": k, "tp": 2, "wall_s": 1.0, "gpu_s": 0.1, "comm_s": 0.9}
            for t in (10, 2, 1) for k in (4096, 512)]
    t = as_table(rows)
    assert levels(t, "topology") == ("1", "2", "10")
    assert levels(t, "tokens") == ("512", "4096")
    # tp is metadata (derived from the strategy), never a factor; a user factor ('tokens') is one
    assert factor_columns(t) == ("topology", "tokens")


def test_study_level_orders():
    t = as_table(study_rows())
    assert levels(t, "strategy") == ("TP2EP16", "TP4EP8", "TP8EP4", "TP16EP2")
    assert levels(t, "network") == ("ib_cc0", "ib_hpcc", "roce_hpcc", "roce_dcqcn")
    assert levels(t, "algorithm") == ("ring_direct", "dbt_direct")
    assert levels(t, "model") == ("kimi-k3", "glm-5.3", "deepseek-v4-pro", "deepseek-v4-flash")
    assert factor_columns(t) == ("topology", "strategy", "algorithm", "network")
    assert natural_key("TP2EP16") < natural_key("TP16EP2")


def test_describe_configs_collapses_full_products():
    all_levels = {"topology": ("1", "6"), "network": ("a", "b", "c")}
    rows = [{"topology": "6", "network": n} for n in ("a", "b", "c")]
    assert describe_configs(rows, ("topology", "network"), all_levels) == "topology=6, network=any"
    rows = [{"topology": "6", "network": n} for n in ("a", "c")]
    assert describe_configs(rows, ("topology", "network"), all_levels) == "topology=6, network=a|c"
    rows = [{"topology": "1", "network": "a"}, {"topology": "6", "network": "b"}]
    assert describe_configs(rows, ("topology", "network"), all_levels) == "topology=1, network=a; topology=6, network=b"
