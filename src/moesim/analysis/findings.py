"""Findings: short sentences generated from the numbers of an ``Analysis`` (never hand-written).

Each function reads one part of the analysis and states what wins, by how much, and where a
ranking reverses. Relative overhead is (B − A) / A (docs/study.md §7).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import pyarrow as pa

from moesim.analysis.confidence import Ordering, backend_mix, describe_settle, pair_text
from moesim.analysis.ensemble import REGIME, ROBUST, STATUSES, UNRESOLVED, Verdict, worst
from moesim.analysis.results import MODEL, level_key, levels
from moesim.analysis.stats import TIE_RTOL, GridView
from moesim.analysis.study import Analysis
from moesim.analysis.tables import format_seconds


@dataclass(frozen=True)
class Finding:
    """One generated sentence. ``claim`` is what it asserts, as data (two analyses assert the same thing
    when their claims are equal: how a finding is checked seed by seed); ``factors`` are the factors it
    compares; ``backend`` names the network backend(s) the numbers came from; ``unresolved`` the orderings it
    rests on that the error bands of its rows cannot decide (``moesim.analysis.confidence``)."""

    topic: str
    text: str
    claim: Any = None
    factors: tuple[str, ...] = ()
    backend: str = ""
    unresolved: tuple[str, ...] = ()
    status: str = ""


def _s(x: float) -> str:
    return format_seconds(x)


def _pct(x: float) -> str:
    return f"{100 * x:.1f}%"


def _span(lo: float, hi: float, fmt=_pct) -> str:
    return fmt(lo) if abs(hi - lo) <= 1e-12 * max(abs(hi), 1.0) else f"{fmt(lo)}–{fmt(hi)}"


def _x(x: float) -> str:
    return f"{x:.2f}×"


def _models_phrase(ms: list[str], n_all: int) -> str:
    if len(ms) == n_all:
        return "every model" if n_all > 1 else ms[0]
    return ", ".join(ms)


def overall_findings(a: Analysis) -> list[Finding]:
    out = []
    for r in a.overall.to_pylist():
        if r["subset"] != "S_full":
            continue
        out.append(Finding("overall", (
            f"{r[MODEL]}: mean wall {_s(r['wall_mean_s'])} over {r['n']} runs; communication is "
            f"{_pct(r['comm_fraction_aggregate'])} of it (mean comm / mean wall; {_pct(r['comm_fraction_mean'])} "
            f"as the mean of per-run fractions). Fastest {_s(r['wall_min_s'])} at {r['wall_min_at']}; slowest "
            f"{_s(r['wall_max_s'])} at {r['wall_max_at']}: a {_x(r['sensitivity'])} spread."),
            claim=(r[MODEL], r["wall_min_at"], r["wall_max_at"])))
    return out


def factor_findings(a: Analysis) -> list[Finding]:
    """Per factor (over its calibration subset): the best level per model and the cost of the others."""
    out = []
    for f in a.factors:
        m = a.marginal(f)
        if m is None:
            continue
        rows = m.table.to_pylist()
        best: dict[str, str] = {}
        worst: dict[str, tuple[str, float]] = {}
        order: dict[str, list[str]] = {}
        for r in sorted(rows, key=lambda r: (r["rank"], level_key(f, r[f]))):
            best.setdefault(r[MODEL], r[f])
            order.setdefault(r[MODEL], []).append(r[f])
            worst[r[MODEL]] = (r[f], r["vs_best"])
        bests = set(best.values())
        n = len(best)
        if len(bests) == 1:
            (b,) = bests
            worst_levels = sorted({w[0] for w in worst.values()}, key=lambda v: level_key(f, v))
            lo = min(w[1] for w in worst.values())
            hi = max(w[1] for w in worst.values())
            text = (f"{f} ({m.subset}): {b} is fastest for {_models_phrase(list(best), n)}; the slowest level "
                    f"({'/'.join(worst_levels)}) adds {_span(lo, hi)} of mean wall time over it.")
        else:
            text = f"{f} ({m.subset}): the fastest level depends on the model: " + \
                "; ".join(f"{k} → {v}" for k, v in best.items()) + "."
        orders = {" < ".join(v) for v in order.values()}
        claim: tuple[Any, ...] = (m.subset, tuple(sorted(best.items())))
        if n > 1 and len(bests) == 1:
            text += (f" The ranking {next(iter(orders))} is the same for every model." if len(orders) == 1 else
                     " The full ranking differs between models: " + "; ".join(f"{k}: {' < '.join(v)}"
                                                                              for k, v in order.items()) + ".")
            claim += (tuple(sorted(orders)),)
        out.append(Finding(f, text, claim=claim, factors=(f,)))
    return out


def reversal_findings(a: Analysis) -> list[Finding]:
    """Where the best level of one factor changes with the level of another ("rankings reverse")."""
    out = []
    rows = a.orders.to_pylist()
    pairs = dict.fromkeys((r["factor"], r["given"]) for r in rows)
    for f, g in pairs:
        per_model: dict[str, list[tuple[str, str]]] = {}
        for r in rows:
            if r["factor"] == f and r["given"] == g:
                per_model.setdefault(r[MODEL], []).append((r["given_level"], r["best"]))
        changing = {m: v for m, v in per_model.items() if len({b for _, b in v}) > 1}
        if not changing:
            continue
        groups: dict[str, list[str]] = {}
        for m, v in changing.items():
            key = ", ".join(f"{gl} → {b}" for gl, b in sorted(v, key=lambda x: level_key(g, x[0])))
            groups.setdefault(key, []).append(m)
        detail = "; ".join(f"{' & '.join(ms)}: {key}" for key, ms in groups.items())
        out.append(Finding("reversals", f"The best {f} depends on the {g} (best {f} per {g}): {detail}.",
                           claim=(f, g, detail), factors=(f, g)))
    return out


def _grouped(per_model: dict[str, str]) -> str:
    """Join per-model phrases, naming models that share a phrase together."""
    groups: dict[str, list[str]] = {}
    for m, text in per_model.items():
        groups.setdefault(text, []).append(m)
    return "; ".join(f"{', '.join(ms)}: {text}" for text, ms in groups.items())


def _same(a: float, b: float) -> bool:
    return abs(a - b) <= 1e-9 * max(abs(a), abs(b))


def interaction_findings(a: Analysis) -> list[Finding]:
    out = []
    for it in a.interactions:
        v, t = it.view, it.table
        if t is None or not t.num_rows:
            continue
        rows = [r for r in t.to_pylist() if r.get("normalized", r.get("ratio")) == r.get("normalized", r.get("ratio"))]
        per_model: dict[str, str] = {}
        claims: dict[str, Any] = {}
        if isinstance(v, GridView):
            for m in a.models:
                mine = [r for r in rows if r[MODEL] == m]
                if not mine:
                    continue
                hi = max(mine, key=lambda r: r["normalized"])
                lo = min(mine, key=lambda r: r["normalized"])
                text = f"slowest {_x(hi['normalized'])} at {v.rows} {hi[v.rows]} / {hi[v.cols]}"
                if lo["normalized"] < 1 and not _same(lo["normalized"], 1.0):
                    text += f", fastest {_x(lo['normalized'])} at {v.rows} {lo[v.rows]} / {lo[v.cols]}"
                else:
                    text += ", none faster than the baseline"
                per_model[m] = text
                claims[m] = ((hi[v.rows], hi[v.cols]), (lo[v.rows], lo[v.cols]) if lo["normalized"] < 1 else None)
            out.append(Finding(v.name, f"{v.title}: {_grouped(per_model)}.", claim=tuple(sorted(claims.items())),
                               factors=(v.rows, v.cols)))
            continue
        ratios = [r["ratio"] for r in rows]
        lo, hi = min(ratios), max(ratios)
        side = (f"{v.numerator} is slower than {v.denominator} at every {v.by} for every model" if lo > 1 else
                f"{v.numerator} is faster than {v.denominator} at every {v.by} for every model" if hi < 1 else
                f"the ratio crosses 1: whether {v.numerator} or {v.denominator} is faster depends on the {v.by}")
        for m in a.models:
            mine = [r for r in rows if r[MODEL] == m]
            if not mine:
                continue
            mn = min(mine, key=lambda r: r["ratio"])
            mx = max(mine, key=lambda r: r["ratio"])
            per_model[m] = (f"{_x(mn['ratio'])} at every {v.by}" if _same(mn["ratio"], mx["ratio"]) else
                            f"from {_x(mn['ratio'])} at {mn[v.by]} to {_x(mx['ratio'])} at {mx[v.by]}")
        out.append(Finding(v.name, f"{v.title}: {side}; {_grouped(per_model)}.", claim=side, factors=(v.factor, v.by)))
    return out


SPLIT_SHARE = 0.1
"""A pair of models has no consistent winner when each wins at least this share of their matched configurations;
below it the rarer outcome is an exception to a winner."""


def matched_findings(a: Analysis) -> list[Finding]:
    if len(a.models) < 2 or not a.ranks.num_rows:
        return []
    dist = a.rank_distribution.to_pylist()
    n = dist[0]["configs"]
    top = max(dist, key=lambda r: (r["rank_1"], -r["mean_rank"]))
    order = sorted(dist, key=lambda r: r["mean_rank"])
    out = [Finding("matched", (
        f"Over {n} matched configurations, {top[MODEL]} is fastest in {top['rank_1']} ({_pct(top['rank_1'] / n)}); "
        "mean rank " + ", ".join(f"{r[MODEL]} {r['mean_rank']:.2f}" for r in order) + "."),
        claim=(top[MODEL], tuple(r[MODEL] for r in order)))]
    mixed = [w for w in a.pairwise.to_pylist() if w["wins_a"] and w["wins_b"]]
    split = [w for w in mixed if min(w["wins_a"], w["wins_b"]) >= SPLIT_SHARE * w["configs"]]
    if split:
        out.append(Finding("matched", "Pairs without a consistent winner: " + "; ".join(
            f"{w['model_a']} beats {w['model_b']} in {w['wins_a']} of {w['configs']}, loses {w['wins_b']}"
            for w in split) + ".", claim=tuple((w["model_a"], w["model_b"]) for w in split)))
    rare = [w for w in mixed if w not in split]
    if rare:
        def winner(w: dict[str, Any]) -> str:
            a_, b_, wa, wb = (w["model_a"], w["model_b"], w["wins_a"], w["wins_b"]) if w["wins_a"] >= w["wins_b"] \
                else (w["model_b"], w["model_a"], w["wins_b"], w["wins_a"])
            return f"{a_} beats {b_} in {wa} of {w['configs']} ({wb} exception{'s' if wb > 1 else ''})"

        out.append(Finding("matched", "Nearly consistent winners: " + "; ".join(winner(w) for w in rare) + ".",
                           claim=tuple((w["model_a"], w["model_b"]) for w in rare)))
    for c in a.conditionals:
        for r in c.reversals.to_pylist():
            out.append(Finding("matched", (
                f"Conditional reversal by {c.factor}: {r['model_a']} beats {r['model_b']} in most configurations at "
                f"{c.factor} {r['a_wins_at']} but loses at {r['b_wins_at']} (wins {r['wins_a_b']})."),
                claim=(c.factor, r["model_a"], r["model_b"], r["a_wins_at"], r["b_wins_at"]), factors=(c.factor,)))
    return out


def _order(table: pa.Table, col: str) -> str:
    rows = [r for r in table.to_pylist() if r[col] == r[col]]
    return " > ".join(r[MODEL] for r in sorted(rows, key=lambda r: -r[col]))


def architecture_findings(a: Analysis) -> list[Finding]:
    p = a.proxies
    if p is None or p.num_rows < 2:
        return []
    tp, ep, comm = _order(p, "tp_proxy"), _order(p, "ep_proxy"), _order(p, "comm_mean_s")
    agree = [name for name, o in (("TP proxy", tp), ("EP proxy", ep)) if o == comm]
    verdict = f"the {' and '.join(agree)} order{'s' if len(agree) == 1 else ''} the models as measured" if agree else \
        "neither proxy orders the models as measured"
    return [Finding("architecture", f"Largest first: TP proxy (h × layers) {tp}; EP proxy (h × top-k × MoE layers) "
                                    f"{ep}; mean communication time {comm}: {verdict}.", claim=verdict)]


def raw_findings(a: Analysis) -> list[Finding]:
    """All findings of one analysis, in report order, before the backend and seed checks."""
    return (overall_findings(a) + factor_findings(a) + interaction_findings(a) + reversal_findings(a)
            + matched_findings(a) + architecture_findings(a))


NETWORK = "network"
"""The factor whose levels differ (mostly) in congestion control."""


def _rests_on(f: Finding, a: Analysis) -> Callable[[str, int], bool]:
    """Which orderings a finding's claim depends on, as a test of (ordering label, pair position): where the
    minimum and maximum lie (overall), a marginal ranking (per factor), the best level given another factor's
    level (reversals: position 0 only), an interaction view's cells or ratios. Matched-configuration and
    architecture findings rest on no ordering judged here."""
    if f.topic == "overall" and f.claim:
        names = {f"S_full {f.claim[0]} fastest at", f"S_full {f.claim[0]} slowest at"}
        return lambda s, pos: s in names
    if f.topic == "reversals" and len(f.factors) == 2:
        mid = f" {f.factors[0]} given {f.factors[1]} = "
        return lambda s, pos: pos == 0 and any(s.startswith(m + mid) for m in a.models)
    if any(it.view.name == f.topic for it in a.interactions):
        return lambda s, pos: s.startswith(f.topic + " ")
    if f.factors == (f.topic,) and isinstance(f.claim, tuple) and f.claim:
        names = {f"{f.claim[0]} {m} {f.topic} ranking" for m in a.models}
        return lambda s, pos: s in names
    return lambda s, pos: False


def _with_confidence(f: Finding, a: Analysis, ords: Sequence[Ordering],
                     verdicts: dict[str, Verdict] | None = None) -> Finding:
    """``f`` with its status (the weakest of the orderings it rests on), the unresolved pairs it rests on named
    at the end of its text, and, when ensemble members disagree, which regime gives which answer."""
    rests = _rests_on(f, a)
    hits = [(o, p) for o in ords for p in o.pairs if rests(o.statistic, p.position)]
    behind = [o for o in ords if rests(o.statistic, 0)]
    regimes = [verdicts[o.statistic] for o in behind if verdicts and o.statistic in verdicts
               and verdicts[o.statistic].status == REGIME]
    status = REGIME if regimes else UNRESOLVED if hits else ROBUST if behind else ""  # "": rests on none judged
    text = f.text
    if regimes:
        text += f" Regime-dependent ({regimes[0].statistic}): {regimes[0].sentence()}"
    if hits:
        o, p = hits[0]
        more = len({x.statistic for x, _ in hits}) - 1
        text += (f" Unresolved at this fidelity: {pair_text(p)} ({o.statistic})"
                 + (f"; {more} more ordering{'s' if more > 1 else ''} it rests on too" if more > 0 else "") + ".")
    return replace(f, text=text, status=status, unresolved=tuple(dict.fromkeys(x.statistic for x, _ in hits)))


def findings(a: Analysis, ords: Sequence[Ordering] = (), verdicts: dict[str, Verdict] | None = None) -> list[Finding]:
    """All findings, in report order, each carrying the backend it came from. A comparison between
    network modes from a backend that does not model congestion control is not stated: one line says
    so instead. With several start-jitter seeds, each finding says in how many seeds it holds. Given the
    orderings judged against the error bands (``moesim.analysis.confidence.orderings``), a finding that rests
    on one the bands cannot decide says so (``unresolved``), and each finding carries a status (``verdicts``:
    ``moesim.analysis.ensemble.judge``); robust findings come first."""
    from moesim.network.base import congestion_control_backends, models_congestion_control

    backends = levels(a.table, "backend") if "backend" in a.table.column_names else ()
    label = "/".join(backends) or "unknown backend"
    blind = [b for b in backends if not models_congestion_control(b)]
    out: list[Finding] = []
    dropped = False
    per_seed = {seed: {(f.topic, f.claim) for f in raw_findings(sa)} for seed, sa in a.per_seed.items()}
    for f in raw_findings(a):
        if blind and NETWORK in f.factors:
            dropped = True
            continue
        text = f.text
        if per_seed:
            k = sum((f.topic, f.claim) in claims for claims in per_seed.values())
            text += f" Holds in {k} of {len(per_seed)} seeds."
        f = replace(f, text=text, backend=label)
        out.append(_with_confidence(f, a, ords, verdicts) if ords else f)
    if dropped or (blind and NETWORK in a.factors):
        which = " or ".join(congestion_control_backends())
        out.append(Finding(NETWORK, (
            f"No finding about network modes: the {'/'.join(blind)} backend does not model congestion control "
            f"(its network modes differ only in delays and header bytes); rerun with --backend {which} to "
            "compare them."), factors=(NETWORK,), backend=label))
    if ords:  # robust first, then regime-dependent, unresolved, not judged; the report's order within each
        out.sort(key=lambda f: STATUSES.index(f.status) if f.status in STATUSES else len(STATUSES))
    return out


def _margin(x: float | None) -> str:
    return "" if x is None else _pct(x)


def _status_counts(verdicts: dict[str, Verdict], ords: Sequence[Ordering]) -> str:
    """``120 robust, 3 regime-dependent, 41 unresolved`` over the orderings."""
    counts = {st: 0 for st in STATUSES}
    for o in ords:
        v = verdicts.get(o.statistic)
        counts[v.status if v is not None else (ROBUST if o.resolved else UNRESOLVED)] += 1
    return ", ".join(f"{n} {st}" for st, n in counts.items())


def findings_markdown(provenance: Sequence[tuple[str, str]], fs: Sequence[Finding], ords: Sequence[Ordering],
                      a: Analysis, bands_note: str, refine_hint: str, verdicts: dict[str, Verdict] | None = None,
                      verdict: Sequence[dict[str, Any]] = ()) -> str:
    """``findings.md``: the provenance (version, date, command, backends of the rows), the verdict table, the
    findings (robust first, each with its status), the regime-dependent orderings with which regime gives which
    answer, and the orderings left unresolved at this fidelity with the runs that would settle them."""
    prov = dict(provenance)
    commands = prov.get("command", "not recorded")
    runs = a.seed_runs if a.seed_runs is not None else a.table
    mix = backend_mix(runs) or "not recorded"
    verdicts = verdicts or {}
    out = ["# Findings", "",
           f"- moesim version: {prov.get('moesim version', 'not recorded')}",
           f"- date (runs finished, UTC): {prov.get('date (runs finished, UTC)', 'not recorded')}",
           "- command: " + (commands if commands.startswith("not recorded") else
                            "; ".join(f"`{c}`" for c in commands.split("\n"))),
           f"- backend: {mix}" + (" runs (per configuration the most exact backend stored)" if "," in mix else "")]
    if verdict:
        out += ["", "## Verdict", "", "| question | answer | status | margin | to settle |", "|---|---|---|---|---|"]
        out += [f"| {r['question']} | {r['answer']} | {r['status']} | {_margin(r['margin_rel'])} | {r['to_settle']} |"
                for r in verdict]
        out += ["", f"Orderings: {_status_counts(verdicts, ords)} (robust: resolved and no ensemble member or seed "
                "reverses it; regime-dependent: members disagree; unresolved: inside the error bands, not yet settled "
                "at packet level). Every ordering: tables/confidence.csv."]
    out += ["", "## Summary", "", *(f"- [{f.backend}] " + (f"({f.status}) " if f.status else "") + f.text
                                    for f in fs)]
    regimes = [v for v in verdicts.values() if v.status == REGIME]
    if regimes:
        out += ["", "## Regime-dependent orderings", "",
                f"{len(regimes)} orderings change between ensemble members or seeds of their runs:", ""]
        out += [f"- {v.statistic}: {v.sentence()}" for v in regimes]
    if ords:
        open_ = [o for o in ords if not o.resolved]
        all_levels = {f: levels(a.table, f) for f in a.factors}
        out += ["", "## Unresolved at this fidelity", "",
                (f"{len(open_)} of {len(ords)} orderings lie inside the error bands of their rows' backends. " if open_
                 else f"None: all {len(ords)} orderings are resolved. ") + bands_note, ""]
        for o in open_:
            p = o.pairs[0]
            more = f" ({len(o.pairs) - 1} more pair{'s' if len(o.pairs) > 2 else ''})" if len(o.pairs) > 1 else ""
            out.append(f"- {o.statistic}: {o.order}. {pair_text(p)}{more}. Settle with {len(o.settle)} "
                       f"run{'s' if len(o.settle) != 1 else ''}: {describe_settle(o, a.factors, all_levels)}.")
        if open_:
            out += ["", refine_hint]
    return "\n".join(out) + "\n"


QUESTIONS = (("strategy", "Best TP/EP split"), ("algorithm", "Best collective algorithm"),
             ("topology", "Best topology"), (NETWORK, "Network-mode order"))
"""The verdict table's factor questions (the best level, or for the network the whole order)."""


