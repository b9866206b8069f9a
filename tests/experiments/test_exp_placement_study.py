"""``moesim sweep placement``: one search per pair, default and best run into one store, resumable."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from conftest import write_tiny_model

from moesim.experiments.placement_study import SEARCHES_FILE
from moesim.experiments.store import query_results


def _study(model: Path, out: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "moesim", "sweep", "placement", "--out", str(out), "--model", str(model),
         "--topologies", "4", "--strategies", "TP16EP2,tp4ep8", "--backend", "flow", "--evaluations", "4",
         "--workers", "1", "--progress", "none", "--set", "tokens=512"],
        capture_output=True, text=True, timeout=900)


def test_placement_study_stores_default_and_best_and_resumes(tmp_path: Path) -> None:
    model = write_tiny_model(tmp_path)
    out = tmp_path / "place"
    first = _study(model, out)
    assert first.returncode == 0, first.stderr
    assert first.stderr.count("searched topology 4") == 2
    searches = json.loads((out / SEARCHES_FILE).read_text())
    assert len(searches) == 2 and all(sorted(m) == list(range(32)) for m in searches.values())

    rows = query_results(out, "SELECT strategy, placement, wall_s FROM runs ORDER BY strategy, placement").to_pylist()
    by_strategy: dict[str, dict[str, float]] = {}
    for row in rows:
        kind = "default" if row["placement"] == "contiguous" else "best"
        by_strategy.setdefault(row["strategy"], {})[kind] = row["wall_s"]
    assert set(by_strategy) == {"TP16EP2", "TP4EP8"}
    for walls in by_strategy.values():  # the best mapping is stored only when it is not the default
        assert walls.get("best", walls["default"]) <= walls["default"]
    assert by_strategy["TP16EP2"]["best"] < by_strategy["TP16EP2"]["default"]

    again = _study(model, out)
    assert again.returncode == 0, again.stderr
    assert "searched" not in again.stderr and f"{len(rows)} already in the store" in again.stdout
