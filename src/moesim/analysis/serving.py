"""Report section "Serving", shown when the store holds serving results (``moesim serve --out``, ``moesim
serve search --out``; table ``serving``, docs/serving.md).

* a table of the headline rows: every ``moesim serve`` result and, for a search, each candidate at its
  capacity (the rows that kept their per-request file), best goodput per GPU first;
* latency CDFs (TTFT and TPOT) of the best few headline rows, from their per-request files;
* throughput–latency curves: p90 TTFT and p90 TPOT against throughput, one line per deployment over the
  rates a search tried (deployments with at least two rates; the shortest runs, not the longer runs that
  confirm a capacity).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from matplotlib.figure import Figure
from matplotlib.ticker import FormatStrFormatter, LogLocator, NullFormatter

from moesim.analysis import figures as figs
from moesim.analysis.beyond import Part
from moesim.analysis.results import natural_key
from moesim.experiments.store import query_results
from moesim.experiments.store_schema import DB_NAME, SERVING_TABLE

SECTION = ("serving", "Serving")
MAX_LINES = 8
"""Deployments drawn per figure at most (the best by goodput per GPU)."""
DEPLOYMENT = ("model", "topology", "mode", "strategy", "prefill_strategy", "prefill_servers", "decode_servers",
              "backend", "slo_ttft_s", "slo_tpot_s", "search_id")
SHOWN = ("model", "topology", "mode", "strategy", "prefill_strategy", "prefill_servers", "decode_servers", "gpus",
         "offered_rate_rps", "throughput_rps", "goodput_rps", "goodput_per_gpu_rps", "slo_attainment",
         "ttft_p50_s", "ttft_p90_s", "ttft_p99_s", "tpot_p50_s", "tpot_p90_s", "tpot_p99_s", "e2e_p90_s")


def serving_rows(directory: str | Path) -> pa.Table | None:
    """Every row of table ``serving`` of the store in ``directory``; None when it has none."""
    if not (Path(directory) / DB_NAME).is_file():
        return None
    tables = query_results(directory, "SELECT table_name FROM information_schema.tables")
    if SERVING_TABLE not in tables.column("table_name").to_pylist():
        return None
    rows = query_results(directory, f"SELECT * FROM {SERVING_TABLE} ORDER BY goodput_per_gpu_rps DESC NULLS LAST, "
                                    "serve_id")
    return rows if rows.num_rows else None


def _seconds(x: float | None) -> str:
    return "–" if x is None else (f"{x:g} s" if x >= 1 else f"{x * 1e3:g} ms")


def _label(row: dict[str, Any], with_slo: bool = False) -> str:
    """``TP4EP8 on hgx-h100:4`` or ``TP2EP16×2 : TP4EP8×2 on hgx-h100:4`` (prefill×servers : decode×servers),
    with the SLO when rows of several SLOs are drawn together."""
    if row["mode"] == "disaggregated":
        text = (f"{row['prefill_strategy']}×{row['prefill_servers']} : {row['strategy']}×{row['decode_servers']} "
                f"on {row['topology']}")
    else:
        text = f"{row['strategy']} on {row['topology']}"
    return f"{text}, SLO {_seconds(row['slo_ttft_s'])} / {_seconds(row['slo_tpot_s'])}" if with_slo else text


def _several_slos(rows: list[dict[str, Any]]) -> bool:
    return len({(r["slo_ttft_s"], r["slo_tpot_s"]) for r in rows}) > 1


def headline(rows: pa.Table) -> list[dict[str, Any]]:
    """The rows with a per-request file, best goodput per GPU first."""
    return [r for r in rows.to_pylist() if r.get("requests_path")]


def headline_table(rows: list[dict[str, Any]]) -> pa.Table:
    return pa.Table.from_pylist([{c: r.get(c) for c in SHOWN} for r in rows])


def cdf_figure(directory: Path, rows: list[dict[str, Any]]) -> Figure | None:
    """TTFT and TPOT CDFs of the first ``MAX_LINES`` rows whose per-request file is readable."""
    lines = []
    slos = _several_slos(rows[:MAX_LINES])
    for r in rows:
        path = directory / str(r["requests_path"])
        if path.is_file():
            t = pq.read_table(path, columns=["ttft_s", "tpot_s"])
            lines.append((_label(r, slos), t.column("ttft_s").to_numpy(), t.column("tpot_s").to_numpy(zero_copy_only=False)))
        if len(lines) == MAX_LINES:
            break
    if not lines:
        return None
    fig = figs.new_figure(10.0, 4.4)
    axes = fig.subplots(1, 2)
    for ax, col, title in ((axes[0], 1, "time to first token"), (axes[1], 2, "time per output token")):
        top = max(float(np.nanmax(v[col])) if np.isfinite(v[col]).any() else 0.0 for v in lines)
        scale, unit = figs.time_unit(top)
        for i, line in enumerate(lines):
            values = np.sort(line[col][np.isfinite(line[col])])
            if len(values):
                ax.step(values * scale, np.arange(1, len(values) + 1) / len(values), where="post", label=line[0],
                        color=figs.color(i))
        ax.set_xlabel(f"{title} ({unit})")
        ax.set_ylabel("fraction of requests")
        ax.set_title(f"{title.capitalize()}, CDF")
    fig.legend(*axes[1].get_legend_handles_labels(), loc="outside lower center", ncols=2, fontsize=6.5)
    return fig


def curve_figure(rows: pa.Table) -> Figure | None:
    """p90 TTFT and p90 TPOT against throughput, one line per deployment tried at two or more rates."""
    groups: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
    for r in rows.to_pylist():
        if r.get("throughput_rps") is not None:
            groups.setdefault(tuple(r.get(c) for c in DEPLOYMENT), []).append(r)
    for k, v in groups.items():  # a search's runs of one length (not the longer runs confirming a capacity)
        groups[k] = [r for r in v if r["requests"] == min(x["requests"] for x in v)]
    curves = [(k, sorted(v, key=lambda r: r["offered_rate_rps"] or 0.0)) for k, v in groups.items() if len(v) > 1]
    if not curves:
        return None
    curves.sort(key=lambda kv: (-max(r["goodput_per_gpu_rps"] or 0.0 for r in kv[1]), tuple(map(natural_key, map(str, kv[0])))))
    curves = curves[:MAX_LINES]
    slos = _several_slos([v[0] for _, v in curves])
    fig = figs.new_figure(10.0, 4.4)
    axes = fig.subplots(1, 2)
    for ax, col, title in ((axes[0], "ttft_p90_s", "p90 time to first token"),
                           (axes[1], "tpot_p90_s", "p90 time per output token")):
        top = max((r[col] or 0.0) for _, v in curves for r in v)
        scale, unit = figs.time_unit(top)
        for i, (_, v) in enumerate(curves):
            pts = [(r["throughput_rps"], r[col] * scale) for r in v if r[col] is not None]
            if pts:
                ax.plot(*zip(*pts, strict=True), marker="o", markersize=3, label=_label(v[0], slos), color=figs.color(i))
        ax.set_yscale("log")
        ax.yaxis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))
        ax.yaxis.set_major_formatter(FormatStrFormatter("%g"))
        ax.yaxis.set_minor_formatter(NullFormatter())
        ax.set_xlabel("throughput (requests/s)")
        ax.set_ylabel(f"{title} ({unit})")
        ax.set_title(f"{title[0].upper()}{title[1:]} against throughput")
    fig.legend(*axes[1].get_legend_handles_labels(), loc="outside lower center", ncols=2, fontsize=6.5)
    return fig


def parts(directory: str | Path) -> Iterator[Part]:
    """The section's tables and figures (none when the store holds no serving results)."""
    rows = serving_rows(directory)
    if rows is None:
        return
    best = headline(rows)
    sid = SECTION[0]
    if best:
        yield Part(sid, "serving", "Serving results: each moesim serve run, and each searched deployment at its "
                   "capacity (best goodput per GPU first)", table=headline_table(best))
        cdf = cdf_figure(Path(directory), best)
        if cdf is not None:
            yield Part(sid, "serving_latency_cdf", "Latency CDFs of the best deployments (per-request files)",
                       figure=cdf)
    curves = curve_figure(rows)
    if curves is not None:
        yield Part(sid, "serving_throughput_latency", "Throughput against p90 latency, over the arrival rates "
                   "tried per deployment", figure=curves)
