"""`moesim report` end to end on a real DuckDB store, and the HTML report in a real headless Chromium."""

from __future__ import annotations

import html as htmllib
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from analysis_data import small_rows, study_rows, write_store
from matplotlib.image import imread

from moesim.analysis.report import SECTIONS, build_report

CHROMIUM = Path("/usr/bin/chromium")
MODELS = ("glm-5.3", "deepseek-v4-flash")


def _store(root: Path) -> Path:
    """A reduced study (2 models × 192 runs) with one failed run and diagnostics for two runs."""
    rows = study_rows(models=MODELS)
    diag = root / "store" / "diagnostics"
    diag.mkdir(parents=True)
    pq.write_table(pa.table({"link": ["gpu0->pcie0", "pcie0->nic0", "nic0->sw"], "bytes": [4e9, 2e9, 1e9]}),
                   diag / "run0.parquet")
    (diag / "run1").mkdir()
    pq.write_table(pa.table({"link": ["gpu0->pcie0", "nic0->sw"], "bytes": [1e9, 6e9]}), diag / "run1" / "links.parquet")
    pq.write_table(pa.table({"time_s": [0.0, 1e-6, 2e-6, 0.0, 1e-6], "port": ["sw:1", "sw:1", "sw:1", "sw:2", "sw:2"],
                             "queue_bytes": [0.0, 5e4, 1e4, 0.0, 2e4]}), diag / "run1" / "queue.parquet")
    pq.write_table(pa.table({"time_s": [5e-7, 9e-7], "port": ["sw:1", "nic0"]}), diag / "run1" / "pfc.parquet")
    rows[0]["diagnostics_path"] = "diagnostics/run0.parquet"
    rows[1]["diagnostics_path"] = str(diag / "run1")
    rows.append({**rows[2], "topology": "7", "status": "error", "error": "boom", "wall_s": None, "gpu_s": None,
                 "comm_s": None})
    return write_store(root / "store", rows)


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    root = tmp_path_factory.mktemp("report")
    store = _store(root)
    return store, build_report(store, root / "out")


def test_report_files(built):
    store, files = built
    out = files.html.parent
    page = files.html.read_text()
    for sid, _ in SECTIONS:
        assert f'<section id="{sid}">' in page
    # every table in three formats; every figure as PNG and SVG
    names = {p.stem for p in files.tables}
    assert {"overall", "marginal_strategy_S_feedback", "marginal_network_S_network", "rank_distribution",
            "pairwise_wins", "reversals_by_algorithm", "interaction_topology_strategy", "comm_proxies"} <= names
    assert len(files.tables) == 3 * len(names)
    figs = {p.stem for p in files.figures}
    assert {f"runs_{m}" for m in MODELS} <= figs
    assert {"interaction_topology_strategy", "interaction_dbt_ring_by_strategy", "interaction_dcqcn_hpcc_by_topology",
            "architecture", "diagnostics_link_bytes", "diagnostics_queue", "diagnostics_pfc"} <= figs
    assert page.count("data:image/png;base64,") == len(figs)
    assert page.count('class="sortable"') == len(names)
    assert "384 successful runs of 2 model(s); 1 failed run(s) left out" in page
    # self-contained: no external resources
    assert not re.search(r"""(src|href)\s*=\s*["'](https?:|//)""", page)
    assert "@import" not in page and "url(" not in page
    # the summary is the generated findings
    assert sum(ln.startswith("- ") for ln in (out / "findings.md").read_text().splitlines()) == len(files.findings)
    for f in files.findings:
        assert htmllib.escape(f.text) in page


def test_report_is_deterministic(built, tmp_path):
    store, files = built
    again = build_report(store, tmp_path / "again")
    assert again.html.read_bytes() == files.html.read_bytes()
    for p in files.figures:
        assert (tmp_path / "again" / "figures" / p.name).read_bytes() == p.read_bytes()
    for p in files.tables:
        assert (tmp_path / "again" / "tables" / p.name).read_bytes() == p.read_bytes()


def test_cli_report_and_errors(tmp_path):
    rows = [{**r, "model": "deepseek-v4-flash" if r["model"] == "A" else r["model"]} for r in small_rows()]
    store = write_store(tmp_path / "tiny", rows)
    ok = subprocess.run([sys.executable, "-m", "moesim.cli", "report", str(store), "--out", str(tmp_path / "o")],
                        capture_output=True, text=True)
    assert ok.returncode == 0, ok.stderr
    assert (tmp_path / "o" / "report.html").is_file() and "report.html" in ok.stdout
    bad = subprocess.run([sys.executable, "-m", "moesim.cli", "report", str(tmp_path / "nothing")],
                         capture_output=True, text=True)
    assert bad.returncode == 2
    assert bad.stderr.strip().count("\n") == 0 and "no results store found" in bad.stderr
    cmp = subprocess.run([sys.executable, "-m", "moesim.cli", "compare", str(store), "--reference", "v4_flash",
                          "--out", str(tmp_path / "c")], capture_output=True, text=True)
    assert cmp.returncode == 0, cmp.stderr
    assert "| overall | wall_mean_s | 0.550729 |" in cmp.stdout and (tmp_path / "c" / "compare.html").is_file()
    # the tiny store has no 'algorithm' column: those reference entries are listed as not compared
    assert "not compared: means[2]: the results have no column 'algorithm'" in cmp.stdout


