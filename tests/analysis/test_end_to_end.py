"""A reduced study end to end: `moesim sweep study` (real simulator, real store) → `moesim report`."""

from __future__ import annotations

import csv
import html
import re
import subprocess
import sys

import duckdb
import pytest

from moesim import __version__
from moesim.experiments.inputs import code_hash


@pytest.mark.slow
def test_reduced_study_sweep_then_report(tmp_path):
    store, out = tmp_path / "store", tmp_path / "report"
    sweep = subprocess.run(
        [sys.executable, "-m", "moesim.cli", "sweep", "study", "--preset", "smoke", "--models",
         "deepseek-v4-flash,glm-5.3", "--backend", "analytical", "--diagnostics", "--workers", "1",
         "--progress", "none", "--out", str(store)], capture_output=True, text=True, timeout=600)
    assert sweep.returncode == 0, sweep.stderr[-2000:]
    rep = subprocess.run([sys.executable, "-m", "moesim.cli", "report", str(store), "--out", str(out)],
                         capture_output=True, text=True, timeout=600)
    assert rep.returncode == 0, rep.stderr[-2000:]
    page = (out / "report.html").read_text()
    assert "8 successful runs of 2 model(s)" in page
    # provenance: the sweep's own command line, this code's version and hash, what the backend models
    prov = dict(re.findall(r"<dt>(.*?)</dt><dd>(.*?)</dd>", page))
    assert html.unescape(re.sub("<[^>]+>", "", prov["command"])) == (
        f"moesim sweep study --preset smoke --models deepseek-v4-flash,glm-5.3 --backend analytical --diagnostics "
        f"--workers 1 --progress none --out {store}")
    assert prov["moesim version"] == __version__ and prov["source hash (sha256)"] == code_hash()
    assert "does not model congestion control" in prov["backend analytical"]
    assert (out / "figures" / "runs_glm-5.3.png").is_file() and (out / "figures" / "diagnostics_link_bytes.png").is_file()
    # the overall table agrees with the store, computed independently with SQL
    con = duckdb.connect(str(store / "results.duckdb"), read_only=True)
    expected = dict(con.execute("SELECT model, avg(wall_s) FROM runs WHERE status = 'ok' GROUP BY model").fetchall())
    con.close()
    with open(out / "tables" / "overall.csv") as fh:
        got = {r["model"]: float(r["wall_mean_s"]) for r in csv.DictReader(fh) if r["subset"] == "S_full"}
    assert got == pytest.approx(expected, rel=1e-12)
