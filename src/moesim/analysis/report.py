"""``moesim report DIR``: tables, figures and one self-contained ``report.html`` for a results store.

The HTML has no external resources: figures are embedded as base64 PNG, tables sort on a click
(a few lines of inline JavaScript), and the summary is generated from the numbers
(``moesim.analysis.findings``). Same results → byte-identical outputs.
"""

from __future__ import annotations

import base64
import html
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
from matplotlib.figure import Figure

from moesim.analysis import figures as figs
from moesim.analysis import seeds
from moesim.analysis.diagnostics import name_links, read_diagnostics
from moesim.analysis.findings import Finding, findings
from moesim.analysis.results import MODEL, levels, load_results
from moesim.analysis.stats import SUBSETS, GridView
from moesim.analysis.study import Analysis, analyse
from moesim.analysis.tables import to_html, write_table
from moesim.errors import MoesimError
from moesim.fileio import atomic_write

MAX_DIAGNOSTIC_RUNS = 12

SECTIONS = (
    ("summary", "Summary"), ("data", "Data"), ("overall", "Overall statistics"),
    ("marginals", "Marginal means and rankings"), ("normalized", "Normalised times"),
    ("interactions", "Interactions"), ("orders", "Conditional rankings"),
    ("matched", "Matched-configuration analysis"), ("architecture", "Architecture and communication proxies"),
    ("seeds", "Sensitivity to start jitter"), ("runs", "All runs"), ("diagnostics", "Diagnostics"),
)


@dataclass(frozen=True)
class Item:
    """One table or figure of a report section."""

    section: str
    name: str
    caption: str
    table: pa.Table | None = None
    png: bytes | None = None


@dataclass(frozen=True)
class ReportFiles:
    html: Path
    tables: tuple[Path, ...]
    figures: tuple[Path, ...]
    findings: tuple[Finding, ...]


def _table_items(a: Analysis) -> Iterator[Item]:
    levels_rows = [{"factor": f, "levels": ", ".join(levels(a.table, f))} for f in (MODEL, *a.factors)]
    yield Item("data", "factors", "Factors and their levels", pa.Table.from_pylist(levels_rows))
    yield Item("data", "subset_counts", "Runs per subset and model "
               f"({'; '.join(f'{s.name}: {s.description}' for s in SUBSETS.values())})", a.subset_counts)
    yield Item("overall", "overall", "Per-model statistics per subset: means, communication fraction "
               "(aggregate = mean comm / mean wall; mean = mean of per-run comm / wall), min/max wall and where, "
               "sensitivity = max / min", a.overall)
    for m in a.marginals:
        yield Item("marginals", f"marginal_{m.factor}_{m.subset}", f"Mean times by {m.factor} over {m.subset} "
                   "(rank 1 = fastest mean wall within the model; vs_best = (x − best) / best)", m.table)
    for m in a.normalized:
        base = [r[m.factor] for r in m.table.to_pylist() if r["normalized"] == 1.0]
        yield Item("normalized", f"normalized_{m.factor}_{m.subset}",
                   f"Mean wall by {m.factor} over {m.subset}, normalised to {base[0] if base else 'the baseline'}",
                   m.table)
    for it in a.interactions:
        if it.table is not None:
            yield Item("interactions", f"interaction_{it.view.name}", it.view.title, it.table)
    if a.orders.num_rows:
        yield Item("orders", "conditional_orders", "Levels of each factor, fastest first, given the level of "
                   "another factor (mean wall over S_full)", a.orders)
    if len(a.models) > 1:
        yield Item("matched", "rank_distribution", "Rank of each model within the matched configurations "
                   "(1 = fastest)", a.rank_distribution)
        yield Item("matched", "pairwise_wins", "Pairwise wins over the matched configurations", a.pairwise)
        for c in a.conditionals:
            yield Item("matched", f"ranks_by_{c.factor}", f"Model ranks by {c.factor}", c.ranks)
            yield Item("matched", f"wins_by_{c.factor}", f"Pairwise wins by {c.factor}", c.wins)
            yield Item("matched", f"reversals_by_{c.factor}", f"Pairs whose majority winner changes with {c.factor}",
                       c.reversals)
    if a.per_seed:
        flagged = seeds.flagged(a.table)
        yield Item("seeds", "seed_spread", f"Configurations whose wall time moves by more than "
                   f"{100 * seeds.SPREAD_FLAG:.0f} % over {len(a.per_seed)} seeds of start jitter (spread = (max − min) "
                   "/ median; wall_s is the median)", flagged)
    if a.proxies is not None:
        yield Item("architecture", "comm_proxies", "Communication proxies (TP = h × layers, EP = h × top-k × MoE "
                   "layers) and measured mean communication, also relative to the largest model", a.proxies)
    if a.architecture is not None:
        yield Item("architecture", "architecture", "Architecture parameters, normalised to the largest model",
                   a.architecture)


