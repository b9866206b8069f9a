"""The results-store schema module against a real store, the analysis and ``moesim results``."""

from __future__ import annotations

from pathlib import Path

import duckdb

from moesim.analysis.results import METADATA, METRICS, candidate_factors, load_results
from moesim.experiments import SPEC_FACTORS, ResultsStore, RunOutcome, input_hash
from moesim.experiments import store_schema as schema
from moesim.experiments.inputs import PlannedRun, WorkUnit
from moesim.experiments.worker import run_unit
from moesim.system.run import simulate_run
from moesim.system.spec import RunSpec

NUMERIC = ("DOUBLE", "FLOAT", "REAL", "INTEGER", "BIGINT", "SMALLINT", "DECIMAL")


def _table_info(directory: Path) -> list[tuple[str, str, bool, bool]]:
    """(name, type, not null, primary key) of each column of ``runs``, in order."""
    con = duckdb.connect(str(directory / schema.DB_NAME), read_only=True)
    try:
        return [(name, kind, bool(notnull), bool(pk))
                for _, name, kind, notnull, _, pk in con.execute("PRAGMA table_info('runs')").fetchall()]
    finally:
        con.close()


def test_a_new_store_has_exactly_the_schema_columns_in_order(tmp_path: Path) -> None:
    with ResultsStore(tmp_path):
        pass
    info = _table_info(tmp_path)
    assert [name for name, *_ in info] == list(schema.BASE_COLUMNS)
    for (name, kind, notnull, pk), column in zip(info, schema.COLUMNS, strict=True):
        assert column.sql.split()[0] == kind, name
        assert ("NOT NULL" in column.sql or pk) == notnull, name
        assert ("PRIMARY KEY" in column.sql) == pk, name


def test_a_recorded_run_fills_the_schema_columns_and_one_per_override(tmp_path: Path, small_dir: Path) -> None:
    spec = RunSpec(str((small_dir / "tiny.yaml").resolve()), "1", "TP2EP16", overrides=(("tokens", 512),))
    with ResultsStore(tmp_path) as store:
        store.record(RunOutcome(input_hash(spec), spec, result=simulate_run(spec)))
    assert [name for name, *_ in _table_info(tmp_path)] == [*schema.BASE_COLUMNS, "tokens"]
    table = load_results(tmp_path)
    assert table.num_rows == 1
    # the analysis finds the spec factors (model aside; backend only when a configuration was run on several)
    # and the override, nothing else
    assert set(candidate_factors(table)) == {*schema.FACTOR_COLUMNS, "tokens"} - {schema.MODEL, "backend"}


def test_roles_agree_with_the_run_spec_and_the_analysis() -> None:
    assert schema.FACTOR_COLUMNS == SPEC_FACTORS
    assert schema.MODEL in schema.FACTOR_COLUMNS
    assert METRICS == schema.MEASUREMENTS and schema.MEASUREMENTS
    for column in schema.COLUMNS:
        if column.role == "measurement":
            assert column.sql.split()[0] in NUMERIC, column.name
        if column.role in ("key", "metadata"):
            assert column.name in METADATA, column.name
        else:
            assert column.name not in METADATA, column.name
    assert not schema.DERIVED_METADATA & set(schema.BASE_COLUMNS)


def test_every_column_is_either_summarised_or_hidden_and_positions_are_unique() -> None:
    summary = [c.summary for c in schema.COLUMNS if c.summary is not None]
    order = [c.order for c in schema.COLUMNS if c.order is not None]
    assert sorted(summary) == list(range(1, len(summary) + 1))
    assert sorted(order) == list(range(1, len(order) + 1))
    assert set(schema.SUMMARY_COLUMNS) | schema.HIDDEN == set(schema.BASE_COLUMNS)
    assert not set(schema.SUMMARY_COLUMNS) & schema.HIDDEN
    assert set(schema.MEASUREMENTS) <= set(schema.SUMMARY_COLUMNS)
    assert len(set(schema.BASE_COLUMNS)) == len(schema.BASE_COLUMNS)


