"""How closely the fluid backend (or another) reproduces the packet backend: the validation sets and the
study-scale V4 Flash matrix (docs/network-fluid.md, "Accuracy").

The packet runs are the reference and cost hours, so they are kept as Parquet files under
benchmarks/reference/ and regenerated with one command each:

    python benchmarks/accuracy.py packet-validation --out DIR   # 48 configurations × tokens 256, 1024 × seeds 1-5
    python benchmarks/accuracy.py packet-matrix --out DIR       # V4 Flash, all 192 study runs at 4096 tokens
        # [--networks ib_hpcc,roce_hpcc]: only those runs, merged into the stored file; a sidecar
        # packet_v4_flash.json names the command, commit and CPU time, and any rows not yet regenerated
    python benchmarks/accuracy.py packet-models --study DIR --out DIR [--limit-s S]
        # the other study models: the runs on topologies 1, 2 and 6 that the default report's unresolved
        # orderings name, cheapest first (estimated), into packet_models.parquet with its command and CPU time

Checks (they print the figures and exit 1 when a target is missed):

    python benchmarks/accuracy.py validation [--tokens 256,1024] [--backend fluid] [--set k=v] [--workers 2]
    python benchmarks/accuracy.py study [--store DIR] [--validation-store DIR] [--models-store DIR]
        # every statistic and ordering of the V4 Flash study against packet level, and each ordering's status
        # under the error bands: in-sample (the shipped file), cross-validated (bands fit on half the V4 Flash
        # configurations and the other models' references, the orderings judged with them), and leave one
        # model out (as out-of-sample)
    python benchmarks/accuracy.py refine-cost [--store DIR]     # moesim refine's packet cost estimate per run
    python benchmarks/accuracy.py out-of-sample [--store DIR]
        # leave one model out: each model's packet runs judged with bands fit on the other models' references

The error bands the report states its confidence with (src/moesim/analysis/references/error_bands.yaml,
moesim.analysis.bands) are measured against every stored reference (the V4 Flash matrix, the validation sets
and packet_models.parquet), one command, deterministic given the code:

    python benchmarks/accuracy.py bands [--backends fluid,flow,analytical] [--store DIR] [--workers 2] [--keep-costs]

The validation set is a fixed list of V4 Flash configurations: twelve (topology, strategy) cells — every
topology twice, every strategy three times — each with ring/roce_hpcc, ring/roce_dcqcn, dbt/roce_hpcc and
one no-CC or IB run (ib_cc0 / ib_hpcc, alternating, on ring or dbt).
"""

from __future__ import annotations

import argparse
import datetime as dt
import hashlib
import shlex
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from moesim import __version__
from moesim.analysis.accuracy import StatisticsAgreement, per_configuration, statistics_agreement, summarise
from moesim.analysis.bands import (
    BANDS_FILE,
    BackendBands,
    ErrorBands,
    Errors,
    bands_yaml,
    family_of,
    measure,
    measure_paired,
    parse_bands,
    row_spec,
)
from moesim.analysis.results import as_table, levels, load_results
from moesim.commands.run import parse_set
from moesim.experiments import export_results, run_sweep
from moesim.experiments.inputs import code_hash
from moesim.fileio import atomic_write
from moesim.system.spec import RunSpec

MODEL = "deepseek-v4-flash"
REFERENCE = Path(__file__).resolve().parent / "reference"
VALIDATION_PARQUET = REFERENCE / "packet_validation.parquet"
MATRIX_PARQUET = REFERENCE / "packet_v4_flash.parquet"
MODELS_PARQUET = REFERENCE / "packet_models.parquet"
"""Packet rows of the study's other models (``packet-models``): a reference the bands are fit on, one per model,
and the held-out model of the leave-one-model-out check."""
MODELS_TOPOLOGIES = ("1", "2", "6")
BANDS_YAML = Path(__file__).resolve().parents[1] / "src" / "moesim" / "analysis" / "references" / BANDS_FILE
SEEDS = 5
JITTER_S = 1e-8
CELLS = (("1", "TP2EP16"), ("2", "TP4EP8"), ("3", "TP8EP4"), ("4", "TP16EP2"), ("5", "TP2EP16"), ("6", "TP4EP8"),
         ("1", "TP8EP4"), ("2", "TP16EP2"), ("3", "TP2EP16"), ("4", "TP4EP8"), ("5", "TP8EP4"), ("6", "TP16EP2"))
CI_SUBSET = (("1", "TP2EP16", "ring_direct", "roce_dcqcn"), ("2", "TP4EP8", "ring_direct", "roce_hpcc"),
             ("3", "TP8EP4", "dbt_direct", "roce_hpcc"), ("5", "TP2EP16", "ring_direct", "ib_cc0"),
             ("4", "TP4EP8", "ring_direct", "roce_dcqcn"), ("6", "TP4EP8", "ring_direct", "roce_hpcc"))
"""Configurations of the validation set that the test suite checks at 256 tokens (CPU seconds, not hours)."""