def _diagnostic_runs(a: Analysis, base: Path) -> list[tuple[str, dict[str, pa.Table]]]:
    t = a.table
    if "diagnostics_path" not in t.column_names:
        return []
    t = t.filter(pc.invert(pc.is_null(t.column("diagnostics_path"))))
    out = []
    for r in t.to_pylist():
        d = read_diagnostics(r["diagnostics_path"], base)
        if "link_bytes" in d and "topology" in r:
            d["link_bytes"] = name_links(d["link_bytes"], str(r["topology"]))
        if d:
            label = " · ".join(str(r[c]) for c in (MODEL, *a.factors))
            out.append((label, d))
        if len(out) >= MAX_DIAGNOSTIC_RUNS:
            break
    return out


def _figure_items(a: Analysis, base: Path) -> Iterator[tuple[Item, Figure]]:
    for it in a.interactions:
        if it.table is not None and it.table.num_rows:
            fig = figs.grid_figure(it.table, it.view) if isinstance(it.view, GridView) else \
                figs.ratio_figure(it.table, it.view)
            yield Item("interactions", f"interaction_{it.view.name}", it.view.title), fig
    if a.architecture is not None:
        yield Item("architecture", "architecture", "Architecture parameters and communication proxies, each "
                   "divided by its largest value over the models"), figs.architecture_figure(a.architecture)
    for m in a.models:
        yield Item("runs", f"runs_{m}", f"{m}: every run as stacked GPU (grey) + communication time of the "
                   "bottleneck rank; bars coloured by topology, grouped by strategy"), figs.runs_figure(a.table, m)
    runs = _diagnostic_runs(a, base)
    for kind, value, title in (("link_bytes", None, "Bytes per link"), ("queue", "queue_bytes", "Queue length"),
                               ("pfc", None, "PFC pause events")):
        sel = [(label, d[kind]) for label, d in runs if kind in d]
        if not sel:
            continue
        fig = figs.link_bytes_figure(sel) if kind == "link_bytes" else figs.timeline_figure(sel, value, title)
        yield Item("diagnostics", f"diagnostics_{kind}", f"{title} of selected runs"), fig


CSS = """
body{font-family:system-ui,-apple-system,'Segoe UI',sans-serif;margin:0;color:#222;background:#fff}
header{background:#0b3d5c;color:#fff;padding:14px 24px}header h1{margin:0;font-size:22px}
nav{position:sticky;top:0;background:#f3f6f8;border-bottom:1px solid #d0d7de;padding:6px 24px;font-size:13px;z-index:1}
nav a{margin-right:14px;color:#0b3d5c;text-decoration:none}
main{padding:8px 24px 40px}section{margin:18px 0 28px}h2{border-bottom:2px solid #0b3d5c;padding-bottom:4px}
table.sortable{border-collapse:collapse;font-size:12px;margin:6px 0 18px}
table.sortable th{background:#e8eef2;cursor:pointer;padding:4px 8px;border:1px solid #c9d3db;white-space:nowrap}
table.sortable th[aria-sort=ascending]::after{content:' \\25B2'}table.sortable th[aria-sort=descending]::after{content:' \\25BC'}
table.sortable td{padding:3px 8px;border:1px solid #e1e6ea}td.num{text-align:right;font-variant-numeric:tabular-nums}
.caption{font-size:13px;font-weight:600;margin-top:12px}figure{margin:10px 0 24px}figure img{max-width:100%}
figcaption{font-size:12px;color:#555}.note{color:#666;font-style:italic}.scroll{overflow-x:auto}
ul.findings li{margin:6px 0}
"""

JS = """
(function(){
  function num(td){var v=td.getAttribute('data-v');if(v===null)return null;return v===''?Infinity:parseFloat(v);}
  function sortTable(table,col,th){
    var body=table.tBodies[0],rows=Array.prototype.slice.call(body.rows);
    var asc=th.getAttribute('aria-sort')!=='ascending';
    rows.sort(function(a,b){
      var x=a.cells[col],y=b.cells[col],vx=num(x),vy=num(y),c;
      if(vx!==null&&vy!==null){c=(vx===vy)?0:(vx<vy?-1:1);}
      else{c=x.textContent.localeCompare(y.textContent,undefined,{numeric:true});}
      return asc?c:-c;});
    rows.forEach(function(r){body.appendChild(r);});
    Array.prototype.forEach.call(table.tHead.rows[0].cells,function(h){h.removeAttribute('aria-sort');});
    th.setAttribute('aria-sort',asc?'ascending':'descending');
  }
  var tables=document.querySelectorAll('table.sortable');
  Array.prototype.forEach.call(tables,function(table){
    Array.prototype.forEach.call(table.tHead.rows[0].cells,function(th,i){
      th.title='click to sort';th.addEventListener('click',function(){sortTable(table,i,th);});});
  });
  document.documentElement.setAttribute('data-sortable-tables',String(tables.length));
})();
"""


