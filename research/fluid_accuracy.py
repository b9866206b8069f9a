"""Accuracy of the fluid backend (or another, ``--backend``) against the packet backend
(research/fluid-accuracy.md).

The validation set is a fixed, deterministic list of study configurations (V4 Flash): twelve
(topology, strategy) cells — every topology twice, every strategy three times — each with four runs:
ring/roce_hpcc, ring/roce_dcqcn, dbt/roce_hpcc and one no-CC or IB run (ib_cc0 / ib_hpcc,
alternating, on ring or dbt). That gives per-configuration wall-time errors plus the DCQCN/HPCC ratio
(ring, RoCE) and the DBT/Ring ratio (roce_hpcc) per cell.

    python research/fluid_accuracy.py --tokens 256   # 48 configurations (doc table)
    python research/fluid_accuracy.py --quick    # 4 configurations, tokens=256 (CI)
    python research/fluid_accuracy.py --tokens 256 --set fluid_marks=random   # a fluid variant
    python research/fluid_accuracy.py --tokens 256 --jitter-seeds 3 --workers 2   # medians over 10 ns jitter
    python research/fluid_accuracy.py --tokens 256 --backend flow   # the flow backend on the same set
    python research/fluid_accuracy.py --list research/study_scale_set.txt --tokens 4096   # at study scale

Prints the table and the median / worst relative wall-time error; exits 1 when the median exceeds
--median-target (3 %).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

from moesim.commands.run import parse_set
from moesim.system.run import simulate_run
from moesim.system.spec import RunSpec

MODEL = "deepseek-v4-flash"
CELLS = (("1", "TP2EP16"), ("2", "TP4EP8"), ("3", "TP8EP4"), ("4", "TP16EP2"), ("5", "TP2EP16"), ("6", "TP4EP8"),
         ("1", "TP8EP4"), ("2", "TP16EP2"), ("3", "TP2EP16"), ("4", "TP4EP8"), ("5", "TP8EP4"), ("6", "TP16EP2"))
QUICK = (("3", "TP16EP2", "ring_direct", "roce_dcqcn"), ("3", "TP16EP2", "ring_direct", "roce_hpcc"),
         ("1", "TP2EP16", "dbt_direct", "ib_cc0"), ("6", "TP8EP4", "ring_direct", "ib_hpcc"))


def validation_set(n: int) -> list[tuple[str, str, str, str]]:
    """The first ``n`` configurations of the fixed validation list (topology, strategy, algorithm, mode)."""
    out = []
    for i, (topo, strat) in enumerate(CELLS):
        extra_alg = "ring_direct" if i % 2 == 0 else "dbt_direct"
        extra_net = "ib_cc0" if (i // 2) % 2 == 0 else "ib_hpcc"
        out += [(topo, strat, "ring_direct", "roce_hpcc"), (topo, strat, "ring_direct", "roce_dcqcn"),
                (topo, strat, "dbt_direct", "roce_hpcc"), (topo, strat, extra_alg, extra_net)]
    return out[:n]


def read_list(path: Path) -> list[tuple[str, str, str, str]]:
    """Configurations from a file, one ``topology strategy algorithm mode`` per line (``#`` comments)."""
    try:
        text = path.read_text()
    except OSError as e:
        raise SystemExit(f"{path}: {e.strerror}") from None
    out = []
    for n, line in enumerate(text.splitlines(), 1):
        words = line.split("#")[0].split()
        if words and len(words) != 4:
            raise SystemExit(f"{path}:{n}: expected 'topology strategy algorithm mode', got {line.strip()!r}")
        if words:
            out.append((words[0], words[1], words[2], words[3]))
    return out


def run_pair(cfg: tuple[str, str, str, str], tokens: int, cache: dict[str, float],
             overrides: tuple[tuple[str, Any], ...] = (), jitter_seeds: int = 0,
             jitter_s: float = 1e-8, candidate: str = "fluid") -> dict[str, float]:
    """Packet and ``candidate`` (key ``cand``) wall times of one configuration; packet results may come
    from ``cache``; ``overrides`` apply to the candidate run only (the packet run is the reference). With
    ``jitter_seeds`` N, each backend's wall time is the median over ranks started with ``start_jitter_s``
    = ``jitter_s`` and seeds 1..N, and ``*_lo`` / ``*_hi`` hold the smallest and largest of them."""
    topo, strat, alg, net = cfg
    res = {}
    for backend, name in (("packet", "packet"), (candidate, "cand")):
        walls, cpu_s = [], 0.0
        for seed in range(1, jitter_seeds + 1) if jitter_seeds else (0,):
            jitter = (("jitter_seed", seed), ("start_jitter_s", jitter_s)) if seed else ()
            key = f"{topo}/{strat}/{alg}/{net}/{tokens}" + (f"/jitter{jitter_s:g}/seed{seed}" if seed else "")
            if backend == "packet" and key in cache:
                walls.append(cache[key])
                continue
            t0 = time.perf_counter()
            extra = (overrides if name == "cand" else ()) + jitter
            r = simulate_run(RunSpec(MODEL, topo, strat, alg, net, backend, tuple(sorted((("tokens", tokens),) + extra))))
            walls.append(r.wall_s)
            cpu_s += time.perf_counter() - t0
            if backend == "packet":
                cache[key] = r.wall_s
        res[name], res[name + "_lo"], res[name + "_hi"] = statistics.median(walls), min(walls), max(walls)
        res[name + "_cpu_s"] = cpu_s
    return res


def _pair_job(cfg: tuple[str, str, str, str], tokens: int, cache: dict[str, float],
              *rest: Any) -> tuple[dict[str, float], dict[str, float]]:
    """``run_pair`` in a worker process: its results and the packet wall times it added to the cache."""
    local = dict(cache)
    res = run_pair(cfg, tokens, local, *rest)
    return res, {k: v for k, v in local.items() if k not in cache}


def _ratio_errors(results: dict[tuple[str, str, str, str], dict[str, float]], num: tuple[str, str],
                  den: tuple[str, str]) -> list[tuple[str, float, float, float]]:
    """Per (topology, strategy): (label, packet ratio, candidate ratio, relative error) of num/den runs."""
    out = []
    for (topo, strat, alg, net), r in results.items():
        if (alg, net) != num:
            continue
        d = results.get((topo, strat) + den)
        if d is None:
            continue
        pr, fr = r["packet"] / d["packet"], r["cand"] / d["cand"]
        out.append((f"{topo}/{strat}", pr, fr, fr / pr - 1.0))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--configs", type=int, default=48, help="how many configurations of the validation list")
    ap.add_argument("--start", type=int, default=0, help="skip the first configurations (run a slice)")
    ap.add_argument("--quick", action="store_true", help="the 4-configuration CI set at tokens=256")
    ap.add_argument("--list", type=Path, default=None,
                    help="configurations from a file instead (one 'topology strategy algorithm mode' per line)")
    ap.add_argument("--tokens", type=int, default=None, help="tokens override (default 1024, quick 256)")
    ap.add_argument("--packet-cache", type=Path, default=None,
                    help="JSON file of packet wall times (read, and updated atomically): the packet backend is slow")
    ap.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                    help="parameter override for the compared backend's runs only, e.g. fluid_marks=random (repeatable)")
    ap.add_argument("--backend", default="fluid", help="the backend compared with packet (default fluid)")
    ap.add_argument("--jitter-seeds", type=int, default=0,
                    help="compare medians over ranks started up to --jitter-s apart, seeds 1..N (default: no jitter)")
    ap.add_argument("--jitter-s", type=float, default=1e-8)
    ap.add_argument("--workers", type=int, default=1, help="configurations run in parallel processes")
    ap.add_argument("--median-target", type=float, default=0.03)
    ap.add_argument("--worst-target", type=float, default=0.10)
    args = ap.parse_args(argv)
    overrides = parse_set(args.overrides)
    listed = read_list(args.list) if args.list else validation_set(args.configs)
    cfgs = list(QUICK) if args.quick else listed[args.start:]
    tokens = args.tokens or (256 if args.quick else 1024)
    cache = json.loads(args.packet_cache.read_text()) if args.packet_cache and args.packet_cache.exists() else {}
    results = {}
    print(f"{'topo':>4} {'strategy':>8} {'algorithm':>11} {'mode':>10} {'packet s':>10} {args.backend + ' s':>10} "
          f"{'err':>8} {'pkt cpu':>8} {'fl cpu':>7}")
    job = (overrides, args.jitter_seeds, args.jitter_s, args.backend)
    pool = ProcessPoolExecutor(args.workers) if args.workers > 1 else None
    pending = [pool.submit(_pair_job, cfg, tokens, cache, *job) for cfg in cfgs] if pool else []
    for i, cfg in enumerate(cfgs):
        if pool:
            r, added = pending[i].result()
            cache.update(added)
        else:
            r = run_pair(cfg, tokens, cache, *job)
        results[cfg] = r
        if args.packet_cache:
            tmp = args.packet_cache.with_suffix(".tmp")
            tmp.write_text(json.dumps(cache, indent=1, sort_keys=True))
            os.replace(tmp, args.packet_cache)
        err = r["cand"] / r["packet"] - 1.0
        print(f"{cfg[0]:>4} {cfg[1]:>8} {cfg[2]:>11} {cfg[3]:>10} {r['packet']:10.5f} {r['cand']:10.5f} "
              f"{err:+8.2%} {r['packet_cpu_s']:8.1f} {r['cand_cpu_s']:7.1f}"
              + (f"   packet {r['packet_lo']:.5f}-{r['packet_hi']:.5f}, {args.backend} {r['cand_lo']:.5f}-{r['cand_hi']:.5f}"
                 if args.jitter_seeds else ""), flush=True)
    if pool:
        pool.shutdown()
    errs = [abs(r["cand"] / r["packet"] - 1.0) for r in results.values()]
    for title, num, den in (("DCQCN/HPCC (ring, RoCE)", ("ring_direct", "roce_dcqcn"), ("ring_direct", "roce_hpcc")),
                            ("DBT/Ring (roce_hpcc)", ("dbt_direct", "roce_hpcc"), ("ring_direct", "roce_hpcc"))):
        rows = _ratio_errors(results, num, den)
        if rows:
            print(f"\n{title}: cell, packet ratio, {args.backend} ratio, error")
            for label, pr, fr, e in rows:
                print(f"  {label:>12} {pr:8.4f} {fr:8.4f} {e:+8.2%}")
            print(f"  median |error| {statistics.median(abs(x[3]) for x in rows):.2%}, "
                  f"worst {max(abs(x[3]) for x in rows):.2%}")
    med, worst = statistics.median(errs), max(errs)
    print(f"\nwall time, {len(errs)} configurations (tokens={tokens}): median |error| {med:.2%}, worst {worst:.2%} "
          f"(targets {args.median_target:.0%} / {args.worst_target:.0%}); "
          f"{sum(e > args.worst_target for e in errs)} above {args.worst_target:.0%}")
    if args.jitter_seeds:
        inside = sum(r["packet_lo"] <= r["cand"] <= r["packet_hi"] for r in results.values())
        print(f"medians over {args.jitter_seeds} seeds of {args.jitter_s:g} s start jitter; the {args.backend} median lies "
              f"within the packet runs' range in {inside} of {len(results)}")
    print(f"CPU: packet {sum(r['packet_cpu_s'] for r in results.values()):.0f} s, "
          f"{args.backend} {sum(r['cand_cpu_s'] for r in results.values()):.0f} s")
    if med > args.median_target:
        print("FAIL: median wall-time error above target")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