def validation_configs() -> list[tuple[str, str, str, str]]:
    """The 48 (topology, strategy, algorithm, network) configurations of the validation set."""
    out = []
    for i, (topo, strat) in enumerate(CELLS):
        extra_alg = "ring_direct" if i % 2 == 0 else "dbt_direct"
        extra_net = "ib_cc0" if (i // 2) % 2 == 0 else "ib_hpcc"
        out += [(topo, strat, "ring_direct", "roce_hpcc"), (topo, strat, "ring_direct", "roce_dcqcn"),
                (topo, strat, "dbt_direct", "roce_hpcc"), (topo, strat, extra_alg, extra_net)]
    return out


def validation_specs(backend: str, tokens: tuple[int, ...], seeds: int = 0,
                     configs: list[tuple[str, str, str, str]] | None = None,
                     overrides: tuple[tuple[str, object], ...] = ()) -> list[RunSpec]:
    """The validation runs on ``backend``: each configuration at each token count, with ``seeds`` seeds of
    10 ns start jitter (0: one run without jitter)."""
    specs = []
    for t in tokens:
        for cfg in configs or validation_configs():
            for seed in range(1, seeds + 1) if seeds else (0,):
                over = dict(overrides, tokens=t)
                if seed:
                    over.update(jitter_seed=seed, start_jitter_s=JITTER_S)
                specs.append(RunSpec(MODEL, *cfg, backend=backend, overrides=tuple(sorted(over.items()))))
    return specs


def _export(store: Path, target: Path) -> None:
    n = export_results(store, target, "parquet", "SELECT * FROM runs WHERE status = 'ok' ORDER BY topology, "
                                                  "strategy, algorithm, network, overrides_json")
    print(f"wrote {n} packet runs to {target}")


def packet_validation(out: Path, workers: int, tokens: tuple[int, ...] = (256, 1024)) -> int:
    """Run the jittered packet references, the CI subset first (then the rest, smallest token count first)."""
    specs = validation_specs("packet", tokens[:1], SEEDS, list(CI_SUBSET))
    specs += [s for s in validation_specs("packet", tokens, SEEDS) if s not in set(specs)]
    summary = run_sweep(specs, out, workers=workers, progress="plain", source="packet validation set")
    print("\n".join(summary.lines()))
    if summary.failures:
        return 1
    _export(out, VALIDATION_PARQUET)
    return 0


def matrix_specs(networks: tuple[str, ...] | None = None) -> list[RunSpec]:
    """The V4 Flash study's packet runs, only those on ``networks`` when given, cheapest first by the stored
    matrix's simulation times (so a sweep stopped early has stored the most rows), the rest in study order."""
    from moesim.experiments import study_matrix

    specs = study_matrix().with_preset("flash").with_levels("backend", ["packet"]).runs()
    if networks is not None:
        allowed = sorted({s.network for s in specs})
        if unknown := [n for n in networks if n not in allowed]:
            raise SystemExit(f"--networks: unknown network '{unknown[0]}' (allowed: {', '.join(allowed)})")
        specs = [s for s in specs if s.network in networks]
    cost = {}
    if MATRIX_PARQUET.is_file():
        cost = {_config(r): float(r["sim_wallclock_s"]) for r in pq.read_table(MATRIX_PARQUET).to_pylist()}
    order = {s.key(): i for i, s in enumerate(specs)}
    return sorted(specs, key=lambda s: (cost.get((s.topology, s.strategy, s.algorithm, s.network), np.inf),
                                        order[s.key()]))


def packet_matrix(out: Path, workers: int, networks: tuple[str, ...] | None = None) -> int:
    """Run the V4 Flash packet matrix (or its runs on ``networks``) into ``out`` (resumable) and export it."""
    specs = matrix_specs(networks)
    summary = run_sweep(specs, out, workers=workers, progress="plain", source="packet V4 Flash matrix")
    print("\n".join(summary.lines()))
    export_matrix(out, networks)
    return 1 if summary.failures else 0


def export_matrix(out: Path, networks: tuple[str, ...] | None = None) -> None:
    """Write the packet rows stored in ``out`` to ``MATRIX_PARQUET`` and its sidecar (command, commit, CPU time).

    With ``networks``, only those rows are replaced: each stored row of a configuration that ``out`` holds is
    swapped for the new one and every other row is kept byte for byte, so a partial regeneration leaves the
    remaining rows as they were (the sidecar names them)."""
    import json

    with tempfile.TemporaryDirectory() as tmp:
        fresh_path = Path(tmp) / "fresh.parquet"
        _export(out, fresh_path)
        fresh = pq.read_table(fresh_path)
    if networks is not None:
        fresh = fresh.filter(pa.array([r in networks for r in fresh.column("network").to_pylist()]))
    side = MATRIX_PARQUET.with_suffix(".json")
    note = json.loads(side.read_text(encoding="utf-8")) if side.is_file() else {}
    command = repository_command([a for a in sys.argv[1:] if a != "--export-only"])
    prior = note.get("regenerated", {}) if networks else note
    if "--export-only" in sys.argv and prior.get("networks") == (list(networks) if networks else None):
        command = prior.get("command", command)  # the sweep's command, as recorded by an earlier export
    part = {"command": command, "commit": _commit(), "moesim_version": __version__,
            "date": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d"), "runs": fresh.num_rows,
            "simulation_s": round(_total(fresh, "sim_wallclock_s"), 1)}
    if networks is None:
        table, note = fresh, part
    else:
        old = pq.read_table(MATRIX_PARQUET)
        new_configs = {_config(r) for r in fresh.to_pylist()}
        kept = old.filter(pa.array([_config(r) not in new_configs for r in old.to_pylist()]))
        table = pa.concat_tables([kept, fresh.select(old.schema.names).cast(old.schema)])
        order = sorted(range(table.num_rows), key=lambda i: (*_config(table.slice(i, 1).to_pylist()[0]),
                                                             str(table.column("overrides_json")[i])))
        table = table.take(pa.array(order, type=pa.int64()))
        stale = sorted(" ".join(c) for c in map(_config, kept.to_pylist()) if c[3] in networks)
        # regenerations of other networks stay on record (``earlier``); one of these networks is replaced
        earlier = [r for r in [*note.get("earlier", []), *([prior] if prior else [])]
                   if not set(r["networks"]) <= set(networks)]
        note = {**{k: v for k, v in note.items() if k not in ("regenerated", "stale", "earlier")},
                "regenerated": {**part, "networks": list(networks)}, **({"earlier": earlier} if earlier else {}),
                "kept_rows": kept.num_rows, "stale": stale}
    note["runs_total"] = table.num_rows
    note["simulation_s_per_run"] = {r["run_id"]: round(float(r["sim_wallclock_s"]), 1) for r in table.to_pylist()}
    with tempfile.TemporaryDirectory(dir=MATRIX_PARQUET.parent) as tmp:
        staged = Path(tmp) / MATRIX_PARQUET.name
        pq.write_table(table, staged)
        staged.replace(MATRIX_PARQUET)
    atomic_write(side, json.dumps(note, indent=1) + "\n")
    print(f"{MATRIX_PARQUET}: {fresh.num_rows} rows from {out}, {table.num_rows} in all"
          + (f"; {len(note['stale'])} rows of {', '.join(networks)} not regenerated yet" if networks else ""))


def model_reference_specs(study: Path, topologies: tuple[str, ...] = MODELS_TOPOLOGIES) -> list[tuple[RunSpec, float]]:
    """The packet runs that settle the default report's unresolved orderings (``study``: a store of the default
    study), for every model but V4 Flash (whose whole matrix is a reference) on ``topologies``, each with its
    estimated packet cost in seconds (``moesim.analysis.refine_cost``, per packet-hop measured on the V4 Flash
    matrix), cheapest first."""
    from moesim.analysis.bands import load_bands
    from moesim.analysis.confidence import orderings, unresolved
    from moesim.analysis.refine_cost import cost_model, family, simulated_share, work
    from moesim.analysis.study import analyse

    table = load_results(study)
    a = analyse(table, with_architecture=False)
    wanted = {tuple(sorted(c.items())) for o in unresolved(orderings(a, load_bands())) for c in o.settle}
    model = cost_model("packet", _reference(MATRIX_PARQUET).to_pylist())
    out: dict[str, tuple[RunSpec, float]] = {}
    for r in table.to_pylist():
        config = {k: str(r[k]) for k in ("model", *a.factors) if k in r}
        if (r["model"] == MODEL or str(r["topology"]) not in topologies
                or not any(all(config.get(k) == v for k, v in c) for c in wanted)):
            continue
        spec = replace(row_spec(r), backend="packet")
        w = work(spec)
        out[spec.key()] = (spec, model.estimate_s(family(spec), w, simulated_share(r, w.layers)))
    return sorted(out.values(), key=lambda sc: (sc[1], sc[0].key()))


def packet_models(study: Path, out: Path, workers: int, limit_s: float | None) -> int:
    """Run ``model_reference_specs`` at packet level into ``out`` (resumable), cheapest first, as many as fit in
    ``limit_s`` of estimated CPU time, and export every packet row stored there to ``MODELS_PARQUET`` with a
    sidecar naming the command, the commit and the CPU time."""
    chosen, total = [], 0.0
    for spec, cost in model_reference_specs(study):
        if limit_s is not None and total + cost > limit_s:
            break
        chosen.append(spec)
        total += cost
    print(f"{len(chosen)} packet runs, estimated {total / 3600:.1f} CPU h")
    summary = run_sweep(chosen, out, workers=workers, progress="plain", source="packet references of the other models")
    print("\n".join(summary.lines()))
    export_models(out)
    return 1 if summary.failures else 0


def export_models(out: Path) -> None:
    """Write the packet rows stored in ``out`` to ``MODELS_PARQUET`` and its sidecar: the command that ran them
    (an ``--export-only`` keeps the one recorded before), and each run's simulation time (``sim_wallclock_s``:
    the seconds its worker process spent on it, one process per run, so its CPU time on an idle core)."""
    import json

    _export(out, MODELS_PARQUET)
    rows = pq.read_table(MODELS_PARQUET).to_pylist()
    side = MODELS_PARQUET.with_suffix(".json")
    command = repository_command(sys.argv[1:])
    if "--export-only" in sys.argv and side.is_file():
        command = json.loads(side.read_text(encoding="utf-8")).get("command", command)
    note = {"command": command, "commit": _commit(), "moesim_version": __version__,
            "date": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d"), "runs": len(rows),
            "simulation_s": round(sum(float(r["sim_wallclock_s"]) for r in rows), 1),
            "simulation_s_per_run": {r["run_id"]: round(float(r["sim_wallclock_s"]), 1) for r in rows}}
    atomic_write(MODELS_PARQUET.with_suffix(".json"), json.dumps(note, indent=1) + "\n")


def repository_command(args: list[str]) -> str:
    """The command as anyone can run it from the repository: a folder given to an option is named DIR (a
    scratch path of the machine that ran it means nothing elsewhere)."""
    out, folder = [], False
    for a in args:
        out.append("DIR" if folder else a)
        folder = a in ("--store", "--out", "--validation-store", "--study", "--models-store")
    return shlex.join(["python", "benchmarks/accuracy.py", *out])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="what", required=True)
    for name in ("packet-validation", "packet-matrix"):
        p = sub.add_parser(name)
        p.add_argument("--out", type=Path, required=True, help="the packet sweep's store (resumable)")
        p.add_argument("--workers", type=int, default=1)
        p.add_argument("--export-only", action="store_true",
                       help="write the runs stored so far to benchmarks/reference/ without simulating")
    sub.choices["packet-validation"].add_argument("--tokens", default="256,1024")
    sub.choices["packet-matrix"].add_argument(
        "--networks", help="only the runs on these networks (comma-separated), merged into the stored matrix")
    pm = sub.add_parser("packet-models")
    pm.add_argument("--study", type=Path, required=True, help="a store of the default study (fluid)")
    pm.add_argument("--out", type=Path, required=True, help="the packet sweep's store (resumable)")
    pm.add_argument("--workers", type=int, default=1)
    pm.add_argument("--limit-s", type=float, help="estimated CPU seconds to spend (default: every run)")
    pm.add_argument("--export-only", action="store_true")
    v = sub.add_parser("validation")
    v.add_argument("--tokens", default="256,1024")
    v.add_argument("--backend", default="fluid")
    v.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    v.add_argument("--workers", type=int, default=2)
    v.add_argument("--ci", action="store_true", help="only the CI subset, at 256 tokens")
    v.add_argument("--store", type=Path, help="keep the candidate runs in this store (reused when rerun)")
    s = sub.add_parser("study")
    s.add_argument("--store", type=Path, help="a V4 Flash study store of the candidate backend (default: run it)")
    s.add_argument("--validation-store", type=Path,
                   help="the candidate's validation runs, for the cross-validated bands (default: run them)")
    s.add_argument("--models-store", type=Path,
                   help="the candidate's runs of the other models' packet references (default: run them)")
    s.add_argument("--splits", type=int, default=3, help="random halvings of the configurations to cross-validate on")
    s.add_argument("--bands", help=f"the error bands judged in-sample (default: the shipped {BANDS_FILE})")
    s.add_argument("--backend", default="fluid")
    s.add_argument("--workers", type=int, default=2)
    o = sub.add_parser("out-of-sample", help="only the certainty rule, leave one model out")
    o.add_argument("--store", type=Path, help="keep the candidate runs under this folder (reused when rerun)")
    o.add_argument("--backend", default="fluid")
    o.add_argument("--bands", help=f"the error bands judged (default: the shipped {BANDS_FILE})")
    o.add_argument("--workers", type=int, default=2)
    c = sub.add_parser("refine-cost")
    c.add_argument("--store", type=Path, help="a V4 Flash study store of the backend refined from (default: run it)")
    c.add_argument("--backend", default="fluid")
    c.add_argument("--workers", type=int, default=2)
    b = sub.add_parser("bands")
    b.add_argument("--backends", default="fluid,flow,analytical")
    b.add_argument("--store", type=Path, help="keep the candidate runs under this folder (reused when rerun)")
    b.add_argument("--workers", type=int, default=2)
    b.add_argument("--out", type=Path, default=BANDS_YAML)
    b.add_argument("--keep-costs", action="store_true",
                   help="keep the relative costs of the file being replaced (timings depend on the machine's load)")
    args = ap.parse_args(argv)
    if args.what == "packet-models":
        if args.export_only:
            export_models(args.out)
            return 0
        return packet_models(args.study, args.out, args.workers, args.limit_s)
    if args.what == "packet-matrix":
        networks = tuple(args.networks.split(",")) if args.networks else None
        if args.export_only:
            export_matrix(args.out, networks)
            return 0
        return packet_matrix(args.out, args.workers, networks)
    if args.what == "packet-validation" and args.export_only:
        _export(args.out, VALIDATION_PARQUET)
        return 0
    if args.what == "packet-validation":
        return packet_validation(args.out, args.workers, tuple(int(t) for t in args.tokens.split(",")))
    if args.what == "validation":
        return validation(tuple(int(t) for t in ("256" if args.ci else args.tokens).split(",")), args.backend,
                          parse_set(args.overrides), args.workers, list(CI_SUBSET) if args.ci else None, args.store)
    if args.what == "bands":
        return bands(args.backends.split(","), args.store, args.workers, args.out, args.keep_costs)
    if args.what == "out-of-sample":
        references = load_references(args.backend, args.workers, reference_stores(args.store, args.backend))
        return int(leave_one_model_out(args.backend, references, args.bands))
    if args.what == "refine-cost":
        return refine_cost(args.store, args.backend, args.workers)
    return study(args.store, args.backend, args.workers, validation_store=args.validation_store, splits=args.splits,
                 bands_file=args.bands, models_store=args.models_store)