def render_html(title: str, fs: list[Finding], items: list[Item], notes: dict[str, list[str]],
                sections: tuple[tuple[str, str], ...] = SECTIONS) -> str:
    """The single-file page: one section per (id, heading) of ``sections`` (empty ones say so)."""
    out = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
           '<meta name="viewport" content="width=device-width, initial-scale=1">',
           f"<title>{html.escape(title)}</title><style>{CSS}</style></head><body>",
           f"<header><h1>{html.escape(title)}</h1></header><nav>",
           *(f'<a href="#{sid}">{html.escape(name)}</a>' for sid, name in sections), "</nav><main>"]
    for sid, name in sections:
        out.append(f'<section id="{sid}"><h2>{html.escape(name)}</h2>')
        if sid == "summary":
            out.append('<ul class="findings">' + "".join(
                f'<li data-topic="{html.escape(f.topic)}" data-backend="{html.escape(f.backend)}">'
                f'<span class="backend">[{html.escape(f.backend)}]</span> {html.escape(f.text)}</li>' for f in fs)
                + "</ul>")
        mine = [i for i in items if i.section == sid]
        for i in mine:
            if i.table is not None:
                out.append(f'<div class="caption">{html.escape(i.caption)}</div><div class="scroll">'
                           f"{to_html(i.table, 't-' + i.name)}</div>")
            elif i.png is not None:
                b64 = base64.b64encode(i.png).decode("ascii")
                out.append(f'<figure id="f-{html.escape(i.name)}"><img alt="{html.escape(i.caption)}" '
                           f'src="data:image/png;base64,{b64}"><figcaption>{html.escape(i.caption)}</figcaption></figure>')
        for n in notes.get(sid, []):
            out.append(f'<p class="note">{html.escape(n)}</p>')
        if not mine and not notes.get(sid) and sid != "summary":
            out.append('<p class="note">Nothing to show for these results.</p>')
        out.append("</section>")
    out.append(f"</main><script>{JS}</script></body></html>")
    return "\n".join(out) + "\n"


def _notes(a: Analysis, failed: int) -> dict[str, list[str]]:
    notes: dict[str, list[str]] = {"data": [], "interactions": [], "architecture": [], "diagnostics": []}
    versions = levels(a.table, "version") if "version" in a.table.column_names else ()
    backends = levels(a.table, "backend") if "backend" in a.table.column_names else ()
    notes["data"].append(f"{a.table.num_rows} successful runs of {len(a.models)} model(s); {failed} failed run(s) "
                         "left out. Software version(s): " + (", ".join(versions) or "not recorded") +
                         "; backend(s): " + (", ".join(backends) or "not recorded") + ".")
    for it in a.interactions:
        if it.reason:
            notes["interactions"].append(f"{it.view.title}: not computed, {it.reason}.")
    if a.per_seed:
        n_flag = seeds.flagged(a.table).num_rows
        jitter = levels(a.seed_runs, seeds.JITTER) if a.seed_runs is not None and seeds.JITTER in \
            a.seed_runs.column_names else ()
        notes["seeds"] = [f"Every configuration was run with {len(a.per_seed)} seeds of start jitter (ranks start "
                          f"at seeded uniform draws in [0, {'/'.join(jitter) or '?'} s)); the statistics use each "
                          f"configuration's median, the run figures show the range as error bars, and each finding "
                          f"says in how many seeds it holds. {n_flag} of {a.table.num_rows} configurations spread "
                          f"more than {100 * seeds.SPREAD_FLAG:.0f} %."]
    else:
        notes["seeds"] = ["One run per configuration (no start jitter). Rerun the sweep with --seeds N to see how far "
                          "each result moves when the ranks start nanoseconds apart."]
    if a.unknown_models:
        notes["architecture"].append("Not in the model catalog (no architecture data): " + ", ".join(a.unknown_models) + ".")
    return notes


def build_report(directory: str | Path, out_dir: str | Path | None = None) -> ReportFiles:
    """Analyse the store in ``directory``; write tables/, figures/, findings.md and report.html to ``out_dir``."""
    src = Path(directory)
    table = load_results(src)
    if table.num_rows == 0:
        raise MoesimError(f"{src}: no successful runs to report")
    raw = load_results(src, include_failed=True)
    failed = raw.num_rows - table.num_rows
    out = Path(out_dir) if out_dir else src
    a = analyse(table)
    fs = findings(a)
    items, table_paths, figure_paths = [], [], []
    for item in _table_items(a):
        table_paths += write_table(item.table, out / "tables", item.name, item.caption)
        items.append(item)
    for item, fig in _figure_items(a, src):
        png = figs.render(fig, "png")
        figure_paths += [atomic_write(out / "figures" / f"{item.name}.png", png),
                         atomic_write(out / "figures" / f"{item.name}.svg", figs.render(fig, "svg"))]
        items.append(Item(item.section, item.name, item.caption, png=png))
    notes = _notes(a, failed)
    if not any(i.section == "diagnostics" for i in items):
        notes["diagnostics"].append("No run in these results has diagnostics side files.")
    title = f"moesim report: {src.resolve().name}"
    atomic_write(out / "findings.md", "# Findings\n\n" + "".join(f"- [{f.backend}] {f.text}\n" for f in fs))
    page = atomic_write(out / "report.html", render_html(title, fs, items, notes))
    return ReportFiles(page, tuple(table_paths), tuple(figure_paths), tuple(fs))

