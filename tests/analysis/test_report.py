"""`moesim report` end to end on a real DuckDB store, and the HTML report in a real headless Chromium."""

from __future__ import annotations

import datetime as dt
import html as htmllib
import io
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
from PIL import Image

from moesim.analysis.figures import DPI
from moesim.analysis.provenance import provenance
from moesim.analysis.report import MIN_FILTER_ROWS, SECTIONS, build_report
from moesim.experiments.store import ResultsStore

CHROMIUM = Path("/usr/bin/chromium")
MODELS = ("glm-5.3", "deepseek-v4-flash")
SOURCE = "ab12" * 16
COMMAND = "moesim sweep study --models glm-5.3,deepseek-v4-flash --backend fluid --out store"


def write_breakdown(store: Path, row: dict, layers: int = 3) -> None:
    """A per-layer breakdown of ``row``'s bottleneck rank, as the store keeps it: per layer, compute and
    two collectives, each with a tenth of its time waiting on other ranks."""
    from moesim.system.breakdown import LAYER_COLUMNS

    share = {"compute": row["gpu_s"], "tp_all_reduce": 0.6 * row["comm_s"], "ep_dispatch": 0.4 * row["comm_s"]}
    out, t = [], 0.0
    for layer in range(layers):
        for kind, total in share.items():
            busy = total / layers
            out.append({"rank": row["bottleneck_rank"], "layer": layer, "kind": kind, "nodes": 1, "size_bytes": 0,
                        "start_s": t, "end_s": t + busy, "busy_s": busy,
                        "wait_s": 0.0 if kind == "compute" else busy / 10, "copied": layer > 1})
            t += busy
    (store / "breakdown").mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(out, pa.schema(LAYER_COLUMNS)), store / "breakdown" / f"{row['run_id']}.parquet")


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
    start = dt.datetime(2026, 3, 1, 9, 30)
    for i, r in enumerate(rows):  # what a sweep stores: parameters with the source hash, finishing times
        r["params_json"] = json.dumps({"source_sha256": SOURCE, "tokens": 4096, "network": {"name": r["network"]}})
        r["finished_at"] = start + dt.timedelta(seconds=10 * i)
        r["run_id"] = f"{i:064x}"
    for r in sorted(rows[:-1], key=lambda r: -r["wall_s"])[:3]:  # breakdowns of the three slowest runs
        write_breakdown(root / "store", r)
    store = write_store(root / "store", rows)
    with ResultsStore(store) as s:
        s.record_command(COMMAND)
    return store


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
            "architecture", "diagnostics_link_bytes", "diagnostics_queue", "diagnostics_pfc", "breakdown"} <= figs
    assert page.count("data:image/png;base64,") == len(figs)
    assert page.count('class="sortable"') == len(names - {"provenance"})  # provenance is the page's first block
    assert "384 successful runs of 2 model(s); 1 failed run(s) left out" in page
    # self-contained: no external resources
    assert not re.search(r"""(src|href)\s*=\s*["'](https?:|//)""", page)
    assert "@import" not in page and "url(" not in page
    # the summary is the generated findings
    md = (out / "findings.md").read_text()
    summary = md.split("\n## Summary\n\n", 1)[1].split("\n\n## ", 1)[0]
    assert sum(ln.startswith("- [") for ln in summary.splitlines()) == len(files.findings)
    assert md.startswith("# Findings\n\n- moesim version: test\n- date (runs finished, UTC): ")
    assert f"- command: `{COMMAND}`\n- backend: fluid\n" in md
    for f in files.findings:
        assert htmllib.escape(f.text) in page


def _prov(page: str) -> dict[str, str]:
    block = re.search(r'<dl class="prov">(.*?)</dl>', page, re.S)
    assert block, "no provenance block"
    return {htmllib.unescape(k): htmllib.unescape(re.sub(r"<[^>]+>", "", v))
            for k, v in re.findall(r"<dt>(.*?)</dt><dd>(.*?)</dd>", block.group(1), re.S)}


