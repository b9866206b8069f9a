"""The command lines that filled a store are kept in its ``store_meta`` for the report's provenance."""

from __future__ import annotations

import json
import sys

import duckdb

from moesim.analysis.results import load_store_meta
from moesim.experiments.runner import run_sweep
from moesim.experiments.store import COMMAND_KEY, ResultsStore


def test_record_command_keeps_each_distinct_command_once(tmp_path):
    with ResultsStore(tmp_path) as s:
        for c in ("moesim sweep study --out x", "moesim sweep study --out x", "moesim sweep matrix m.yaml --out x"):
            s.record_command(c)
    con = duckdb.connect(str(tmp_path / "results.duckdb"), read_only=True)
    value = con.execute("SELECT value FROM store_meta WHERE key = ?", [COMMAND_KEY]).fetchone()[0]
    con.close()
    assert json.loads(value) == ["moesim sweep study --out x", "moesim sweep matrix m.yaml --out x"]
    assert load_store_meta(tmp_path)[COMMAND_KEY] == value


def test_run_sweep_records_the_given_command_or_the_process_command_line(small_specs, tmp_path, monkeypatch):
    run_sweep(small_specs[:1], tmp_path, workers=1, progress="none", command="moesim sweep study --out 'a b'")
    # the moesim CLI however it is started (python -m moesim.cli puts .../moesim/cli.py in argv[0])
    monkeypatch.setattr(sys, "argv", ["/some/where/moesim/cli.py", "sweep", "matrix", "my matrix.yaml"])
    run_sweep(small_specs[:1], tmp_path, workers=1, progress="none")
    assert json.loads(load_store_meta(tmp_path)[COMMAND_KEY]) == [
        "moesim sweep study --out 'a b'", "moesim sweep matrix 'my matrix.yaml'"]
