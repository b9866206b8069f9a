"""Figures of the study (docs/study.md §7), drawn with matplotlib's Agg canvas.

Deterministic output: fixed rcParams, a fixed SVG hash salt and no dates in the metadata, so the
same data gives byte-identical PNG and SVG files. PNGs are rendered at ``DPI`` (150) and say so in
their metadata. Axes are labelled in words (``moesim.analysis.labels``), topologies by their shape, and
figures of ratios draw each bar from 1 (parity) on a y-axis fitted to the data, so a 3 % difference
is visible. Figures are built on ``matplotlib.figure.Figure``
directly (no pyplot global state) and returned, so callers and tests can inspect their artists.
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
from matplotlib import rc_context
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from moesim.analysis.labels import factor_words, level_label, metric_words
from moesim.analysis.results import MODEL, levels, natural_key, where
from moesim.analysis.stats import GridView, RatioView, group_means
from moesim.fileio import atomic_write

DPI = 150
RC: dict[str, Any] = {
    "font.family": "DejaVu Sans", "font.size": 8.5, "axes.titlesize": 9.5, "axes.labelsize": 8.5,
    "legend.fontsize": 7.5, "xtick.labelsize": 8, "ytick.labelsize": 8, "figure.dpi": DPI, "savefig.dpi": DPI,
    "svg.hashsalt": "moesim", "svg.fonttype": "path", "axes.grid": True, "grid.alpha": 0.3,
    "axes.axisbelow": True, "image.cmap": "viridis", "path.simplify": True,
}
# Colour-blind-friendly categorical palette (Okabe–Ito, then Tableau), fixed so colours mean the same in every figure.
PALETTE = ("#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00", "#F0E442", "#000000",
           "#8c564b", "#7f7f7f", "#bcbd22", "#17becf")
GPU_COLOR = "#4d4d4d"
METADATA = {"png": {"Software": "moesim"}, "svg": {"Date": None, "Creator": "moesim"}}


def _rc() -> Any:
    """The fixed rcParams as a context (matplotlib's stubs only accept literal keys)."""
    return rc_context(RC)  # type: ignore[arg-type]


def color(i: int) -> str:
    return PALETTE[i % len(PALETTE)]


def new_figure(width_in: float, height_in: float) -> Figure:
    with _rc():
        fig = Figure(figsize=(width_in, height_in), layout="constrained")
        FigureCanvasAgg(fig)
    return fig


def render(fig: Figure, fmt: str) -> bytes:
    """The figure as PNG or SVG bytes (deterministic)."""
    buf = io.BytesIO()
    with _rc():
        fig.savefig(buf, format=fmt, metadata=METADATA[fmt])
    return buf.getvalue()


def save(fig: Figure, stem: str | Path) -> tuple[Path, Path]:
    """Write ``stem.png`` and ``stem.svg`` atomically."""
    stem = Path(stem)
    return (atomic_write(stem.with_suffix(".png"), render(fig, "png")),
            atomic_write(stem.with_suffix(".svg"), render(fig, "svg")))


def _levels_or_blank(table: pa.Table, column: str | None) -> tuple[str, ...]:
    return levels(table, column) if column and column in table.column_names else ("",)


def time_unit(max_s: float) -> tuple[float, str]:
    """(scale, unit) that shows times up to ``max_s`` with at least one digit before the point."""
    if not np.isfinite(max_s) or max_s >= 1.0:
        return 1.0, "s"
    return (1e3, "ms") if max_s >= 1e-3 else (1e6, "µs")


def legend_width_in(labels: Sequence[str]) -> float:
    """Room (inches) a legend placed outside the axes needs for ``labels`` at the legend font size."""
    return 0.5 + 0.055 * max((len(t) for t in labels), default=0)


def bars_from_one(ax: Any, x: Any, values: Sequence[float], width: float, **kwargs: Any) -> Any:
    """Bars drawn from 1 (parity with the baseline) to each value: up when slower, down when faster."""
    v = np.asarray(values, dtype=float)
    return ax.bar(x, v - 1.0, width, bottom=1.0, **kwargs)


def fit_ylim(ax: Any, values: Sequence[float], reference: float = 1.0, pad: float = 0.12,
             top_pad: float | None = None) -> None:
    """A y-axis spanning the finite ``values`` and ``reference`` with ``pad`` of the span below and
    ``top_pad`` (default ``pad``) above, never below 0 for positive data: ratios of 0.95–1.25 fill the
    panel instead of a sliver on top of a 0–1.25 axis."""
    v = np.asarray([*values, reference], dtype=float)
    v = v[np.isfinite(v)]
    lo, hi = float(v.min()), float(v.max())
    span = hi - lo if hi > lo else 0.1 * abs(reference or 1.0)
    bottom = lo - pad * span
    ax.set_ylim(max(0.0, bottom) if lo >= 0 else bottom, hi + (pad if top_pad is None else top_pad) * span)


def label_changes(ax: Any, bars: Any, values: Sequence[float]) -> None:
    """Write each bar's change against parity (``+3.2 %``) at its end."""
    ax.bar_label(bars, labels=["" if not np.isfinite(v) else f"{100 * (v - 1):+.1f} %" for v in values],
                 fontsize=6, rotation=90, padding=2)


# --- all runs of one model -----------------------------------------------------------------------

def runs_figure(table: pa.Table, model: str, panel_rows: str = "algorithm", panel_cols: str = "network",
                group: str = "strategy", bar: str = "topology") -> Figure:
    """Stacked GPU + communication bars of every run of ``model``.

    Panels = ``panel_rows`` × ``panel_cols`` levels, x groups = ``group`` levels, one bar per ``bar``
    level (coloured by it). Factors beyond these four are averaged over. With start-jitter seeds
    (``wall_min_s``/``wall_max_s`` columns), an error bar spans each configuration's fastest and slowest seed.
    """
    t = where(table, include={MODEL: (model,)})
    dims = [d for d in (panel_rows, panel_cols, group, bar) if d in t.column_names]
    ranged = "wall_min_s" in t.column_names
    g = group_means(t, dims, ("gpu_s", "comm_s", "wall_s") + (("wall_min_s", "wall_max_s") if ranged else ()))
    cells = {tuple(r.get(d, "") if d in dims else "" for d in (panel_rows, panel_cols, group, bar)):
             (r["gpu_s"], r["comm_s"], r["wall_s"], r.get("wall_min_s", np.nan), r.get("wall_max_s", np.nan))
             for r in g.to_pylist()}
    rl, cl, gl, bl = (_levels_or_blank(t, d) for d in (panel_rows, panel_cols, group, bar))
    scale, unit = time_unit(max((c[4] if ranged else c[2] for c in cells.values()), default=1.0))
    bar_labels = [f"communication, {level_label(bar, b)}" if bar == "topology" else f"communication, {bar} {b}".strip(" ,")
                  for b in bl]
    with _rc():
        fig = new_figure(3.2 * len(cl) + 0.6 + legend_width_in(bar_labels), 2.6 * len(rl) + 0.6)
        axes = fig.subplots(len(rl), len(cl), squeeze=False, sharey=True)
        width = 0.8 / len(bl)
        x = np.arange(len(gl))
        for i, rv in enumerate(rl):
            for j, cv in enumerate(cl):
                ax = axes[i][j]
                for k, bv in enumerate(bl):
                    vals = [cells.get((rv, cv, gv, bv), (np.nan,) * 5) for gv in gl]
                    gpu = scale * np.array([v[0] for v in vals])
                    comm = scale * np.array([v[1] for v in vals])
                    pos = x - 0.4 + width * (k + 0.5)
                    ax.bar(pos, gpu, width, color=GPU_COLOR, label="GPU compute" if k == 0 else None)
                    ax.bar(pos, comm, width, bottom=gpu, color=color(k), label=bar_labels[k])
                    if ranged:
                        wall = scale * np.array([v[2] for v in vals])
                        lo, hi = scale * np.array([v[3] for v in vals]), scale * np.array([v[4] for v in vals])
                        ax.errorbar(pos, wall, yerr=np.vstack([wall - lo, hi - wall]), fmt="none", ecolor="black",
                                    elinewidth=0.8, capsize=1.5,
                                    label="range over seeds" if k == 0 and i == 0 and j == 0 else None)
                ax.set_xticks(x, [level_label(group, g, tick=True) for g in gl])
                ax.set_xlabel(factor_words(group))
                ax.set_title(" · ".join(v for v in (rv, cv) if v) or model)
                if j == 0:
                    ax.set_ylabel(f"time of the slowest rank ({unit})")
        handles, labels = axes[0][0].get_legend_handles_labels()
        fig.legend(handles, labels, loc="outside right center")
        fig.suptitle(f"{model}: every run, GPU + communication time of the slowest (bottleneck) rank")
    return fig


# --- interaction views ---------------------------------------------------------------------------

def grid_figure(result: pa.Table, view: GridView) -> Figure:
    """One panel per model: x groups = ``view.cols`` levels, one bar per ``view.rows`` level (normalised)."""
    ms = levels(result, MODEL)
    rl, cl = levels(result, view.rows), levels(result, view.cols)
    cells = {(r[MODEL], r[view.rows], r[view.cols]): r["normalized"] for r in result.to_pylist()}
    base_rows, base_cols = view.baseline
    row_labels = [level_label(view.rows, r) if view.rows == "topology" else f"{factor_words(view.rows)} {r}" for r in rl]
    with _rc():
        fig = new_figure(3.4 * len(ms) + 0.8 + legend_width_in(row_labels), 3.2)
        axes = fig.subplots(1, len(ms), squeeze=False, sharey=True)[0]
        width = 0.8 / max(len(rl), 1)
        x = np.arange(len(cl))
        for ax, m in zip(axes, ms, strict=True):
            for k, rv in enumerate(rl):
                bars_from_one(ax, x - 0.4 + width * (k + 0.5), [cells.get((m, rv, cv), np.nan) for cv in cl], width,
                              color=color(k), label=row_labels[k])
            ax.axhline(1.0, color="black", lw=0.8)
            ax.set_xticks(x, [level_label(view.cols, c, tick=True) for c in cl])
            ax.set_xlabel(factor_words(view.cols))
            ax.set_title(m)
        fit_ylim(axes[0], list(cells.values()))
        axes[0].set_ylabel(f"{metric_words(view.by_metric)}, relative to\n{view.rows} {base_rows} / {base_cols}")
        handles, labels = axes[0].get_legend_handles_labels()
        fig.legend(handles, labels, loc="outside right center")
        fig.suptitle(view.title)
    return fig


def ratio_figure(result: pa.Table, view: RatioView) -> Figure:
    """x groups = ``view.by`` levels, one bar per model: the numerator/denominator ratio."""
    ms = levels(result, MODEL)
    bl = levels(result, view.by)
    cells = {(r[MODEL], r[view.by]): r["ratio"] for r in result.to_pylist()}
    with _rc():
        fig = new_figure(1.3 * len(bl) + 2.4 + legend_width_in(ms), 3.2)
        ax = fig.subplots()
        width = 0.8 / max(len(ms), 1)
        x = np.arange(len(bl))
        for k, m in enumerate(ms):
            vals = [cells.get((m, b), np.nan) for b in bl]
            bars = bars_from_one(ax, x - 0.4 + width * (k + 0.5), vals, width, color=color(k), label=m)
            if len(ms) * len(bl) <= 40:
                label_changes(ax, bars, vals)
        ax.axhline(1.0, color="black", lw=0.8)
        vals = [v for v in cells.values() if np.isfinite(v)]  # room for the change labels past the bars' ends
        fit_ylim(ax, vals, pad=0.4 if min(vals, default=1.0) < 1 else 0.15,
                 top_pad=0.4 if max(vals, default=1.0) > 1 else 0.15)
        ax.set_xticks(x, [level_label(view.by, b, tick=True) for b in bl])
        ax.set_xlabel(factor_words(view.by))
        ax.set_ylabel(f"{metric_words(view.by_metric)} under {view.numerator}\n÷ {metric_words(view.by_metric)} "
                      f"under {view.denominator}")
        fig.legend(*ax.get_legend_handles_labels(), loc="outside right center")
        ax.set_title(view.title)
    return fig


# --- architecture --------------------------------------------------------------------------------

def architecture_figure(arch: pa.Table) -> Figure:
    """Grouped bars: x = architecture parameter, one bar per model, value / max over models."""
    ps = list(dict.fromkeys(arch.column("parameter").to_pylist()))
    ms = list(dict.fromkeys(arch.column(MODEL).to_pylist()))
    cells = {(r["parameter"], r[MODEL]): r["normalized"] for r in arch.to_pylist()}
    with _rc():
        fig = new_figure(1.0 * len(ps) + 2.5, 3.2)
        ax = fig.subplots()
        width = 0.8 / max(len(ms), 1)
        x = np.arange(len(ps))
        for k, m in enumerate(ms):
            ax.bar(x - 0.4 + width * (k + 0.5), [cells.get((p, m), np.nan) for p in ps], width, color=color(k), label=m)
        ax.set_xticks(x, ps, rotation=30, ha="right")
        ax.set_ylabel("value ÷ the largest model's value")
        ax.set_ylim(0, 1.05)
        fig.legend(*ax.get_legend_handles_labels(), loc="outside right center")
        ax.set_title("Architecture parameters and communication proxies, normalised")
    return fig


# --- diagnostics -----------------------------------------------------------------------------------

def link_bytes_figure(runs: Sequence[tuple[str, pa.Table]]) -> Figure:
    """Heat map of bytes per link: one row per selected run, one column per link (union over runs)."""
    links = sorted({str(v) for _, t in runs for v in t.column("link").to_pylist()}, key=natural_key)
    col = {lk: i for i, lk in enumerate(links)}
    data = np.full((len(runs), len(links)), np.nan)
    for i, (_, t) in enumerate(runs):
        for lk, b in zip(t.column("link").to_pylist(), t.column("bytes").to_pylist(), strict=True):
            data[i, col[str(lk)]] = np.nansum([data[i, col[str(lk)]], float(b)])
    with _rc():
        fig = new_figure(min(max(7.0, 3.5 + 0.15 * len(links)), 18.0), 2.4 + 0.3 * len(runs))
        ax = fig.subplots()
        im = ax.imshow(data / 1e9, aspect="auto", interpolation="nearest")
        ax.set_yticks(range(len(runs)), [label for label, _ in runs])
        step = max(1, len(links) // 60)
        ax.set_xticks(range(0, len(links), step), links[::step], rotation=90)
        ax.grid(False)
        fig.colorbar(im, ax=ax, label="GB carried")
        ax.set_title("Bytes per link")
    return fig


def timeline_figure(runs: Sequence[tuple[str, pa.Table]], value: str | None, title: str, max_series: int = 8) -> Figure:
    """One panel per run: a line per port over time (``value`` column), or PFC events as a raster (value None).

    Each table has ``time_s`` and a ``port`` (or ``link``) column; only the ``max_series`` ports with
    the largest peak (or most events) are drawn, to keep the panel readable.
    """
    with _rc():
        fig = new_figure(8.0, 1.0 + 2.0 * len(runs))
        axes = fig.subplots(len(runs), 1, squeeze=False)[:, 0]
        for ax, (label, t) in zip(axes, runs, strict=True):
            port_col = "port" if "port" in t.column_names else "link"
            ports = [str(p) for p in t.column(port_col).to_pylist()]
            times = np.asarray(t.column("time_s").to_pylist(), dtype=float)
            scale, unit = (1e6, "µs") if times.size and times.max() < 1e-3 else (1e3, "ms")
            times = times * scale
            vals = np.asarray(t.column(value).to_pylist(), dtype=float) if value else np.ones(len(ports))
            score: dict[str, float] = {}
            for p, v in zip(ports, vals, strict=True):
                score[p] = max(score.get(p, 0.0), v) if value else score.get(p, 0.0) + 1
            top = sorted(score, key=lambda p: (-score[p], natural_key(p)))[:max_series]
            for k, p in enumerate(sorted(top, key=natural_key)):
                sel = np.array([q == p for q in ports])
                if value:
                    order = np.argsort(times[sel], kind="stable")
                    ax.plot(times[sel][order], vals[sel][order] / 1e3, color=color(k), lw=0.9, label=p)
                else:
                    ax.plot(times[sel], np.full(int(sel.sum()), k), "|", color=color(k), ms=8, label=p)
            ax.set_title(label)
            ax.set_xlabel(f"time ({unit})")
            ax.set_ylabel("queue (KB)" if value else "port")
            if not value:
                ax.set_yticks(range(len(top)), sorted(top, key=natural_key))
            elif top:
                ax.legend(loc="upper right", ncols=2)
        fig.suptitle(title)
    return fig


# --- breakdown ----------------------------------------------------------------------------------

def breakdown_figure(runs: Sequence[tuple[str, float, dict[str, float]]]) -> Figure:
    """One horizontal bar per run (slowest on top): its bottleneck rank's time split into parts, stacked,
    with a tick at the run's wall time (the gap to it is idle time)."""
    parts = list(dict.fromkeys(k for _, _, split in runs for k in split))
    with _rc():
        fig = new_figure(8.0, 1.2 + 0.35 * len(runs))
        ax = fig.subplots()
        y = np.arange(len(runs))[::-1]
        scale, unit = (1e3, "ms") if max((w for _, w, _ in runs), default=0.0) < 10 else (1.0, "s")
        left = np.zeros(len(runs))
        for k, part in enumerate(parts):
            width = np.array([split.get(part, 0.0) for _, _, split in runs]) * scale
            ax.barh(y, width, 0.7, left=left, color=GPU_COLOR if part == "compute" else color(k), label=part)
            left += width
        ax.plot([w * scale for _, w, _ in runs], y, "k|", ms=14, label="wall time")
        ax.set_yticks(y, [label for label, _, _ in runs])
        ax.set_xlabel(f"time of the bottleneck rank ({unit})")
        fig.legend(*ax.get_legend_handles_labels(), loc="outside lower center", ncols=min(len(parts) + 1, 6))
        ax.set_title("Where the time of the slowest runs goes")
    return fig


# --- comparison against a reference --------------------------------------------------------------

def comparison_figure(title: str, labels: Sequence[str], ours: Sequence[float], reference: Sequence[float],
                      ylabel: str = "time (s)") -> Figure:
    """Side by side: our value and the reference value for each label."""
    with _rc():
        fig = new_figure(max(4.0, 0.7 * len(labels) + 2.0), 3.0)
        ax = fig.subplots()
        x = np.arange(len(labels))
        ax.bar(x - 0.2, ours, 0.4, color=color(0), label="moesim")
        ax.bar(x + 0.2, reference, 0.4, color=color(1), label="reference")
        ax.set_xticks(x, labels, rotation=30 if len(labels) > 4 else 0, ha="right" if len(labels) > 4 else "center")
        ax.set_ylabel(ylabel)
        ax.legend(loc="best")
        ax.set_title(title)
    return fig