def test_report_provenance(built):
    _, files = built
    page = files.html.read_text()
    assert page.index('<section id="provenance">') < page.index('<section id="summary">')
    prov = _prov(page)
    assert prov["command"] == COMMAND
    assert prov["moesim version"] == "test" and prov["source hash (sha256)"] == SOURCE
    last = dt.datetime(2026, 3, 1, 9, 30) + dt.timedelta(seconds=10 * 384)  # the 385th row is the last to finish
    assert prov["date (runs finished, UTC)"] == f"2026-03-01 09:30 – {last:%H:%M}"
    assert prov["runs"] == "384 successful, 1 failed" and prov["tokens per batch"] == "4096"
    assert prov["backend fluid"].startswith("Fluid network") and "models congestion control" in prov["backend fluid"]
    assert prov["network modes"] == "ib_cc0, ib_hpcc, roce_hpcc, roce_dcqcn"
    assert prov["seeds"].startswith("none")
    params = (files.html.parent / "tables" / "parameters.csv").read_text().splitlines()
    assert "network.name,ib_cc0; ib_hpcc; roce_dcqcn; roce_hpcc,4" in params


def test_provenance_of_a_seeded_store_with_mixed_code():
    """Seeds and jitter come from the rows; two source trees and a CC-blind backend are said plainly."""
    rows = [{"model": "m", "topology": "1", "network": "roce_dcqcn", "backend": "flow", "status": "ok",
             "version": "0.1.0", "jitter_seed": str(k), "start_jitter_s": "1e-08",
             "params_json": json.dumps({"source_sha256": h, "tokens": 512})}
            for k in (1, 2, 3) for h in ("aa", "bb")]
    p = provenance(pa.Table.from_pylist(rows), {"command": json.dumps(["moesim sweep a", "moesim sweep b"])})
    lines = dict(p.items())
    assert lines["command"] == "moesim sweep a\nmoesim sweep b"
    assert lines["seeds"] == ("3 start-jitter seeds per configuration (1–3); ranks start at seeded uniform draws "
                              "in [0, 10.0 ns)")
    assert "2 different source trees" in lines["source hash (sha256)"]
    assert "does not model congestion control" in lines["backend flow"]
    assert lines["date (runs finished, UTC)"] == "not recorded"


def test_report_numbers_have_units_and_few_digits(built):
    _, files = built
    page = files.html.read_text()
    # deepseek-v4-flash, TP16EP2: gpu = 0.02 × 0.5 × 2 / 16 s (analysis_data.gpu) shown as 1.25 ms
    assert f'data-v="{0.02 * 0.5 * 2 / 16!r}">1.25 ms</td>' in page
    # the fastest run of deepseek-v4-flash: 0.5 s (every factor at 1)
    assert 'data-v="0.5">500 ms</td>' in page
    # strategy marginal: TP4EP8 is 2× TP2EP16, so 100 % over the best; comm fraction of a run in %
    assert re.search(r'data-v="1\.0">100 %</td>', page)
    cells = re.findall(r'<td class="num" data-v="[^"]*">([^<]*)</td>', page)
    assert len(cells) > 1000
    assert not [c for c in cells if re.search(r"\d\.\d{4,}|e[+-]\d", c)], "unformatted numbers in a table"
    assert {c.split(" ")[-1] for c in cells if " " in c} <= {"s", "ms", "µs", "ns", "%"}


def test_all_runs_table_has_every_run(built):
    _, files = built
    page = files.html.read_text()
    runs = re.search(r'<table class="sortable" id="t-runs">(.*?)</table>', page, re.S).group(1)
    head = re.findall(r"<th class=[^>]*>(.*?)</th>", runs)
    assert head == ["model", "topology", "strategy", "algorithm", "network", "wall_s", "gpu_s", "comm_s",
                    "comm_fraction", "bottleneck_rank", "backend"]
    assert runs.count("<tr>") - 1 == 384  # successful runs; the failed one is listed apart
    with open(files.html.parent / "tables" / "runs.csv") as fh:
        assert sum(1 for _ in fh) - 1 == 384
    assert '<table class="sortable" id="t-failed_runs">' in page and "<td>boom</td>" in page