def _join(per_model: dict[str, str]) -> str:
    values = set(per_model.values())
    if len(values) == 1:
        return next(iter(values)) + (" (every model)" if len(per_model) > 1 else "")
    return "; ".join(f"{m}: {v}" for m, v in per_model.items())


def _verdict(question: str, per_model: dict[str, str], judged: Sequence[tuple[Ordering, str]],
             margins: Sequence[float], a: Analysis) -> dict[str, Any]:
    """One verdict row from its per-model answers, the orderings behind it with their statuses, and the margins."""
    status = worst([s for _, s in judged])
    settle = {tuple(sorted(c.items())) for o, s in judged if s == UNRESOLVED for c in o.settle}
    all_levels = {f: levels(a.table, f) for f in a.factors}
    open_ = [o for o, s in judged if s == UNRESOLVED and o.settle]
    how = ""
    if open_:
        how = f"{len(settle)} packet run{'s' if len(settle) != 1 else ''}: " + "; ".join(
            describe_settle(o, a.factors, all_levels) for o in open_[:2]) + ("; …" if len(open_) > 2 else "")
    return {"question": question, "answer": _join(per_model), "status": status,
            "margin_rel": min(margins) if margins else None, "to_settle": how}


def verdict_rows(a: Analysis, ords: Sequence[Ordering], verdicts: dict[str, Verdict] | None = None
                 ) -> list[dict[str, Any]]:
    """The verdict table: one row per question (best split, collective algorithm and topology, the network-mode
    order, the fastest and slowest configuration) with the answer, its status, the margin behind it
    (relative gap to the runner-up, smallest over the models) and, for unresolved answers, the runs that settle
    them. A question about the best level rests on the top pair of each model's ranking; its status is the
    weakest over the models (regime-dependent when an ensemble member puts another level first)."""
    by_name = {o.statistic: o for o in ords}
    verdicts = verdicts or {}
    rows = []

    def status(o: Ordering, top_only: bool) -> str:
        v = verdicts.get(o.statistic)
        if v is not None and v.others and (not top_only or any(other.split(" < ")[0] != o.order.split(" < ")[0]
                                                               for other in v.others)):
            return REGIME
        return UNRESOLVED if any(p.position == 0 or not top_only for p in o.pairs) else ROBUST

    for factor, question in QUESTIONS:
        m = a.marginal(factor)
        if m is None:
            continue
        per_model: dict[str, str] = {}
        judged: list[tuple[Ordering, str]] = []
        margins: list[float] = []
        for model in a.models:
            mine = sorted((r for r in m.table.to_pylist() if r[MODEL] == model),
                          key=lambda r: (r["rank"], level_key(factor, r[factor])))
            if len(mine) < 2:
                continue
            whole = factor == NETWORK
            per_model[model] = " < ".join(r[factor] for r in mine) if whole else mine[0][factor]
            margins.append(min(b["vs_best"] - a_["vs_best"] for a_, b in zip(mine, mine[1:], strict=False))
                           / (1 + mine[0]["vs_best"]) if whole else mine[1]["vs_best"])
            o = by_name.get(f"{m.subset} {model} {factor} ranking")
            if o is not None:
                judged.append((o, status(o, top_only=not whole)))
        if per_model:
            rows.append(_verdict(f"{question} ({m.subset})", per_model, judged, margins, a))
    for which, question in (("fastest", "Fastest configuration"), ("slowest", "Slowest configuration")):
        per_model, judged, margins = {}, [], []
        for r in a.overall.to_pylist():
            if r["subset"] != "S_full":
                continue
            per_model[r[MODEL]] = r[f"wall_{'min' if which == 'fastest' else 'max'}_at"]
            walls = sorted(x for x, mm in zip(a.table.column("wall_s").to_pylist(), a.table.column(MODEL).to_pylist(),
                                              strict=True) if mm == r[MODEL])
            ends = walls if which == "fastest" else [-w for w in reversed(walls)]
            runner_up = next((w for w in ends if abs(w - ends[0]) > TIE_RTOL * abs(ends[0])), None)
            if runner_up is not None:  # the next run that is not a tie (one simulation under several labels)
                margins.append(runner_up / ends[0] - 1 if which == "fastest" else ends[0] / runner_up - 1)
            o = by_name.get(f"S_full {r[MODEL]} {which} at")
            if o is not None:
                judged.append((o, status(o, top_only=True)))
        if per_model:
            rows.append(_verdict(question, per_model, judged, margins, a))
    return rows


def verdict_table(rows: Sequence[dict[str, Any]]) -> pa.Table:
    schema = pa.schema([("question", pa.string()), ("answer", pa.string()), ("status", pa.string()),
                        ("margin_rel", pa.float64()), ("to_settle", pa.string())])
    return pa.Table.from_pylist(list(rows), schema=schema)