def _reference(path: Path) -> pa.Table:
    if not path.is_file():
        raise SystemExit(f"{path}: not found; regenerate it (see this script's docstring)")
    return as_table(pq.read_table(path), source=str(path))


def _candidate(specs: list[RunSpec], store: Path | None, workers: int) -> pa.Table:
    """The candidate runs: read from ``store`` (run there first if missing), or run in a temporary store."""
    with tempfile.TemporaryDirectory() as tmp:
        out = store or Path(tmp)
        summary = run_sweep(specs, out, workers=workers, progress="none", source="candidate runs")
        if summary.failures:
            raise SystemExit("candidate runs failed: " + "; ".join(f"{a}: {b}" for a, b in summary.failures[:3]))
        return load_results(out)


def _pick(table: pa.Table, column: str, values: set[str]) -> pa.Table:
    return table.filter(pa.array([str(v) in values for v in table.column(column).to_pylist()]))


def validation(tokens: tuple[int, ...], backend: str, overrides: tuple[tuple[str, object], ...], workers: int,
               configs: list[tuple[str, str, str, str]] | None, store: Path | None = None) -> int:
    """Each configuration against the median of the packet seeds; exit 1 when a target is missed."""
    ref = _pick(_reference(VALIDATION_PARQUET), "tokens", {str(t) for t in tokens})
    cand = _candidate(validation_specs(backend, tokens, 0, configs, overrides), store, workers)
    rc = 0
    for t in tokens:
        table = per_configuration(_pick(cand, "tokens", {str(t)}), _pick(ref, "tokens", {str(t)}))
        print(f"\ntokens = {t}: {backend} against the median of {SEEDS} packet seeds of {JITTER_S * 1e9:g} ns start jitter")
        print(f"{'topo':>4} {'strategy':>8} {'algorithm':>11} {'network':>10} {'packet s':>10} {'range':>19} "
              f"{backend + ' s':>10} {'error':>8}")
        for r in table.to_pylist():
            flag = {None: "", True: "  inside", False: "  OUTSIDE"}[r["inside_range"]]
            print(f"{r['topology']:>4} {r['strategy']:>8} {r['algorithm']:>11} {r['network']:>10} "
                  f"{r['reference_s']:10.5f} {r['reference_min_s']:9.5f}-{r['reference_max_s']:9.5f} "
                  f"{r['candidate_s']:10.5f} {100 * r['error']:+7.2f}%{flag}")
        s = summarise(table)
        print("\n".join(s.lines()))
        missed = [name for name, bad in (("median <= 3 %", s.median_abs_error > 0.03),
                                         ("90th percentile <= 10 %", s.p90_abs_error > 0.10),
                                         ("inside every wide range", s.wide_inside < s.wide)) if bad]
        print("targets: " + ("all met" if not missed else "missed: " + ", ".join(missed)))
        rc |= bool(missed)
    return rc


