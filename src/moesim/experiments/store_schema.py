"""The results store's schema: every column of table ``runs``, written once, with what it is for.

A sweep's results store (``DIR/results.duckdb``, written by ``moesim.experiments.store``) holds table
``runs``, one row per run, and table ``store_meta`` (key/value: the schema version, the command lines
that filled the store). Three parts of moesim read the same columns and must agree on them: the store
creates them, the analysis (``moesim.analysis.results``) tells factors from measurements and metadata,
and ``moesim results`` picks the columns it shows. Each takes its lists from here.

A column's role is one of:

* ``key``: identifies a row (``run_id`` = the input hash, ``spec_key`` = the canonical RunSpec);
* ``factor``: a RunSpec field a sweep may vary (the analysis finds factors among these);
* ``measurement``: a figure of the bottleneck rank, the numbers the analysis averages;
* ``metadata``: describes a run but never distinguishes configurations.

The store also adds one VARCHAR column per parameter override a sweep varies (``tokens``, ...), after
these, so the analysis sees those as factors too.

Beside table ``runs``, ``DIR/breakdown/<run_id>.parquet`` holds a run's breakdown (one file per run, all
with the same columns, so ``DIR/breakdown/*.parquet`` reads as one table): column ``run_id``, then
``moesim.system.breakdown.LAYER_COLUMNS`` (one row per rank, layer and kind, the default) or ``NODE_COLUMNS``
(one row per node, ``moesim sweep --breakdown nodes``). A store written before breakdowns has none.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Role = Literal["key", "factor", "measurement", "metadata"]


@dataclass(frozen=True)
class Column:
    """One column of table ``runs``."""

    name: str
    sql: str
    """DuckDB type and constraints, as in CREATE TABLE."""
    role: Role
    summary: int | None = None
    """Position in the default view of ``moesim results``; None: hidden there."""
    order: int | None = None
    """Position in the default ORDER BY; None: not a sort key."""


COLUMNS: tuple[Column, ...] = (
    Column("run_id", "VARCHAR PRIMARY KEY", "key", order=9),
    Column("spec_key", "VARCHAR NOT NULL", "key"),
    Column("model", "VARCHAR", "factor", summary=1, order=1),
    Column("topology", "VARCHAR", "factor", summary=2, order=2),
    Column("strategy", "VARCHAR", "factor", summary=3),
    Column("tp", "INTEGER", "metadata", order=3),  # tp and ep: the strategy's degrees
    Column("ep", "INTEGER", "metadata", order=4),
    Column("algorithm", "VARCHAR", "factor", summary=4, order=5),
    Column("network", "VARCHAR", "factor", summary=5, order=6),
    Column("backend", "VARCHAR", "factor", summary=6, order=7),
    Column("overrides_json", "VARCHAR", "metadata", order=8),  # the overrides again, as one JSON object
    Column("wall_s", "DOUBLE", "measurement", summary=8),
    Column("gpu_s", "DOUBLE", "measurement", summary=9),
    Column("comm_s", "DOUBLE", "measurement", summary=10),
    # wall_s − gpu_s: communication not hidden by compute (docs/system.md); a store written before it has
    # the column added empty, and the analysis derives it from wall_s and gpu_s
    Column("exposed_comm_s", "DOUBLE", "measurement", summary=11),
    Column("bottleneck_rank", "INTEGER", "metadata", summary=12),
    Column("cc_model", "VARCHAR", "metadata"),
    Column("cc_policy", "VARCHAR", "metadata"),
    Column("status", "VARCHAR NOT NULL", "metadata", summary=7),  # 'ok' | 'error'
    Column("error", "VARCHAR", "metadata"),
    Column("version", "VARCHAR", "metadata"),
    Column("params_json", "VARCHAR", "metadata"),  # all resolved parameters and the code's source_sha256
    Column("input_hash", "VARCHAR NOT NULL", "metadata"),
    Column("diagnostics_path", "VARCHAR", "metadata"),  # DIR-relative folder of the run's Parquet files
    Column("sim_wallclock_s", "DOUBLE", "metadata"),  # how long the simulation took
    # the simulation's work: the backend's integration steps (fluid; 0 for the others) and the engine's
    # events (queued events and flow completions); runs sharing one simulation share them
    Column("fluid_steps", "BIGINT", "metadata"),
    Column("engine_events", "BIGINT", "metadata"),
    Column("finished_at", "TIMESTAMP", "metadata"),
)

DB_NAME = "results.duckdb"
PARQUET_NAME = "runs.parquet"
"""The analysis also reads a plain Parquet table of runs by this name (e.g. an export)."""
DIAGNOSTICS_DIR = "diagnostics"
BREAKDOWN_DIR = "breakdown"
"""DIR-relative folder of the runs' breakdowns, ``<run_id>.parquet`` each."""
SCHEMA_VERSION = "1"
SCHEMA_VERSION_KEY = "schema_version"
"""store_meta key of the schema version."""
COMMAND_KEY = "command"
"""store_meta key of the command lines that filled the store (a JSON list, first run first)."""

