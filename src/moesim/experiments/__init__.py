"""moesim.experiments: matrix specs (YAML, the study built in), the sweep runner and the results store.

    matrix = study_matrix().with_preset("flash")
    summary = run_matrix(matrix, "out/flash", workers=2)
    table = query_results("out/flash")

See docs/experiments.md.
"""

from moesim.experiments.executors import EXECUTORS, Executor
from moesim.experiments.factors import SPEC_FACTORS, canonical_level, level_label
from moesim.experiments.inputs import (
    PlannedRun,
    WorkUnit,
    input_hash,
    plan_runs,
    resolved_inputs,
    run_label,
    work_units,
)
from moesim.experiments.matrix import Matrix, Preset, load_matrix, modern_matrix, parse_matrix, study_matrix
from moesim.experiments.runner import SweepSummary, run_matrix, run_sweep
from moesim.experiments.store import ResultsStore, export_results, query_results
from moesim.experiments.store_schema import DB_NAME
from moesim.experiments.worker import RunOutcome, run_unit

__all__ = [
    "DB_NAME", "EXECUTORS", "SPEC_FACTORS", "Executor", "Matrix", "PlannedRun", "Preset", "ResultsStore",
    "RunOutcome", "SweepSummary", "canonical_level", "export_results", "input_hash", "level_label",
    "load_matrix", "parse_matrix", "plan_runs", "query_results", "resolved_inputs", "run_label", "run_matrix",
    "modern_matrix", "run_sweep", "run_unit", "study_matrix", "WorkUnit", "work_units",
]