def study(store: Path | None, backend: str, workers: int, tolerance: float = 0.03,
          validation_store: Path | None = None, splits: int = 3, bands_file: str | None = None,
          models_store: Path | None = None) -> int:
    """Every statistic of the V4 Flash study against the packet matrix, and how the error bands judge each
    ordering, in-sample and cross-validated; exit 1 when a target is missed."""
    references = load_references(backend, workers, {"matrix": store, "validation": validation_store,
                                                    "models": models_store})
    assert references[0].study is not None  # the V4 Flash matrix
    candidate, ref = references[0].study
    agreement = statistics_agreement(candidate, ref)
    worst = sorted(agreement.numbers.to_pylist(), key=lambda r: -abs(r["error"]))
    print(f"V4 Flash study, {backend} against packet (4096 tokens, 192 runs)")
    runs = per_configuration(candidate, ref)
    print("per run: " + summarise(runs).lines()[0])
    print(f"  {sum(abs(e) > 0.10 for e in runs.column('error').to_pylist())} runs off by more than 10 %")
    means = {r["statistic"]: r for r in agreement.numbers.to_pylist()}
    for label, num, den in (("DCQCN over HPCC (roce)", "network = roce_dcqcn", "network = roce_hpcc"),
                            ("DBT over ring", "algorithm = dbt_direct", "algorithm = ring_direct")):
        a, b = (means.get(f"S_full deepseek-v4-flash mean wall by {k}") for k in (num, den))
        if a and b:
            print(f"  {label}: packet {100 * (a['reference'] / b['reference'] - 1):+.1f} %, "
                  f"{backend} {100 * (a['candidate'] / b['candidate'] - 1):+.1f} %")
    print("\n".join(agreement.lines(tolerance)))
    print("\nlargest differences:")
    for r in worst[:15]:
        print(f"  {r['statistic']:<70} packet {r['reference']:.5g}  {backend} {r['candidate']:.5g}  "
              f"{100 * r['error']:+.2f}%")
    differ = [r for r in agreement.orderings.to_pylist() if not r["same"]]
    if differ:
        print("\norderings that differ:")
        for r in differ:
            print(f"  {r['statistic']}: packet {r['reference']}; {backend} {r['candidate']}")
    missed = _judge_study(references, agreement, backend, splits, bands_file)
    missed |= leave_one_model_out(backend, references, bands_file)
    return int(agreement.worst_abs_error > tolerance or bool(differ) or missed)


