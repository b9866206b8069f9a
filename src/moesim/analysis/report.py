"""``moesim report DIR``: tables, figures and one self-contained ``report.html`` for a results store.

The page opens with the store's provenance (``moesim.analysis.provenance``: command, version, source
hash, date, tokens, backends, seeds). It has no external resources: figures are embedded as base64 PNG,
tables sort on a click and filter by a text box (a few lines of inline JavaScript), numbers are shown
by column kind with units (``moesim.analysis.tables``), and the summary is generated from the numbers
(``moesim.analysis.findings``). Same results → byte-identical outputs.
"""

from __future__ import annotations

import base64
import html
import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from matplotlib.figure import Figure

from moesim.analysis import beyond, seeds, serving
from moesim.analysis import figures as figs
from moesim.analysis.bands import ErrorBands, load_bands
from moesim.analysis.breakdown import slowest_splits
from moesim.analysis.confidence import Ordering, backend_mix, confidence_table, most_exact, orderings
from moesim.analysis.diagnostics import name_links, read_diagnostics
from moesim.analysis.ensemble import Verdict, judge
from moesim.analysis.findings import Finding, findings, findings_markdown, verdict_rows, verdict_table
from moesim.analysis.labels import topology_table_rows
from moesim.analysis.provenance import Provenance, provenance
from moesim.analysis.results import MODEL, levels, load_results, load_store_meta
from moesim.analysis.stats import SUBSETS, GridView, RatioView
from moesim.analysis.study import Analysis, analyse
from moesim.analysis.tables import NUMBER, PERCENT, SECONDS, format_seconds, to_html, write_table
from moesim.errors import MoesimError
from moesim.experiments.store_schema import COMMAND_KEY
from moesim.fileio import atomic_write
from moesim.system.spec import decode_output_tokens

MAX_DIAGNOSTIC_RUNS = 12
MIN_FILTER_ROWS = 10
"""Tables with at least this many rows get a filter box (a shorter one is read at a glance)."""

SECTIONS = (
    ("verdict", "Verdict"), ("provenance", "Provenance"), ("summary", "Summary"), ("confidence", "Confidence at this fidelity"),
    ("data", "Data"), ("overall", "Overall statistics"),
    ("marginals", "Marginal means and rankings"), ("normalized", "Normalised times"),
    ("interactions", "Interactions"), ("orders", "Conditional rankings"),
    ("matched", "Matched-configuration analysis"), ("architecture", "Architecture and communication proxies"),
    ("seeds", "Sensitivity to start jitter"), ("runs", "All runs"), ("breakdown", "Where the time goes"),
    ("diagnostics", "Diagnostics"),
)


@dataclass(frozen=True)
class Item:
    """One table or figure of a report section."""

    section: str
    name: str
    caption: str
    table: pa.Table | None = None
    png: bytes | None = None
    kinds: Mapping[str, str] | None = None
    """Column kinds where the column name does not tell (``moesim.analysis.tables.column_kind``)."""
    collapsed: bool = False
    """Shown folded (``<details>``) in the page."""


@dataclass(frozen=True)
class ReportFiles:
    html: Path
    tables: tuple[Path, ...]
    figures: tuple[Path, ...]
    findings: tuple[Finding, ...]


def runs_table(a: Analysis) -> pa.Table:
    """Every successful run (one row per seed with start jitter): model, factors, seed, wall/GPU/comm time,
    communication fraction, bottleneck rank and backend."""
    t = a.seed_runs if a.seed_runs is not None else a.table
    cols = [c for c in (MODEL, *a.factors, seeds.SEED) if c in t.column_names]
    out = {c: t.column(c) for c in cols}
    for m in ("wall_s", "gpu_s", "comm_s"):
        out[m] = t.column(m)
    out["comm_fraction"] = pc.divide(t.column("comm_s"), t.column("wall_s"))
    for c in ("bottleneck_rank", "backend"):
        if c in t.column_names and c not in out:
            out[c] = t.column(c)
    out.update(decode_columns(t))
    return pa.table(out)