BASE_COLUMNS = tuple(c.name for c in COLUMNS)
ADDED_COLUMNS = ("exposed_comm_s", "fluid_steps", "engine_events")
"""Columns newer than schema version 1: added (empty) to a store that lacks them when it is opened for writing."""
MODEL = "model"
"""The factor every analysis splits by first (never one of its ``factor_columns``)."""
FACTOR_COLUMNS = tuple(c.name for c in COLUMNS if c.role == "factor")
MEASUREMENTS = tuple(c.name for c in COLUMNS if c.role == "measurement")
SUMMARY_COLUMNS = tuple(c.name for c in sorted((c for c in COLUMNS if c.summary is not None), key=lambda c: c.summary or 0))
HIDDEN = frozenset(c.name for c in COLUMNS if c.summary is None)
ORDER_BY = ", ".join(c.name for c in sorted((c for c in COLUMNS if c.order is not None), key=lambda c: c.order or 0))
DEFAULT_QUERY = f"SELECT * FROM runs ORDER BY {ORDER_BY}"

RUNS_DDL = "CREATE TABLE IF NOT EXISTS runs ({})".format(", ".join(f'"{c.name}" {c.sql}' for c in COLUMNS))
META_DDL = "CREATE TABLE IF NOT EXISTS store_meta (key VARCHAR PRIMARY KEY, value VARCHAR)"

DERIVED_METADATA = frozenset({
    "parameters", "run_key", "key", "hostname", "host", "started_at", "created_at", "elapsed_s",  # other tools' tables
    "seeds", "wall_min_s", "wall_max_s", "wall_spread",  # moesim.analysis.seeds' per-configuration summary
})
"""Columns that are not the store's but occur in results tables the analysis reads (a Parquet/CSV table
from elsewhere, the seed summary); like metadata, they never distinguish configurations."""
METADATA = frozenset(c.name for c in COLUMNS if c.role in ("key", "metadata")) | DERIVED_METADATA
"""Every column known not to be a factor or a measurement: the store's keys and metadata, and DERIVED_METADATA."""


# ---------------------------------------------------------------------------------------------- serving
# Table ``serving`` holds one row per serving simulation (``moesim serve``, each rate ``moesim serve search``
# tried); ``DIR/serving/<serve_id>.parquet`` its per-request table (``moesim.serving.metrics.request_table``).
SERVING_TABLE = "serving"
SERVING_DIR = "serving"
SERVING_COLUMNS: tuple[Column, ...] = (
    Column("serve_id", "VARCHAR PRIMARY KEY", "key"),  # sha256 of every input (moesim.serving.simulate.serve_id)
    Column("search_id", "VARCHAR", "metadata"),  # the search that tried it; NULL for `moesim serve`
    Column("model", "VARCHAR", "factor"),
    Column("topology", "VARCHAR", "factor"),
    Column("mode", "VARCHAR", "factor"),  # colocated | disaggregated
    Column("strategy", "VARCHAR", "factor"),  # every replica's split, or the decode side's
    Column("prefill_strategy", "VARCHAR", "factor"),  # the prefill side's split (disaggregated)
    Column("prefill_servers", "INTEGER", "factor"),
    Column("decode_servers", "INTEGER", "factor"),
    Column("algorithm", "VARCHAR", "factor"),
    Column("network", "VARCHAR", "factor"),
    Column("backend", "VARCHAR", "factor"),
    Column("gpus", "INTEGER", "metadata"),
    Column("requests", "INTEGER", "metadata"),
    Column("offered_rate_rps", "DOUBLE", "factor"),
    Column("slo_ttft_s", "DOUBLE", "factor"),
    Column("slo_tpot_s", "DOUBLE", "factor"),
    Column("throughput_rps", "DOUBLE", "measurement"),
    Column("output_tokens_per_s", "DOUBLE", "measurement"),
    Column("goodput_rps", "DOUBLE", "measurement"),
    Column("goodput_per_gpu_rps", "DOUBLE", "measurement"),
    Column("slo_attainment", "DOUBLE", "measurement"),
    *(Column(f"{m}_{s}_s", "DOUBLE", "measurement") for m in ("ttft", "tpot", "e2e") for s in ("mean", "p50", "p90", "p99")),
    Column("kv_transfer_mean_s", "DOUBLE", "measurement"),
    Column("interpolation_error_max", "DOUBLE", "metadata"),  # largest |interpolated/simulated − 1| checked
    Column("requests_source", "VARCHAR", "metadata"),
    Column("requests_path", "VARCHAR", "metadata"),  # DIR-relative per-request Parquet file
    Column("params_json", "VARCHAR", "metadata"),  # the whole record (scheduler, step grid, Little's law...)
    Column("version", "VARCHAR", "metadata"),
    Column("finished_at", "TIMESTAMP", "metadata"),
)
SERVING_DDL = "CREATE TABLE IF NOT EXISTS {} ({})".format(
    SERVING_TABLE, ", ".join(f'"{c.name}" {c.sql}' for c in SERVING_COLUMNS))