def leave_one_model_out(backend: str, references: list[Reference], bands_file: str | None) -> bool:
    """Judge the certainty rule model by model: with the shipped bands (fit on every reference, so in-sample)
    and with bands fit on the other models' references alone (out of sample). On each model's study runs,
    every pair of runs is an ordering the rule calls resolved (log ratio above the pair's band) or not, and
    packet says whether the backend's order holds; likewise every ordering of the analysis of those runs.
    True when a resolved pair or ordering is contradicted."""
    from moesim.analysis.bands import load_bands

    shipped = bands_file or BANDS_FILE
    print(f"\nleave one model out: {backend} against each model's packet runs, judged with the shipped bands "
          f"({shipped}: in-sample) and with bands fit on the other models' references alone")
    missed = False
    for model in sorted({r.model for r in references}):
        rest = [r for r in references if r.model != model]
        held = [r for r in references if r.model == model and r.study is not None]
        fit = ErrorBands("packet", {backend: _fit(backend, rest)}) if rest else None
        for ref in held:
            assert ref.study is not None
            print(f"{ref.name}: {ref.study[1].num_rows} packet runs; per run: "
                  + summarise(per_configuration(*ref.study)).lines()[0])
            missed |= _judge_model("  in-sample", *ref.study, load_bands(bands_file))
            if fit is not None:
                missed |= _judge_model(f"  left out (fit on {', '.join(r.name for r in rest)})", *ref.study, fit)
    return missed


def _judge_model(label: str, candidate: pa.Table, packet: pa.Table, bands: ErrorBands) -> bool:
    """Print how ``bands`` judge the pairs of runs of one model and the orderings of their analysis against
    ``packet``; True when a resolved one is contradicted."""
    import itertools

    from moesim.analysis.bands import row_keys

    pairs = resolved = contradicted = flagged = 0
    key_of = {_config(r): k for r, k in zip(candidate.to_pylist(), row_keys(candidate, bands), strict=True)}
    for a, b in itertools.combinations(per_configuration(candidate, packet).to_pylist(), 2):
        pairs += 1
        ca, cb, pa_, pb = a["candidate_s"], b["candidate_s"], a["reference_s"], b["reference_s"]
        sure = abs(np.log(cb / ca)) > bands.pair_band(key_of[_config(a)], key_of[_config(b)])
        wrong = (cb - ca) * (pb - pa_) < 0
        resolved += sure
        contradicted += wrong
        flagged += wrong and not sure
    agreement = statistics_agreement(candidate, packet)
    flagged_orderings = _unresolved(candidate, bands)
    print(f"{label}: pairs of runs {pairs}, resolved {resolved}; contradicted by packet {contradicted}, of which "
          f"flagged {flagged}" + ("" if contradicted == flagged else " — A RESOLVED PAIR IS CONTRADICTED"))
    print("    " + _counts_line("orderings", agreement, flagged_orderings))
    return contradicted != flagged or bool(_counts(agreement, flagged_orderings)[3])


