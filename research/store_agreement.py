"""How closely two sweep stores agree, run by run: e.g. the fluid backend against the packet backend on the
study itself (tokens=4096), where ``fluid_accuracy.py`` keeps the packet runs affordable with fewer tokens.

    moesim sweep study --models deepseek-v4-flash --backend packet --out P   # the reference (about 1.5 h)
    moesim sweep study --models deepseek-v4-flash --backend fluid --out F
    python research/store_agreement.py P F

Runs are matched on model, topology, strategy, algorithm, network mode and overrides (except the fluid
backend's own ``fluid_*`` parameters, which choose a model variant, not a configuration). Prints the median
and worst relative wall-time error of the second store against the first, the same per network mode,
the DCQCN/HPCC (ring, RoCE) and DBT/Ring (roce_hpcc) ratio errors, the worst runs, and CPU time.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

import duckdb

KEY = ("model", "topology", "strategy", "algorithm", "network", "overrides_json")


def load(store: Path) -> dict[tuple[str, ...], tuple[float, float]]:
    """(key columns) -> (wall_s, sim_wallclock_s) of every successful run of a store directory."""
    db = store / "results.duckdb"
    if not db.exists():
        raise SystemExit(f"{db}: no results store here (expected the --out directory of a sweep)")
    con = duckdb.connect(str(db), read_only=True)
    try:
        rows = con.execute(f"select {', '.join(KEY)}, wall_s, sim_wallclock_s from runs where status = 'ok'").fetchall()
    finally:
        con.close()
    return {tuple(r[:len(KEY) - 1]) + (_configuration(r[len(KEY) - 1]),): (float(r[-2]), float(r[-1] or 0.0))
            for r in rows}


def _configuration(overrides_json: str | None) -> str:
    """The overrides that define the configuration: all but the fluid backend's ``fluid_*`` variants."""
    overrides = json.loads(overrides_json or "{}")
    return json.dumps({k: v for k, v in sorted(overrides.items()) if not k.startswith("fluid_")})


def _ratio_errors(ref: dict, new: dict, num: tuple[str, str], den: tuple[str, str]) -> list[float]:
    out = []
    for key in ref:
        if (key[3], key[4]) != num or key not in new:
            continue
        other = key[:3] + den + key[5:]
        if other in ref and other in new:
            out.append((new[key][0] / new[other][0]) / (ref[key][0] / ref[other][0]) - 1.0)
    return out


def _summary(errs: list[float]) -> str:
    a = [abs(e) for e in errs]
    return f"median |error| {statistics.median(a):.2%}, worst {max(a):.2%} ({len(a)} runs)"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("reference", type=Path, help="sweep directory taken as the truth (e.g. packet)")
    ap.add_argument("candidate", type=Path, help="sweep directory to check (e.g. fluid)")
    ap.add_argument("--worst", type=int, default=15, help="how many of the worst runs to list")
    args = ap.parse_args(argv)
    ref, new = load(args.reference), load(args.candidate)
    common = sorted(set(ref) & set(new))
    if not common:
        print("no run in common")
        return 1
    err = {k: new[k][0] / ref[k][0] - 1.0 for k in common}
    print(f"wall time, {args.candidate} against {args.reference}: {_summary(list(err.values()))}")
    for mode in sorted({k[4] for k in common}):
        print(f"  {mode:>10}: {_summary([e for k, e in err.items() if k[4] == mode])}")
    for title, num, den in (("DCQCN/HPCC (ring, RoCE)", ("ring_direct", "roce_dcqcn"), ("ring_direct", "roce_hpcc")),
                            ("DBT/Ring (roce_hpcc)", ("dbt_direct", "roce_hpcc"), ("ring_direct", "roce_hpcc"))):
        ratios = _ratio_errors(ref, new, num, den)
        if ratios:
            print(f"{title} ratio: {_summary(ratios)}")
    print(f"\nworst {args.worst}: model topology strategy algorithm mode, reference s, candidate s, error")
    for k in sorted(common, key=lambda k: -abs(err[k]))[:args.worst]:
        print(f"  {k[0]} {k[1]} {k[2]:>8} {k[3]:>11} {k[4]:>10} {ref[k][0]:9.4f} {new[k][0]:9.4f} {err[k]:+8.2%}")
    cpu_ref, cpu_new = (sorted(s[k][1] for k in common) for s in (ref, new))
    print(f"\nCPU per run (s): reference median {statistics.median(cpu_ref):.1f}, max {cpu_ref[-1]:.1f}, "
          f"total {sum(cpu_ref):.0f}; candidate median {statistics.median(cpu_new):.1f}, max {cpu_new[-1]:.1f}, "
          f"total {sum(cpu_new):.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