# --- headless Chromium -------------------------------------------------------------------------------

PROBE = """<script>
(function(){
  var out = {sections: {}, sorted: null};
  document.querySelectorAll('section').forEach(function(s){ out.sections[s.id] = s.getBoundingClientRect().height; });
  var t = document.getElementById('t-overall');
  var col = Array.prototype.findIndex.call(t.tHead.rows[0].cells, function(c){ return c.textContent === 'wall_mean_s'; });
  t.tHead.rows[0].cells[col].click(); t.tHead.rows[0].cells[col].click();
  out.sorted = Array.prototype.map.call(t.tBodies[0].rows, function(r){ return parseFloat(r.cells[col].getAttribute('data-v')); });
  out.aria = t.tHead.rows[0].cells[col].getAttribute('aria-sort');
  var pre = document.createElement('pre'); pre.id = 'probe'; pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre);
})();
</script>"""


def chromium(tmp: Path, url: str, *args: str) -> subprocess.CompletedProcess:
    profile = tmp / f"profile{len(list(tmp.glob('profile*')))}"
    cmd = [str(CHROMIUM), "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
           "--disable-background-networking", "--disable-component-update", "--disable-sync",
           f"--user-data-dir={profile}", "--enable-logging=stderr", "--v=0", *args, url]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120)


def console_lines(proc: subprocess.CompletedProcess) -> list[str]:
    return [ln for ln in proc.stderr.splitlines() if ":CONSOLE" in ln or "Uncaught" in ln]


needs_chromium = pytest.mark.skipif(not CHROMIUM.exists(), reason="/usr/bin/chromium not installed (CI installs it)")


@needs_chromium
def test_chromium_detects_console_errors(tmp_path):
    """Control: the console check does fire on a page with an uncaught error."""
    bad = tmp_path / "bad.html"
    bad.write_text("<html><body><script>throw new Error('control-error');</script></body></html>")
    proc = chromium(tmp_path, bad.as_uri(), "--dump-dom")
    assert any("control-error" in ln for ln in console_lines(proc))


@needs_chromium
def test_report_in_chromium(built, tmp_path):
    _, files = built
    page = files.html
    # 1. loads without console output, and the sorting script ran over every table
    proc = chromium(tmp_path, page.as_uri(), "--dump-dom")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert console_lines(proc) == []
    n_tables = page.read_text().count('class="sortable"')
    assert f'data-sortable-tables="{n_tables}"' in proc.stdout
    # 2. every section is rendered with a height, and a click sorts a numeric column
    probed = tmp_path / "probe.html"
    probed.write_text(page.read_text().replace("</body>", PROBE + "</body>"))
    shutil.copy(page, tmp_path / "report.html")
    proc = chromium(tmp_path, probed.as_uri(), "--dump-dom", "--window-size=1280,2000")
    assert console_lines(proc) == []
    m = re.search(r'<pre id="probe">(.*?)</pre>', proc.stdout, re.S)
    assert m, proc.stdout[-500:]
    probe = json.loads(htmllib.unescape(m.group(1)))
    assert set(probe["sections"]) == {sid for sid, _ in SECTIONS}
    assert all(h > 20 for h in probe["sections"].values()), probe["sections"]
    assert probe["aria"] == "descending" and probe["sorted"] == sorted(probe["sorted"], reverse=True)
    # 3. a screenshot is not blank
    shot = tmp_path / "shot.png"
    proc = chromium(tmp_path, page.as_uri(), f"--screenshot={shot}", "--window-size=1280,2000")
    assert shot.is_file(), proc.stderr[-2000:]
    img = imread(str(shot))[..., :3]
    assert img.shape[:2] == (2000, 1280)
    gray = img.mean(axis=-1)
    assert gray.std() > 0.05 and 0.02 < float(np.mean(gray < 0.9)) < 0.9


def test_report_on_a_user_matrix_with_other_factors(tmp_path):
    """One model, no algorithm column, one network mode and a user factor ('tokens'): the report adapts."""
    rows = [{"model": "my-model", "topology": t, "strategy": "TP2EP16", "network": "ib_cc0", "tokens": k,
             "wall_s": w, "gpu_s": 0.1, "comm_s": w - 0.1, "status": "ok"}
            for (t, k), w in {("1", 512): 1.0, ("1", 4096): 3.0, ("2", 512): 2.0, ("2", 4096): 2.5}.items()]
    files = build_report(write_store(tmp_path / "s", rows), tmp_path / "o")
    page = files.html.read_text()
    names = {p.stem for p in files.tables}
    assert {"marginal_topology_S_full", "marginal_tokens_S_full"} <= names
    assert "marginal_strategy_S_full" not in names  # a single level is not a factor
    assert "not computed, the results have no column &#x27;algorithm&#x27;" in page
    assert "Not in the model catalog (no architecture data): my-model." in page
    # the best topology flips with tokens: 1 at 512 (1.0 < 2.0), 2 at 4096 (2.5 < 3.0)
    assert any("The best topology depends on the tokens" in f.text and "512 → 1, 4096 → 2" in f.text
               for f in files.findings)