def refine_cost(store: Path | None, backend: str, workers: int) -> int:
    """``moesim refine``'s estimate of each packet run of the V4 Flash matrix against its measured time
    (moesim.analysis.refine_cost): calibrated on this machine with the simulated share of the ``backend`` row it
    would be refined from (what a refine knows before its first run); the same with each run's own share (the
    packet-hop model alone); and with the cost per packet-hop of each family measured on the other 191 runs
    (what a refine knows after runs of that family). Exit 1 when the median is off by more than 2×."""
    import statistics

    from moesim.analysis.refine_cost import Measured, calibrate, measured_rows, simulated_share
    from moesim.experiments import study_matrix

    ref = _reference(MATRIX_PARQUET).to_pylist()
    cheap = _candidate(study_matrix().with_preset("flash").with_levels("backend", [backend]).runs(), store, workers)
    share_of = {(r["topology"], r["strategy"], r["algorithm"], r["network"]): r for r in cheap.to_pylist()}
    hop_s, rank_layer_s = calibrate("packet", print)
    runs = measured_rows(ref, "packet")  # each run's own (packet) share: the reference holds no other backend
    shares = [simulated_share(share_of[(r["topology"], r["strategy"], r["algorithm"], r["network"])], m.work.layers)
              for r, m in zip(ref, runs, strict=True)]
    spent = {m.family: 0.0 for m in runs}
    hops = {m.family: 0.0 for m in runs}
    for m, share in zip(runs, shares, strict=True):
        spent[m.family] += max(m.seconds - rank_layer_s * m.work.rank_layers * share, 0.0)
        hops[m.family] += m.work.packet_hops * share

    def estimate(m: Measured, share: float, per_hop: float) -> float:
        return share * (rank_layer_s * m.work.rank_layers + per_hop * m.work.packet_hops)

    ratios: dict[str, list[float]] = {"before any packet run (share of the " + backend + " row)": [], "packet-hop model alone (own share)": [],
              "after the other runs of its family": []}
    for m, share in zip(runs, shares, strict=True):
        own = max(m.seconds - rank_layer_s * m.work.rank_layers * share, 0.0)
        family_hop = (spent[m.family] - own) / max(hops[m.family] - m.work.packet_hops * share, 1.0)
        for values, est in zip(ratios.values(), (estimate(m, share, hop_s), estimate(m, m.share, hop_s),
                                                 estimate(m, share, family_hop)), strict=True):
            values.append(est / m.seconds)
    print(f"moesim refine's cost estimate against {len(runs)} packet runs of the V4 Flash matrix (4096 tokens); "
          f"calibrated here: {hop_s * 1e9:.0f} ns per packet-hop, {rank_layer_s * 1e3:.2f} ms per rank and layer")
    print(f"{'estimate / measured':<52} {'median':>7} {'lowest':>7} {'highest':>7} {'within 2x':>10} {'sum':>6}")
    measured_total = sum(m.seconds for m in runs)
    for name, values in ratios.items():
        total = sum(v * m.seconds for v, m in zip(values, runs, strict=True)) / measured_total
        inside = sum(0.5 <= v <= 2 for v in values)
        print(f"{name:<52} {statistics.median(values):7.2f} {min(values):7.2f} {max(values):7.2f} "
              f"{inside:>5}/{len(values):<4} {total:6.2f}")
    median = statistics.median(next(iter(ratios.values())))
    return int(not 0.5 <= median <= 2)


def _unresolved(table: pa.Table, bands: ErrorBands) -> dict[str, str]:
    """The orderings of ``table``'s analysis that ``bands`` leave unresolved (moesim.analysis.confidence),
    each with its closest pair's margin and band."""
    from moesim.analysis.confidence import orderings
    from moesim.analysis.study import analyse

    return {o.statistic: f"{100 * o.pairs[0].margin:.1f} % apart, band {100 * o.pairs[0].band:.1f} %"
            for o in orderings(analyse(table, with_architecture=False), bands) if not o.resolved}


def _counts(agreement: StatisticsAgreement, flagged: set[str] | dict[str, str]) -> tuple[int, int, int, list[str]]:
    """(orderings, flagged, contradicted by packet, the contradicted ones not flagged)."""
    rows = agreement.orderings.to_pylist()
    differ = [r["statistic"] for r in rows if not r["same"]]
    missed = [s for s in differ if s not in flagged]
    return len(rows), sum(r["statistic"] in flagged for r in rows), len(differ), missed


def _counts_line(label: str, agreement: StatisticsAgreement, flagged: set[str] | dict[str, str]) -> str:
    n, k, d, missed = _counts(agreement, flagged)
    return (f"{label}: {k} of {n} orderings flagged unresolved; {d} contradicted by packet, "
            + ("every one flagged" if not missed else f"{len(missed)} not flagged: " + "; ".join(missed)))


def _config(r: dict) -> tuple[str, str, str, str]:
    return (str(r["topology"]), str(r["strategy"]), str(r["algorithm"]), str(r["network"]))