def test_the_default_order_is_total_it_ends_with_the_primary_key() -> None:
    keys = [c.strip() for c in schema.ORDER_BY.split(",")]
    assert keys[-1] == "run_id" and set(keys) <= set(schema.BASE_COLUMNS)
    assert schema.DEFAULT_QUERY.endswith(schema.ORDER_BY)


def test_a_store_written_before_exposed_comm_s_opens_resumes_and_reads(tmp_path: Path, small_dir: Path) -> None:
    """A store whose ``runs`` table lacks a column added later: opening it for writing adds the column (empty),
    a new run fills it, and the analysis derives it for the old rows from its definition, wall − GPU time."""
    spec = RunSpec(str((small_dir / "tiny.yaml").resolve()), "1", "TP2EP16", overrides=(("tokens", 512),))
    with ResultsStore(tmp_path) as store:
        store.record(RunOutcome(input_hash(spec), spec, result=simulate_run(spec)))
    con = duckdb.connect(str(tmp_path / schema.DB_NAME))
    con.execute("ALTER TABLE runs DROP COLUMN exposed_comm_s")
    con.close()
    old = load_results(tmp_path)
    assert old.column("exposed_comm_s").to_pylist() == [max(w - g, 0.0) for w, g in zip(
        old.column("wall_s").to_pylist(), old.column("gpu_s").to_pylist(), strict=True)]
    other = RunSpec(spec.model, "1", "TP4EP8", overrides=(("tokens", 512),))
    with ResultsStore(tmp_path) as store:
        assert store.completed_ids() == {input_hash(spec)}
        store.record(RunOutcome(input_hash(other), other, result=simulate_run(other)))
    assert "exposed_comm_s" in [name for name, *_ in _table_info(tmp_path)]
    table = load_results(tmp_path)
    assert table.num_rows == 2 and table.column("exposed_comm_s").null_count == 0


def test_a_run_records_its_work_fluid_steps_only_on_the_fluid_backend(tmp_path: Path, small_dir: Path) -> None:
    """``fluid_steps`` and ``engine_events`` come from the worker's simulation: both positive for a fluid run,
    no steps for a flow run (a backend without a time step) but the same engine events (the same graph), and
    a store written before the columns gains them, empty for its old row."""
    model = str((small_dir / "tiny.yaml").resolve())
    old = RunSpec(model, "1", "TP4EP8", overrides=(("tokens", 512),))
    specs = [RunSpec(model, "1", "TP2EP16", backend=b, overrides=(("tokens", 512),)) for b in ("fluid", "flow")]
    with ResultsStore(tmp_path) as store:
        store.record(RunOutcome(input_hash(old), old, result=simulate_run(old)))
    con = duckdb.connect(str(tmp_path / schema.DB_NAME))
    con.execute("ALTER TABLE runs DROP COLUMN fluid_steps")
    con.execute("ALTER TABLE runs DROP COLUMN engine_events")
    con.close()
    with ResultsStore(tmp_path) as store:
        for spec in specs:
            for outcome in run_unit(WorkUnit((PlannedRun(spec, input_hash(spec), input_hash(spec)),))):
                store.record(outcome)
    con = duckdb.connect(str(tmp_path / schema.DB_NAME), read_only=True)
    rows = con.execute("SELECT strategy, backend, fluid_steps, engine_events FROM runs ORDER BY strategy DESC, "
                       "backend").fetchall()
    con.close()
    assert rows[0] == ("TP4EP8", "fluid", None, None)
    (_, flow, flow_steps, flow_events), (_, fluid, fluid_steps, fluid_events) = rows[1:]
    assert (flow, fluid) == ("flow", "fluid") and flow_steps == 0 and fluid_steps > 0
    assert flow_events == fluid_events > 0
