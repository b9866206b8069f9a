"""Report sections for the questions beyond the reference study: rank placement (default against the best
mapping found, ``moesim sweep placement``) and current servers in prefill and decode (``moesim sweep modern``).

Each section is built only from runs that carry its factors (``placement``; ``phase``; ``overlap``, in
``overlap.py``), so a report of the reference study has none. Tables are pyarrow tables; figures are matplotlib figures (``figures.py``).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
from matplotlib.figure import Figure

from moesim.analysis import figures as figs
from moesim.analysis.overlap import overlap_table
from moesim.analysis.results import DEFAULT_LEVEL, MODEL, natural_key
from moesim.system.spec import decode_output_tokens

DEFAULT_PLACEMENT = "contiguous"
CONFIG = (MODEL, "topology", "strategy", "algorithm", "network", "backend")


@dataclass(frozen=True)
class Part:
    """One table or figure of a section: its section id, file stem and caption."""

    section: str
    name: str
    caption: str
    table: pa.Table | None = None
    figure: Figure | None = None


def _key(row: dict[str, Any], columns: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(str(row.get(c) or "") for c in columns)


def placement_table(t: pa.Table) -> pa.Table | None:
    """Per configuration with a default-placement run: the default wall, the best other placement's wall, and
    the gain (1 − best / default); None when no run varies the placement."""
    if "placement" not in t.column_names:
        return None
    rows = t.to_pylist()
    extra = tuple(c for c in ("phase", "batch") if c in t.column_names)
    default: dict[tuple[str, ...], float] = {}
    best: dict[tuple[str, ...], tuple[float, str]] = {}
    for r in rows:
        key = _key(r, CONFIG + extra)
        if r["placement"] in (None, DEFAULT_LEVEL, DEFAULT_PLACEMENT):
            default[key] = r["wall_s"]
        elif key not in best or (r["wall_s"], r["placement"]) < best[key]:
            best[key] = (r["wall_s"], str(r["placement"]))
    out = []
    for key in sorted(default, key=lambda k: tuple(natural_key(v) for v in k)):
        wall, mapping = best.get(key, (default[key], DEFAULT_PLACEMENT))
        wall = min(wall, default[key])
        record: dict[str, Any] = dict(zip(CONFIG + extra, key, strict=True))
        record.update(default_wall_s=default[key], best_wall_s=wall, gain=1.0 - wall / default[key],
                      best_placement=mapping if wall < default[key] else DEFAULT_PLACEMENT)
        out.append(record)
    return pa.Table.from_pylist(out) if out and best else None


def placement_figure(table: pa.Table) -> Figure:
    """Gain of the best mapping over the default, one bar per strategy, grouped by topology."""
    rows = table.to_pylist()
    topologies = sorted({r["topology"] for r in rows}, key=natural_key)
    strategies = sorted({r["strategy"] for r in rows}, key=natural_key)
    fig = figs.new_figure(max(5.0, 0.9 * len(topologies) + 2.5), 3.2)
    ax = fig.add_subplot()
    width = 0.8 / max(1, len(strategies))
    x = np.arange(len(topologies))
    for i, s in enumerate(strategies):
        gains = [max((100 * r["gain"] for r in rows if r["topology"] == t and r["strategy"] == s), default=0.0)
                 for t in topologies]
        ax.bar(x + (i - (len(strategies) - 1) / 2) * width, gains, width, label=s, color=figs.color(i))
    ax.set_xticks(x, [f"T{t}" for t in topologies])
    ax.set_xlabel("topology")
    ax.set_ylabel("wall-time gain of the best mapping (%)")
    ax.set_title("Best rank placement found against the default (contiguous)")
    ax.legend(title="strategy", loc="upper left", bbox_to_anchor=(1.0, 1.0))
    return fig


def _decode(row: dict[str, Any]) -> dict[str, Any] | None:
    params = json.loads(row.get("params_json") or "{}")
    decode = params.get("decode")
    return decode if isinstance(decode, dict) else None


def phase_table(t: pa.Table) -> pa.Table | None:
    """Per model, topology and strategy: the prefill wall time and, per decode batch, the time per step and
    tokens per second; None when the runs have no ``phase`` factor."""
    if "phase" not in t.column_names:
        return None
    cells: dict[tuple[str, ...], dict[str, Any]] = {}
    batches: set[int] = set()
    for r in t.to_pylist():
        if r.get("overlap") not in (None, DEFAULT_LEVEL, "none"):  # the "Overlap" section shows those
            continue
        key = _key(r, (MODEL, "topology", "strategy"))
        cell = cells.setdefault(key, dict(zip((MODEL, "topology", "strategy"), key, strict=True)))
        decode = _decode(r)
        if decode is None:
            cell["prefill_wall_s"] = r["wall_s"]
        else:
            b = int(decode["batch"])
            batches.add(b)
            cell[f"decode_b{b}_step_s"] = r["wall_s"] / decode["decode_steps"]
            cell[f"decode_b{b}_tokens_per_s"] = decode_output_tokens(decode) / r["wall_s"]
    columns = [MODEL, "topology", "strategy", "prefill_wall_s"]
    for b in sorted(batches):
        columns += [f"decode_b{b}_step_s", f"decode_b{b}_tokens_per_s"]
    rows = [{c: cells[k].get(c) for c in columns} for k in sorted(cells, key=lambda k: tuple(map(natural_key, k)))]
    return pa.Table.from_pylist(rows) if rows else None


def best_strategy_table(phases: pa.Table) -> pa.Table:
    """Per model and topology, the fastest strategy for prefill and for each decode batch (and its time)."""
    rows = phases.to_pylist()
    metrics = [c for c in phases.column_names if c == "prefill_wall_s" or c.endswith("_step_s")]
    out = []
    for model, topology in sorted({(r[MODEL], r["topology"]) for r in rows}, key=lambda k: tuple(map(natural_key, k))):
        mine = [r for r in rows if r[MODEL] == model and r["topology"] == topology]
        record: dict[str, Any] = {MODEL: model, "topology": topology}
        for m in metrics:
            timed = [(r[m], r["strategy"]) for r in mine if r.get(m) is not None]
            if timed:
                best = min(timed)
                record[f"{m.removesuffix('_s')}_best"] = best[1]
                record[m] = best[0]
        out.append(record)
    return pa.Table.from_pylist(out)


def phase_figure(phases: pa.Table) -> Figure:
    """Prefill wall time (left) and decode tokens per second at the largest batch (right), per topology and
    strategy, averaged over the models."""
    rows = phases.to_pylist()
    topologies = sorted({r["topology"] for r in rows}, key=natural_key)
    strategies = sorted({r["strategy"] for r in rows}, key=natural_key)
    tps = sorted((c for c in phases.column_names if c.endswith("_tokens_per_s")),
                 key=lambda c: int(c.split("_b")[1].split("_")[0]))
    panels = [("prefill_wall_s", "prefill wall time (ms)", 1e3)]
    if tps:
        panels.append((tps[-1], f"decode tokens/s at batch {tps[-1].split('_b')[1].split('_')[0]}", 1.0))
    fig = figs.new_figure(max(6.0, 1.3 * len(topologies) * len(panels) + 2.0), 3.4)
    axes = fig.subplots(1, len(panels), squeeze=False)[0]
    width = 0.8 / max(1, len(strategies))
    x = np.arange(len(topologies))
    for ax, (column, label, scale) in zip(axes, panels, strict=True):
        for i, s in enumerate(strategies):
            values = []
            for t in topologies:
                vals = [r[column] for r in rows if r["topology"] == t and r["strategy"] == s and r.get(column)]
                values.append(scale * float(np.mean(vals)) if vals else 0.0)
            ax.bar(x + (i - (len(strategies) - 1) / 2) * width, values, width, label=s, color=figs.color(i))
        ax.set_xticks(x, topologies, rotation=20, ha="right")
        ax.set_ylabel(label)
    axes[0].set_title("Prefill (lower is better)")
    if len(panels) > 1:
        axes[1].set_title("Decode (higher is better)")
    axes[-1].legend(title="strategy", loc="upper left", bbox_to_anchor=(1.0, 1.0))
    return fig


SECTIONS = (("placement", "Rank placement"), ("phases", "Prefill and decode"), ("overlap", "Overlap"))
"""The sections of this module, shown in a report only when they have content."""


def parts(t: pa.Table) -> Iterator[Part]:
    """The tables and figures of both sections that ``t`` (successful runs) supports."""
    placement = placement_table(t)
    if placement is not None:
        yield Part("placement", "placement_gains", "Per configuration: the default mapping (contiguous) against the "
                   "fastest other mapping stored (gain = 1 − best / default)", table=placement)
        yield Part("placement", "placement_gains", "Gain of the best mapping found over the default, by topology "
                   "and strategy", figure=placement_figure(placement))
    phases = phase_table(t)
    if phases is not None:
        yield Part("phases", "phases", "Per model, topology and strategy: prefill wall time; per decode batch, "
                   "time per step and tokens per second", table=phases)
        yield Part("phases", "best_strategies", "The fastest strategy per model and topology, for prefill and "
                   "each decode batch", table=best_strategy_table(phases))
        yield Part("phases", "phases", "Prefill time and decode throughput by topology and strategy (mean over "
                   "the models)", figure=phase_figure(phases))
    overlap = overlap_table(t)
    if overlap is not None:
        yield Part("overlap", "overlap", "Per model, server, network and pass: the fastest split without and with "
                   "micro-batch overlap, its exposed communication (not hidden by compute) and the communication it "
                   "hides (comm − exposed); gain = 1 − best with overlap / best without", table=overlap)
