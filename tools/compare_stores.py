"""Check that two results stores hold bit-identical results, run by run (for refactors that must not
change behaviour).

    moesim sweep study --backend fluid --out A          # before
    moesim sweep study --backend fluid --out B          # after
    python tools/compare_stores.py A B [--models deepseek-v4-flash] [--common]

Runs are matched on model, topology, strategy, algorithm, network, backend and overrides; wall_s, gpu_s,
comm_s and bottleneck_rank must be equal as floats (not close). Prints the count of matched runs and
every difference; exits 1 when a run differs or is missing from either store (``--common``: compares the
runs in both, e.g. a store still being filled, and counts the others without failing).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import duckdb

KEY = ("model", "topology", "strategy", "algorithm", "network", "backend", "overrides_json")
VALUES = ("wall_s", "gpu_s", "comm_s", "bottleneck_rank")


def load(store: Path, models: list[str] | None) -> dict[tuple, tuple]:
    db = store / "results.duckdb"
    if not db.is_file():
        raise SystemExit(f"{db}: no results store here")
    con = duckdb.connect(str(db), read_only=True)
    try:
        rows = con.execute(f"select {', '.join(KEY + VALUES)} from runs where status = 'ok'").fetchall()
    finally:
        con.close()
    return {tuple(r[:len(KEY)]): tuple(r[len(KEY):]) for r in rows if not models or r[0] in models}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("a", type=Path)
    ap.add_argument("b", type=Path)
    ap.add_argument("--models", help="compare only these models (comma-separated)")
    ap.add_argument("--common", action="store_true", help="compare only the runs in both stores")
    args = ap.parse_args()
    models = args.models.split(",") if args.models else None
    a, b = load(args.a, models), load(args.b, models)
    bad = 0
    for key in sorted(set(a) | set(b)):
        if args.common and (key not in a or key not in b):
            continue
        if key not in a or key not in b:
            print(f"only in {'A' if key in a else 'B'}: {'/'.join(map(str, key))}")
            bad += 1
        elif a[key] != b[key]:
            print(f"differs: {'/'.join(map(str, key))}: {a[key]} != {b[key]}")
            bad += 1
    left = len(set(a) ^ set(b)) if args.common else 0
    print(f"{len(set(a) & set(b))} runs in both, {bad} differ or are missing"
          + (f" ({left} runs in only one store not compared)" if left else ""))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