def decode_columns(t: pa.Table) -> dict[str, pa.Array]:
    """``step_s`` and ``tokens_per_s`` of decode runs (their ``parameters.decode``; empty for prefill runs),
    none at all when no run decodes, so prefill reports keep their columns."""
    params = [json.loads(p or "{}").get("decode") for p in t.column("params_json").to_pylist()] \
        if "params_json" in t.column_names else []
    if not any(params):
        return {}
    walls = t.column("wall_s").to_pylist()
    return {"step_s": pa.array([w / d["decode_steps"] if d else None for w, d in zip(walls, params, strict=True)],
                               pa.float64()),
            "tokens_per_s": pa.array([decode_output_tokens(d) / w if d else None
                                      for w, d in zip(walls, params, strict=True)], pa.float64())}


def failed_table(raw: pa.Table, factors: Sequence[str]) -> pa.Table | None:
    """The runs that failed (factors and the first line of the error), or None."""
    if "status" not in raw.column_names:
        return None
    t = raw.filter(pc.not_equal(raw.column("status"), "ok"))
    if not t.num_rows:
        return None
    cols = [c for c in (MODEL, *factors, seeds.SEED, "backend") if c in t.column_names]
    rows = [{**{c: None if r[c] is None else str(r[c]) for c in cols},
             "error": str(r.get("error") or "").splitlines()[0] if r.get("error") else ""} for r in t.to_pylist()]
    return pa.Table.from_pylist(rows)


def provenance_table(p: Provenance) -> pa.Table:
    return pa.Table.from_pylist([{"item": k, "value": v} for k, v in p.items()],
                                schema=pa.schema([("item", pa.string()), ("value", pa.string())]))


def _provenance_items(p: Provenance) -> Iterator[Item]:
    varying = sum(1 for d in p.parameters.column("distinct").to_pylist() if d > 1)
    yield Item("provenance", "parameters", f"Simulation parameters of the runs ({p.parameters.num_rows} parameters, "
               f"{varying} with more than one value)", p.parameters, collapsed=True)


def _table_items(a: Analysis, raw: pa.Table) -> Iterator[Item]:
    levels_rows = [{"factor": f, "levels": ", ".join(levels(a.table, f))} for f in (MODEL, *a.factors)]
    yield Item("data", "factors", "Factors and their levels", pa.Table.from_pylist(levels_rows))
    if "topology" in a.table.column_names:
        yield Item("data", "topologies", "The topologies: T<name> is the topology the figures and tables name "
                   "by its number", pa.Table.from_pylist(topology_table_rows(levels(a.table, "topology"))))
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
            kinds = {it.view.numerator: SECONDS, it.view.denominator: SECONDS} if isinstance(it.view, RatioView) else None
            yield Item("interactions", f"interaction_{it.view.name}", it.view.title, it.table, kinds=kinds)
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
    runs = runs_table(a)
    yield Item("runs", "runs", f"All {runs.num_rows} successful runs (wall, GPU and communication time of the "
               "bottleneck rank, the slowest; comm_fraction = comm / wall)", runs, kinds={"tokens_per_s": NUMBER})
    failed = failed_table(raw, a.factors)
    if failed is not None:
        yield Item("data", "failed_runs", f"Failed runs ({failed.num_rows}), left out of every statistic", failed)


def _confidence_item(a: Analysis, ords: Sequence[Ordering], verdicts: dict[str, Verdict]) -> Item:
    table = confidence_table(ords, a)
    status = [verdicts[o.statistic].status if o.statistic in verdicts else "" for o in ords]
    others = [verdicts[o.statistic].sentence() if o.statistic in verdicts else "" for o in ords]
    table = table.add_column(table.column_names.index("status") + 1, "finding_status", pa.array(status, pa.string()))
    table = table.append_column("regimes", pa.array(others, pa.string()))
    return Item("confidence", "confidence", "Every ordering the report states, judged against the error bands of "
                "its rows (margin_rel = gap between the closest unresolved pair over the faster; band_rel = their "
                "combined band); finding_status = robust, regime-dependent (ensemble members or seeds disagree: "
                "regimes says which gives what) or unresolved; settle_with = the runs that would settle it on "
                "packet level", table, kinds={"margin_rel": PERCENT, "band_rel": PERCENT})


