"""Compare a results store against reference figures (``moesim compare DIR --reference FILE.yaml``).

A reference file lists published numbers in the structure of our own statistics (overall means,
min/max and where, marginal means over a subset, level orders, single runs; schema in
docs/analysis.md). Each number is matched with the same statistic of our results and shown side by
side: a table with the relative difference (ours − reference) / reference, and one figure per group.
Per configuration the rows of the most exact backend stored are used (``confidence.most_exact``), and each
number names the backends of its rows. The V4 Flash calibration figures of docs/study.md §8 ship as ``references/v4_flash.yaml``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import yaml

from moesim.analysis import figures as figs
from moesim.analysis import seeds
from moesim.analysis.bands import load_bands
from moesim.analysis.confidence import backend_mix, most_exact
from moesim.analysis.results import METRICS, MODEL, candidate_factors, levels, load_results, where
from moesim.analysis.stats import SUBSETS, TIE_RTOL, group_means, overall, ranking, subset
from moesim.errors import MoesimError, input_error
from moesim.fileio import atomic_write
from moesim.network.base import congestion_control_backends, models_congestion_control

OVERALL_KEYS = ("wall_mean_s", "gpu_mean_s", "comm_mean_s", "wall_min_s", "wall_max_s")
BUILTIN = {"v4_flash": "v4_flash.yaml"}


@dataclass(frozen=True)
class Check:
    """One reference number next to ours."""

    group: str
    label: str
    reference: float
    ours: float
    backend: str = ""
    """The backends of the rows behind ``ours`` (``confidence.backend_mix``)."""

    @property
    def rel_diff(self) -> float:
        return (self.ours - self.reference) / self.reference if self.reference else math.nan


@dataclass(frozen=True)
class TextCheck:
    """A non-numeric reference fact (a level order, where the min/max is attained) next to ours."""

    group: str
    reference: str
    ours: str
    same: bool
    backend: str = ""


@dataclass(frozen=True)
class Comparison:
    name: str
    source: str
    tolerance_rel: float | None
    checks: tuple[Check, ...]
    orders: tuple[TextCheck, ...]
    skipped: tuple[str, ...] = ()  # reference entries our results cannot match (missing factor or level)
    backend: str = ""  # the backend(s) our numbers came from: ``fluid``, or ``packet 4, fluid 188`` per configuration
    caveat: str = ""  # why some of our numbers answer no question (e.g. network modes on a CC-blind backend)

    def table(self) -> pa.Table:
        rows = [{"group": c.group, "label": c.label, "reference": c.reference, "ours": c.ours, "rel_diff": c.rel_diff,
                 **({"within_tolerance": "yes" if abs(c.rel_diff) <= self.tolerance_rel else "no"}
                    if self.tolerance_rel is not None else {}), "backend": c.backend or self.backend}
                for c in self.checks]
        return pa.Table.from_pylist(rows)

    def order_table(self) -> pa.Table:
        return pa.Table.from_pylist([{"group": o.group, "reference": o.reference, "ours": o.ours,
                                      "same": "yes" if o.same else "no", "backend": o.backend or self.backend}
                                     for o in self.orders],
                                    schema=pa.schema([(c, pa.string()) for c in
                                                      ("group", "reference", "ours", "same", "backend")]))


def load_reference(path: str | Path) -> dict[str, Any]:
    """Read and validate a reference YAML (a built-in name such as ``v4_flash`` also works)."""
    p = Path(path)
    if not p.is_file() and str(path) in BUILTIN:
        text, src = resources.files("moesim.analysis").joinpath("references", BUILTIN[str(path)]).read_text("utf-8"), str(path)
    elif p.is_file():
        text, src = p.read_text(encoding="utf-8"), str(p)
    else:
        raise MoesimError(f"{p}: reference file not found (built-in references: {', '.join(BUILTIN)})")
    try:
        ref = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise MoesimError(f"{src}: not valid YAML ({str(exc).splitlines()[0]})") from None
    if not isinstance(ref, dict):
        raise MoesimError(f"{src}: expected a mapping at the top level")
    allowed = ("name", "source", "model", "tolerance_rel", "overall", "extremes", "means", "orders", "runs")
    for k in ref:
        if k not in allowed:
            raise input_error(src, str(k), "unknown field", allowed=allowed)
    if not isinstance(ref.get("model"), str):
        raise input_error(src, "model", "required: the model key the figures are for")
    for k, v in (ref.get("overall") or {}).items():
        if k not in OVERALL_KEYS:
            raise input_error(src, f"overall.{k}", "unknown statistic", allowed=OVERALL_KEYS)
        if not isinstance(v, int | float):
            raise input_error(src, f"overall.{k}", f"must be a number, got {v!r}")
    for i, m in enumerate(ref.get("means") or []):
        for k in ("subset", "factor", "values"):
            if k not in m:
                raise input_error(src, f"means[{i}].{k}", "required")
        if m["subset"] not in SUBSETS:
            raise input_error(src, f"means[{i}].subset", f"unknown subset '{m['subset']}'", allowed=SUBSETS)
        if m.get("metric", "wall_s") not in METRICS:
            raise input_error(src, f"means[{i}].metric", f"unknown metric '{m.get('metric')}'", allowed=METRICS)
    for i, o in enumerate(ref.get("orders") or []):
        if o.get("subset", "S_full") not in SUBSETS or "factor" not in o or not isinstance(o.get("best_first"), list):
            raise input_error(src, f"orders[{i}]", "needs subset (a known subset), factor and a best_first list")
    for i, r in enumerate(ref.get("runs") or []):
        if not any(m in r for m in METRICS):
            raise input_error(src, f"runs[{i}]", "needs one of the metrics", allowed=METRICS)
    ref["_source"] = src
    return ref


def _as_str_column(table: pa.Table, column: str) -> pa.Table:
    col = table.column(column)
    if pa.types.is_string(col.type):
        return table
    return table.set_column(table.column_names.index(column), column, pc.cast(col, pa.string()))


def compare(table: pa.Table, ref: dict[str, Any]) -> Comparison:
    """Match every reference number with the same statistic of ``table`` (rows of the reference model)."""
    src, model = ref["_source"], ref["model"]
    t = where(table, include={MODEL: (model,)})
    if not t.num_rows:
        raise MoesimError(f"{src}: field 'model': the results have no runs of '{model}'")
    checks: list[Check] = []
    skipped: list[str] = []
    ov = overall(t).to_pylist()[0]
    for k, v in (ref.get("overall") or {}).items():
        checks.append(Check("overall", k, float(v), float(ov[k]), backend_mix(t)))
    for i, m in enumerate(ref.get("means") or []):
        metric, factor = m.get("metric", "wall_s"), str(m["factor"])
        s = subset(t, m["subset"])
        if factor not in s.column_names:
            skipped.append(f"means[{i}]: the results have no column '{factor}'")
            continue
        s = _as_str_column(s, factor)
        g = {r[factor]: r[metric] for r in group_means(s, (factor,), (metric,)).to_pylist()}
        for level, v in m["values"].items():
            if str(level) in g:
                checks.append(Check(f"{m['subset']} {metric} by {factor}", str(level), float(v), float(g[str(level)]),
                                    backend_mix(where(s, include={factor: (str(level),)}))))
            else:
                skipped.append(f"means[{i}]: no runs at {factor}={level} in {m['subset']}")
    order = list(candidate_factors(t))
    for i, r in enumerate(ref.get("runs") or []):
        cond = {k: (str(v),) for k, v in r.items() if k not in METRICS}
        missing = [k for k in cond if k not in t.column_names]
        if missing:
            skipped.append(f"runs[{i}]: the results have no column '{missing[0]}'")
            continue
        sel = t
        for k in cond:
            sel = where(_as_str_column(sel, k), include={k: cond[k]})
        if not sel.num_rows:
            skipped.append(f"runs[{i}]: no matching run")
            continue
        label = " ".join(str(cond[k][0]) for k in sorted(cond, key=lambda k: (order.index(k) if k in order else len(order), k)))
        for metric in METRICS:
            if metric in r:
                ours = float(group_means(sel, (), (metric,)).column(metric)[0].as_py())
                checks.append(Check(f"runs {metric}", label, float(r[metric]), ours, backend_mix(sel)))
    orders = []
    for i, o in enumerate(ref.get("orders") or []):
        s = subset(t, o.get("subset", "S_full"))
        if str(o["factor"]) not in s.column_names:
            skipped.append(f"orders[{i}]: the results have no column '{o['factor']}'")
            continue
        mine, theirs = ranking(s, str(o["factor"])).get(model, ()), tuple(str(x) for x in o["best_first"])
        orders.append(TextCheck(f"{o.get('subset', 'S_full')} {o['factor']} order", " < ".join(theirs),
                                " < ".join(mine), mine == theirs, backend_mix(s)))
    wall = t.column("wall_s").to_numpy()
    for key, pick in (("wall_min_at", wall <= wall.min() * (1 + TIE_RTOL)), ("wall_max_at", wall >= wall.max() * (1 - TIE_RTOL))):
        want = (ref.get("extremes") or {}).get(key)
        if want:
            attained = t.filter(pa.array(pick)).to_pylist()
            same = any(all(str(r.get(k)) == str(v) for k, v in want.items()) for r in attained)
            orders.append(TextCheck(key, ", ".join(f"{k}={v}" for k, v in want.items()), ov[key], same,
                                    backend_mix(t.filter(pa.array(pick)))))
    tol = ref.get("tolerance_rel")
    backends = levels(t, "backend") if "backend" in t.column_names else ()
    blind = [b for b in backends if not models_congestion_control(b)]
    caveat = ""
    if blind and (any("network" in c.group for c in checks) or any("network" in o.group for o in orders)):
        caveat = (f"the {'/'.join(blind)} backend does not model congestion control: its numbers by network mode "
                  f"answer no question about congestion control (use --backend "
                  f"{' or '.join(congestion_control_backends())})")
    return Comparison(str(ref.get("name", src)), str(ref.get("source", src)), float(tol) if tol is not None else None,
                      tuple(checks), tuple(orders), tuple(skipped), backend_mix(t), caveat)


def compare_dir(directory: str | Path, reference: str | Path, out_dir: str | Path | None = None) -> tuple[Comparison, Path]:
    """Compare the store in ``directory`` with ``reference``; write tables, figures and compare.html."""
    from moesim.analysis.report import Item, render_html
    from moesim.analysis.tables import write_table

    ref = load_reference(reference)
    table = most_exact(load_results(directory), load_bands())
    if seeds.has_seeds(table):
        table = seeds.collapse(table)
    comp = compare(table, ref)
    out = Path(out_dir) if out_dir else Path(directory) / "compare"
    write_table(comp.table(), out, "compare", f"{comp.name} ({comp.source})")
    items = [Item("numbers", "compare", f"{comp.name} ({comp.source}): rel_diff = (ours − reference) / reference",
                  comp.table())]
    if comp.orders:
        write_table(comp.order_table(), out, "compare_facts", "Level orders (best first) and where min/max are attained")
        items.append(Item("numbers", "compare_facts", "Level orders (best first) and where min/max are attained",
                          comp.order_table()))
    groups = list(dict.fromkeys(c.group for c in comp.checks))
    for k, gname in enumerate(groups):
        cs = [c for c in comp.checks if c.group == gname]
        fig = figs.comparison_figure(gname, [c.label for c in cs], [c.ours for c in cs], [c.reference for c in cs])
        png = figs.render(fig, "png")
        stem = f"compare_{k + 1}"
        atomic_write(out / f"{stem}.png", png)
        atomic_write(out / f"{stem}.svg", figs.render(fig, "svg"))
        items.append(Item("figures", stem, f"{gname}: moesim next to the reference", png=png))
    notes = {"numbers": [f"Not compared: {x}." for x in comp.skipped] + ([f"Note: {comp.caveat}."] if comp.caveat else [])}
    page = render_html(f"moesim compare: {comp.name}", [], items, notes,
                       sections=(("numbers", "Numbers"), ("figures", "Figures")))
    return comp, atomic_write(out / "compare.html", page)