def _halves(matrix_runs: list[dict], seed: int) -> set[tuple[str, str, str, str]]:
    """One half of the study's configurations, drawn family by family (each family split evenly, the odd
    one out alternating), reproducible from ``seed``."""
    rng = np.random.default_rng(seed)
    by_family: dict = {}
    for r in sorted(matrix_runs, key=_config):
        by_family.setdefault(r["family"], []).append(_config(r))
    half: set[tuple[str, str, str, str]] = set()
    for i, (_, configs) in enumerate(sorted(by_family.items())):
        order = rng.permutation(len(configs))
        half |= {configs[j] for j in order[:(len(configs) + i % 2) // 2]}
    return half


def _judge_study(references: list[Reference], agreement: StatisticsAgreement, backend: str, splits: int,
                 bands_file: str | None) -> bool:
    """Print each ordering's status under the shipped bands (in-sample) and under bands fit on half of the
    V4 Flash configurations and every other model's reference (cross-validated: each half of ``splits``
    random halvings judges the full study's orderings and the other half's own); True when an ordering packet
    contradicts is left unflagged."""
    from moesim.analysis.bands import load_bands
    from moesim.analysis.confidence import comparisons

    assert references[0].study is not None  # the V4 Flash matrix
    candidate, ref = references[0].study
    matrix_runs = references[0].runs
    inside = _unresolved(candidate, load_bands(bands_file))
    folds: list[tuple[str, dict[str, str], str]] = []
    for seed in range(1, splits + 1):
        half = _halves(matrix_runs, seed)
        for fold, inside_fit in ((1, True), (2, False)):
            def fitted(r: dict, h: set = half, want: bool = inside_fit) -> bool:
                return str(r["model"]) != MODEL or (_config(r) in h) == want

            bands = ErrorBands("packet", {backend: _fit(backend, references, fitted)})
            cand, packet = (t.filter(pa.array([not fitted(r) for r in t.to_pylist()])) for t in (candidate, ref))
            folds.append((f"split {seed} fold {fold}", _unresolved(candidate, bands),
                          _counts_line("held-out half's own orderings", statistics_agreement(cand, packet),
                                       _unresolved(cand, bands))))
    shipped = bands_file or BANDS_FILE
    print(f"\neach ordering: in-sample status ({shipped}), flagged in how many of {len(folds)} cross-validated "
          "fits, packet's verdict")
    for r in agreement.orderings.to_pylist():
        s = r["statistic"]
        cv = sum(s in f for _, f, _ in folds)
        print(f"  {'unresolved' if s in inside else 'resolved':<10} cv {cv}/{len(folds)}  "
              f"{'same' if r['same'] else 'CONTRADICTS':<11} {s}: {r['candidate']}"
              + (f"  ({inside[s]})" if s in inside else ""))
    print("\n" + _counts_line(f"in-sample ({shipped})", agreement, inside))
    print(f"cross-validated (bands fit on half the V4 Flash configurations of its two references and on the other "
          f"models' references, {splits} random halvings drawn family by family, each half in turn):")
    missed = bool(_counts(agreement, inside)[3])
    for label, flagged, held_line in folds:
        print("  " + _counts_line(f"{label}, the study's orderings", agreement, flagged))
        print("    " + held_line)
        missed |= bool(_counts(agreement, flagged)[3])
    worst = max(_counts(agreement, f)[1] for _, f, _ in folds)
    print(f"  most flagged in one fit: {worst} of {agreement.orderings.num_rows}")
    reach = {c.statistic for c in comparisons(candidate, ref, load_bands(bands_file))
             if abs(c.error) >= c.margin and (c.margin, c.error) != (0.0, 0.0)}
    n, k, d, beyond = _counts(agreement, reach)
    print(f"floor: {k} of {n} orderings compare two sides whose realised error reaches their margin (a rule that "
          f"judges the size of an error against the margin flags at least these); {d - len(beyond)} of the {d} "
          "contradicted are among them")
    return missed


# --- error bands --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Reference:
    """One stored packet reference against a candidate backend: the model it holds, its runs (the rows of a
    ``per_configuration`` table, each with its family) and, for a reference of study runs, the candidate's and
    packet's tables, on which the paired bands' ``mean_factor`` is calibrated and the orderings are judged."""

    name: str
    model: str
    runs: list[dict]
    study: tuple[pa.Table, pa.Table] | None


def reference_stores(folder: Path | None, backend: str) -> dict[str, Path | None]:
    """Where the candidate runs of each reference are kept under ``folder`` (None: temporary stores)."""
    return {k: folder / f"{backend}-{k}" if folder else None for k in ("matrix", "validation", "models")}


def load_references(backend: str, workers: int, stores: dict[str, Path | None]) -> list[Reference]:
    """Every stored packet reference, measured against ``backend`` (its runs read from ``stores``, run there
    first when missing): the V4 Flash matrix, the validation sets, and the other models' rows
    (``MODELS_PARQUET``), one reference per model."""
    from moesim.experiments import study_matrix

    matrix_ref, validation_ref = _reference(MATRIX_PARQUET), _reference(VALIDATION_PARQUET)
    matrix = _pick(_candidate(study_matrix().with_preset("flash").with_levels("backend", [backend]).runs(),
                              stores.get("matrix"), workers), "backend", {backend})
    tokens = tuple(int(t) for t in levels(validation_ref, "tokens"))
    validation = _candidate(validation_specs(backend, tokens), stores.get("validation"), workers)
    out = [Reference(MATRIX_PARQUET.name, MODEL, _runs(per_configuration(matrix, matrix_ref), backend),
                     (matrix, matrix_ref)),
           Reference(VALIDATION_PARQUET.name, MODEL, _runs(per_configuration(validation, validation_ref), backend),
                     None)]
    if MODELS_PARQUET.is_file():
        ref = _reference(MODELS_PARQUET)
        specs = [replace(row_spec(r), backend=backend) for r in ref.to_pylist()]
        cand = _pick(_candidate(specs, stores.get("models"), workers), "backend", {backend})
        for model in sorted(levels(ref, "model")):
            c, r = _pick(cand, "model", {model}), _pick(ref, "model", {model})
            out.append(Reference(f"{MODELS_PARQUET.name} ({model})", model, _runs(per_configuration(c, r), backend),
                                 (c, r)))
    return out


def _runs(table: pa.Table, backend: str) -> list[dict]:
    """The rows of a ``per_configuration`` table, each with its run's family."""
    return [{**r, "family": family_of(RunSpec(r["model"], r["topology"], r["strategy"], r["algorithm"], r["network"],
                                              backend))} for r in table.to_pylist()]


def _scales(runs: list[dict]) -> list[Errors]:
    """A reference's (family, error) pairs, one list per token count (pairs are formed within one)."""
    out: dict[str, list] = {}
    for r in runs:
        out.setdefault(str(r.get("tokens", "")), []).append((r["family"], r["error"]))
    return list(out.values())


def _fit(backend: str, references: list[Reference], keep: Callable[[dict], bool] = lambda r: True,
         cost: float | None = None) -> BackendBands:
    """One backend's per-run and paired bands from the runs of each reference that ``keep`` accepts, the
    paired bands' ``mean_factor`` calibrated on the kept rows of the references' studies, pooled."""
    from moesim.analysis.confidence import calibrate_studies

    kept = [[r for r in ref.runs if keep(r)] for ref in references]
    b = measure([[(r["family"], r["error"]) for r in runs] for runs in kept], cost)
    paired = measure_paired([_scales(runs) for runs in kept])
    studies = [tuple(t.filter(pa.array([keep(r) for r in t.to_pylist()])) for t in ref.study)
               for ref in references if ref.study is not None]
    factor = calibrate_studies([s for s in studies if s[0].num_rows],  # type: ignore[misc]
                               ErrorBands("packet", {backend: BackendBands(b.overall, paired=paired)}))
    return BackendBands(b.overall, b.families, cost, replace(paired, mean_factor=factor))


def _total(table: pa.Table, column: str) -> float:
    return float(sum(v for v in table.column(column).to_pylist() if v is not None))


def _commit() -> str:
    """The repository's commit, flagged when the source tree has uncommitted changes."""
    root = Path(__file__).resolve().parents[1]
    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, check=True)
        dirty = subprocess.run(["git", "status", "--porcelain", "src"], cwd=root, capture_output=True, text=True)
    except (OSError, subprocess.CalledProcessError):
        return "unknown (not a git checkout)"
    return head.stdout.strip() + (" with uncommitted changes under src/" if dirty.stdout.strip() else "")


def _reference_note(path: Path) -> dict:
    return {"file": f"benchmarks/reference/{path.name}", "runs": pq.read_metadata(path).num_rows,
            "sha256": hashlib.sha256(path.read_bytes()).hexdigest()}


def bands(backends: list[str], store: Path | None, workers: int, out: Path, keep_costs: bool = False) -> int:
    """Measure each backend against every stored packet reference (moesim.analysis.bands) and write the bands
    file.

    The V4 Flash matrix (4096 tokens), the validation sets (each configuration against the median of its
    packet seeds) and each other model's rows (``MODELS_PARQUET``) are measured apart and combined family by
    family, keeping the larger band, so a band holds at every scale and model that holds enough runs of it
    (``moesim.analysis.bands.measure``); the paired bands likewise, from pairs of runs of one reference at one
    token count (``measure_paired``), their ``mean_factor`` calibrated on the V4 Flash matrix's and each other
    model's orderings, pooled. The cost of each backend relative to packet is its simulation time over the
    packet matrix's."""
    measured = {}
    for backend in backends:
        references = load_references(backend, workers, reference_stores(store, backend))
        assert references[0].study is not None  # the V4 Flash matrix
        matrix, matrix_ref = references[0].study
        cost = _total(matrix, "sim_wallclock_s") / _total(matrix_ref, "sim_wallclock_s")
        if keep_costs and out.is_file() and (kept := parse_bands(out.read_text(encoding="utf-8"), str(out))
                                             .backends.get(backend)) is not None and kept.relative_cost is not None:
            cost = kept.relative_cost
        b = measured[backend] = _fit(backend, references, cost=cost)
        print(f"\n{backend}: band {100 * b.overall.band:.1f} % over {b.overall.runs} runs; simulation time "
              f"{cost:.3g} × packet's")
        for fam, fb in b.families.items():
            print(f"  {fam.label():<45} {100 * fb.band:6.1f} %  ({fb.runs} runs)")
        if b.paired is not None:
            print(f"  paired (log): one run {b.paired.single.band:.3f}, two runs {b.paired.pair.band:.3f} "
                  f"({b.paired.pair.runs} pairs), two means × {b.paired.mean_factor:.3f}; by pair of families:")
            for (fa, fb_), pb in b.paired.pairs.items():
                print(f"    {fa.label():<45} | {fb_.label():<45} {pb.band:.3f}  ({pb.runs} pairs)")
    provenance = {
        "moesim_version": __version__, "commit": _commit(), "source_sha256": code_hash(),
        "date": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d"),
        "command": repository_command(sys.argv[1:]),
        "references": [_reference_note(p) for p in (MATRIX_PARQUET, VALIDATION_PARQUET, MODELS_PARQUET) if p.is_file()],
    }
    atomic_write(out, bands_yaml(ErrorBands("packet", measured, provenance)))
    print(f"\nwrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