def _verdict_item(rows: Sequence[dict[str, Any]]) -> Item:
    return Item("verdict", "verdict", "The study's questions at a glance: the answer, how sure it is (robust: "
                "resolved and unchanged by every ensemble member and seed; regime-dependent: members disagree; "
                "unresolved: inside the error bands), the margin to the runner-up (smallest over the models) and, "
                "for open answers, the packet runs that settle them (`moesim refine`)", verdict_table(rows),
                kinds={"margin_rel": PERCENT})


def _confidence_notes(stored: pa.Table, a: Analysis, ords: Sequence[Ordering], bands: ErrorBands,
                      src: Path) -> dict[str, list[str]]:
    """The confidence section's notes (how many orderings are unresolved, where the bands come from, how to
    settle them) and the Data section's line on which backend each configuration's rows come from."""
    runs = a.seed_runs if a.seed_runs is not None else a.table
    present = sorted(levels(runs, "backend"), key=lambda b: (bands.exactness(b), b)) if "backend" in \
        runs.column_names else []
    unresolved = [o for o in ords if not o.resolved]
    settle = len({tuple(sorted(c.items())) for o in unresolved for c in o.settle})
    notes = {"confidence": [
        f"{len(unresolved)} of {len(ords)} orderings are unresolved at this fidelity: their margin lies inside the "
        "combined error band of the rows behind them, so packet level may order them otherwise.",
        bands.describe(present),
        f"`moesim refine {src}` reruns the {settle} runs that would settle them on packet level, into the same "
        "store (docs/cli.md)." if unresolved else "Every ordering is resolved at this fidelity."], "data": []}
    if stored.num_rows > runs.num_rows:
        notes["data"].append(f"Per configuration the most exact backend stored is used ({' > '.join(present)}): "
                             f"{backend_mix(runs)} runs; {stored.num_rows - runs.num_rows} runs of less exact "
                             "backends for the same configurations are left out.")
    return notes


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
    runs_table = a.seed_runs if a.seed_runs is not None else a.table  # with seeds: every run, not the medians
    slowest = slowest_splits(runs_table, base, [MODEL, *a.factors, seeds.SEED])
    if slowest:
        yield Item("breakdown", "breakdown", f"The {len(slowest)} slowest runs: time of the bottleneck rank split into "
                   "compute, each collective's own time, and its wait on other ranks (from the last member's issue "
                   "of each collective); the tick is the wall time"), figs.breakdown_figure(slowest)
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
main{padding:8px 24px 40px}section{margin:18px 0 28px;scroll-margin-top:96px}h2{border-bottom:2px solid #0b3d5c;padding-bottom:4px}
table.sortable{border-collapse:collapse;font-size:12px;margin:6px 0 18px}
table.sortable th{background:#e8eef2;cursor:pointer;padding:4px 8px;border:1px solid #c9d3db;white-space:nowrap}
table.sortable th[aria-sort=ascending]::after{content:' \\25B2'}table.sortable th[aria-sort=descending]::after{content:' \\25BC'}
table.sortable td{padding:3px 8px;border:1px solid #e1e6ea;white-space:nowrap}
table.sortable td.long{white-space:normal;min-width:36em}td.num{text-align:right;font-variant-numeric:tabular-nums}
.caption{font-size:13px;font-weight:600;margin-top:12px}figure{margin:10px 0 24px;overflow-x:auto}
figure img{min-width:min(100%,1100px)}
figcaption{font-size:12px;color:#555}.note{color:#666;font-style:italic}.scroll{overflow-x:auto}
ul.findings li{margin:6px 0}.status{font-size:11px;font-weight:600;padding:1px 5px;border-radius:3px;background:#eee}
.status.robust{background:#d8f0dc}.status.regime-dependent{background:#fde8c8}.status.unresolved{background:#f3dede}
.filter{margin:4px 0 2px;font-size:12px;color:#555}.filter input{font-size:12px;padding:2px 6px;width:26em;margin-right:8px}
dl.prov{display:grid;grid-template-columns:max-content auto;gap:3px 14px;font-size:13px;margin:6px 0 10px}
dl.prov dt{font-weight:600;color:#0b3d5c}dl.prov dd{margin:0;white-space:pre-wrap}dl.prov code{font-size:12px}
details{margin:6px 0}summary{cursor:pointer;font-size:13px;font-weight:600}
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
  // Filter: every word must occur in the row; a word column=value must equal that column's cell.
  function filterTable(input,table,count){
    var names=Array.prototype.map.call(table.tHead.rows[0].cells,function(c){return c.textContent.toLowerCase();});
    var terms=input.value.toLowerCase().split(/\\s+/).filter(Boolean).map(function(w){
      var eq=w.indexOf('='),col=eq>0?names.indexOf(w.slice(0,eq)):-1;
      return col>=0?{col:col,value:w.slice(eq+1)}:{col:-1,value:w};});
    var rows=table.tBodies[0].rows,shown=0;
    for(var i=0;i<rows.length;i++){
      var r=rows[i],cells=Array.prototype.map.call(r.cells,function(c){return c.textContent.toLowerCase();});
      var all=cells.join(' | ');
      var ok=terms.every(function(t){return t.col>=0?cells[t.col]===t.value:all.indexOf(t.value)>=0;});
      r.style.display=ok?'':'none';if(ok)shown++;
    }
    count.textContent=terms.length?shown+' of '+rows.length+' rows':rows.length+' rows';
  }
  var filters=document.querySelectorAll('input.filter');
  Array.prototype.forEach.call(filters,function(input){
    var table=document.getElementById(input.getAttribute('data-for')),count=input.nextElementSibling;
    input.addEventListener('input',function(){filterTable(input,table,count);});
    filterTable(input,table,count);
  });
  document.documentElement.setAttribute('data-filter-boxes',String(filters.length));
})();
"""


def _provenance_block(lines: Sequence[tuple[str, str]]) -> str:
    out = ['<dl class="prov">']
    for label, text in lines:
        value = "<br>".join(f"<code>{html.escape(c)}</code>" for c in text.split("\n")) if label == "command" \
            else html.escape(text)
        out.append(f"<dt>{html.escape(label)}</dt><dd>{value}</dd>")
    return "".join(out) + "</dl>"


def _table_html(i: Item) -> str:
    assert i.table is not None
    tid = f"t-{i.name}"
    box = "" if i.table.num_rows < MIN_FILTER_ROWS else (
        f'<div class="filter"><input type="search" class="filter" data-for="{html.escape(tid)}" '
        f'placeholder="filter rows: words, or column=value" aria-label="filter the rows of {html.escape(i.caption)}">'
        '<span class="count"></span></div>')
    body = f'{box}<div class="scroll">{to_html(i.table, tid, i.kinds)}</div>'
    if i.collapsed:
        return f"<details><summary>{html.escape(i.caption)}</summary>{body}</details>"
    return f'<div class="caption">{html.escape(i.caption)}</div>{body}'


def render_html(title: str, fs: list[Finding], items: list[Item], notes: dict[str, list[str]],
                sections: tuple[tuple[str, str], ...] = SECTIONS,
                provenance_lines: Sequence[tuple[str, str]] = ()) -> str:
    """The single-file page: one section per (id, heading) of ``sections`` (empty ones say so); the
    ``provenance_lines`` (label, text) open the provenance section."""
    out = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
           '<meta name="viewport" content="width=device-width, initial-scale=1">',
           f"<title>{html.escape(title)}</title><style>{CSS}</style></head><body>",
           f"<header><h1>{html.escape(title)}</h1></header><nav>",
           *(f'<a href="#{sid}">{html.escape(name)}</a>' for sid, name in sections), "</nav><main>"]
    for sid, name in sections:
        out.append(f'<section id="{sid}"><h2>{html.escape(name)}</h2>')
        if sid == "provenance" and provenance_lines:
            out.append(_provenance_block(provenance_lines))
        if sid == "summary":
            out.append('<ul class="findings">' + "".join(
                f'<li data-topic="{html.escape(f.topic)}" data-backend="{html.escape(f.backend)}">'
                f'<span class="backend">[{html.escape(f.backend)}]</span> '
                + (f'<span class="status {html.escape(f.status)}">{html.escape(f.status)}</span> ' if f.status else "")
                + f'{html.escape(f.text)}</li>' for f in fs)
                + "</ul>")
        mine = [i for i in items if i.section == sid]
        for i in mine:
            if i.table is not None:
                out.append(_table_html(i))
            elif i.png is not None:
                b64 = base64.b64encode(i.png).decode("ascii")
                out.append(f'<figure id="f-{html.escape(i.name)}"><img alt="{html.escape(i.caption)}" '
                           f'src="data:image/png;base64,{b64}"><figcaption>{html.escape(i.caption)}</figcaption></figure>')
        for n in notes.get(sid, []):
            out.append(f'<p class="note">{html.escape(n)}</p>')
        if not mine and not notes.get(sid) and sid not in ("summary", "provenance"):
            out.append('<p class="note">Nothing to show for these results.</p>')
        out.append("</section>")
    out.append(f"</main><script>{JS}</script></body></html>")
    return "\n".join(out) + "\n"


def _notes(a: Analysis, failed: int) -> dict[str, list[str]]:
    notes: dict[str, list[str]] = {"data": [], "interactions": [], "architecture": [], "diagnostics": [],
                                   "breakdown": []}
    n_runs = a.seed_runs.num_rows if a.seed_runs is not None else a.table.num_rows
    configs = f" ({a.table.num_rows} configurations × {len(a.per_seed)} seeds)" if a.per_seed else ""
    notes["data"].append(f"{n_runs} successful runs{configs} of {len(a.models)} model(s); {failed} failed run(s) "
                         "left out (provenance: first section).")
    for it in a.interactions:
        if it.reason:
            notes["interactions"].append(f"{it.view.title}: not computed, {it.reason}.")
    if a.per_seed:
        n_flag = seeds.flagged(a.table).num_rows
        jitter = levels(a.seed_runs, seeds.JITTER) if a.seed_runs is not None and seeds.JITTER in \
            a.seed_runs.column_names else ()
        notes["seeds"] = [f"Every configuration was run with {len(a.per_seed)} seeds of start jitter (ranks start "
                          f"at seeded uniform draws in [0, {'/'.join(format_seconds(float(j)) for j in jitter) or '?'})); "
                          f"the statistics use each "
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
    stored = load_results(src)
    if stored.num_rows == 0:
        if serving.serving_rows(src) is not None:
            return serving_report(src, out_dir)
        raise MoesimError(f"{src}: no successful runs to report")
    bands = load_bands()
    table = most_exact(stored, bands)
    raw = load_results(src, include_failed=True)
    failed = raw.num_rows - stored.num_rows
    out = Path(out_dir) if out_dir else src
    a = analyse(table)
    ords = orderings(a, bands)
    verdicts = judge(a, ords, bands)
    fs = findings(a, ords, verdicts)
    verdict = verdict_rows(a, ords, verdicts)
    prov = provenance(raw, load_store_meta(src))
    items: list[Item] = []
    table_paths = write_table(provenance_table(prov), out / "tables", "provenance", "Provenance of the results")
    figure_paths: list[Path] = []
    for item in (_verdict_item(verdict), *_provenance_items(prov), *_table_items(a, raw),
                 _confidence_item(a, ords, verdicts)):
        assert item.table is not None
        table_paths += write_table(item.table, out / "tables", item.name, item.caption, item.kinds)
        items.append(item)
    for item, fig in _figure_items(a, src):
        png = figs.render(fig, "png")
        figure_paths += [atomic_write(out / "figures" / f"{item.name}.png", png),
                         atomic_write(out / "figures" / f"{item.name}.svg", figs.render(fig, "svg"))]
        items.append(Item(item.section, item.name, item.caption, png=png))
    extra_sections = []
    for part in beyond.parts(table):
        if (part.section, dict(beyond.SECTIONS)[part.section]) not in extra_sections:
            extra_sections.append((part.section, dict(beyond.SECTIONS)[part.section]))
        if part.table is not None:
            kinds = {c: NUMBER for c in part.table.column_names if c.endswith("tokens_per_s")} | {"gain": PERCENT}
            table_paths += write_table(part.table, out / "tables", part.name, part.caption, kinds)
            items.append(Item(part.section, part.name, part.caption, part.table, kinds=kinds))
        elif part.figure is not None:
            png = figs.render(part.figure, "png")
            figure_paths += [atomic_write(out / "figures" / f"{part.name}.png", png),
                             atomic_write(out / "figures" / f"{part.name}.svg", figs.render(part.figure, "svg"))]
            items.append(Item(part.section, part.name, part.caption, png=png))
    served, served_paths = _serving_items(src, out)
    if served:
        extra_sections.append(serving.SECTION)
        items += served
        table_paths += [p for p in served_paths if p.parent.name == "tables"]
        figure_paths += [p for p in served_paths if p.parent.name == "figures"]
    at = [sid for sid, _ in SECTIONS].index("runs")
    sections = SECTIONS[:at] + tuple(extra_sections) + SECTIONS[at:]  # before "All runs"
    notes = _notes(a, failed)
    for sid, lines in _confidence_notes(stored, a, ords, bands, src).items():
        notes.setdefault(sid, []).extend(lines)
    if not any(i.section == "breakdown" for i in items):
        notes["breakdown"].append("No run in these results has a stored breakdown (a store from before breakdowns, "
                                  "or swept with --breakdown none).")
    if not any(i.section == "diagnostics" for i in items):
        notes["diagnostics"].append("No run in these results has diagnostics side files.")
    title = f"moesim report: {src.resolve().name}"
    _, bands_line, settle_line = notes["confidence"]
    atomic_write(out / "findings.md", findings_markdown(prov.items(), fs, ords, a, bands_line, settle_line,
                                                                verdicts, verdict))
    page = atomic_write(out / "report.html", render_html(title, fs, items, notes, sections, provenance_lines=prov.items()))
    return ReportFiles(page, tuple(table_paths), tuple(figure_paths), tuple(fs))


def _serving_items(src: Path, out: Path) -> tuple[list[Item], list[Path]]:
    """The serving section's items (``moesim.analysis.serving``) and the table and figure files written."""
    items: list[Item] = []
    paths: list[Path] = []
    for part in serving.parts(src):
        if part.table is not None:
            paths += write_table(part.table, out / "tables", part.name, part.caption)
            items.append(Item(part.section, part.name, part.caption, part.table))
        elif part.figure is not None:
            png = figs.render(part.figure, "png")
            paths += [atomic_write(out / "figures" / f"{part.name}.png", png),
                      atomic_write(out / "figures" / f"{part.name}.svg", figs.render(part.figure, "svg"))]
            items.append(Item(part.section, part.name, part.caption, png=png))
    return items, paths


def serving_report(directory: str | Path, out_dir: str | Path | None = None) -> ReportFiles:
    """The report of a store that holds serving results and no runs: the serving section alone."""
    src = Path(directory)
    out = Path(out_dir) if out_dir else src
    items, paths = _serving_items(src, out)
    commands = load_store_meta(src).get(COMMAND_KEY)
    prov = [("command", "\n".join(json.loads(commands)))] if commands else []
    sections = (("provenance", "Provenance"), serving.SECTION)
    page = atomic_write(out / "report.html", render_html(f"moesim report: {src.resolve().name}", [], items, {},
                                                         sections, provenance_lines=prov))
    return ReportFiles(page, tuple(p for p in paths if p.parent.name == "tables"),
                       tuple(p for p in paths if p.parent.name == "figures"), ())