def test_report_figures_are_150_dpi(built):
    _, files = built
    pngs = [p for p in files.figures if p.suffix == ".png"]
    assert len(pngs) >= 9
    for p in pngs:
        img = Image.open(p)
        assert min(img.info["dpi"]) >= 150 and DPI >= 150, p.name
    embedded = re.findall(r'src="data:image/png;base64,([^"]+)"', files.html.read_text())
    import base64
    assert all(min(Image.open(io.BytesIO(base64.b64decode(b))).info["dpi"]) >= 150 for b in embedded)


@pytest.mark.slow
def test_report_is_deterministic(built, tmp_path):
    store, files = built
    again = build_report(store, tmp_path / "again")
    assert again.html.read_bytes() == files.html.read_bytes()
    for p in files.figures:
        assert (tmp_path / "again" / "figures" / p.name).read_bytes() == p.read_bytes()
    for p in files.tables:
        assert (tmp_path / "again" / "tables" / p.name).read_bytes() == p.read_bytes()


@pytest.mark.slow
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
    assert "| overall | wall_mean_s | 0.5507 |" in cmp.stdout and (tmp_path / "c" / "compare.html").is_file()
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
  function visible(id){ return Array.prototype.filter.call(document.getElementById(id).tBodies[0].rows,
    function(r){ return r.style.display !== 'none' && r.getBoundingClientRect().height > 0; }).length; }
  var box = document.querySelector('input.filter[data-for="t-runs"]');
  out.filter = {before: visible('t-runs')};
  box.value = 'topology=6 roce_hpcc'; box.dispatchEvent(new Event('input'));
  out.filter.both = visible('t-runs'); out.filter.count = box.nextElementSibling.textContent;
  box.value = 'GLM-5.3'; box.dispatchEvent(new Event('input')); out.filter.model = visible('t-runs');
  box.value = ''; box.dispatchEvent(new Event('input')); out.filter.after = visible('t-runs');
  out.first = document.querySelector('main section').id;
  var nav = document.querySelector('nav'); out.hidden = [];
  document.querySelectorAll('nav a').forEach(function(a){
    a.click();
    var h = document.querySelector(a.getAttribute('href') + ' h2').getBoundingClientRect();
    if (h.top < nav.getBoundingClientRect().bottom || h.bottom > window.innerHeight) out.hidden.push(a.getAttribute('href'));
  });
  out.pageWidth = document.documentElement.scrollWidth; out.windowWidth = window.innerWidth;
  out.tallCell = 0;  // the most lines the text of a cell of ordinary length takes
  document.querySelectorAll('table.sortable td:not(.long)').forEach(function(c){
    var r = document.createRange(); r.selectNodeContents(c); var lines = r.getClientRects().length;
    if (lines > out.tallCell) { out.tallCell = lines; out.tallWhere = c.closest('table').id + ': ' + c.textContent.slice(0, 80); } });
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
    # a filter box above every table of MIN_FILTER_ROWS rows or more, each wired to its table
    long_tables = sum(1 for t in re.findall(r'<tbody>(.*?)</tbody>', page.read_text()) if t.count("<tr>") >= MIN_FILTER_ROWS)
    assert long_tables >= 5 and f'data-filter-boxes="{long_tables}"' in proc.stdout
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
    # the verdict opens the page; a nav click never leaves its heading under the sticky nav; wide tables scroll in
    # their own box (the page does not), and a cell of ordinary text stays on one line
    assert probe["first"] == "verdict" and probe["hidden"] == []
    assert probe["pageWidth"] <= probe["windowWidth"] and probe["tallCell"] == 1, probe.get("tallWhere")
    # the All runs filter: topology 6 under roce_hpcc = 2 models × 4 strategies × 2 algorithms; a model's name
    # (any case) = its 192 runs; an empty box shows every row again
    assert probe["filter"] == {"before": 384, "both": 16, "count": "16 of 384 rows", "model": 192, "after": 384}
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
