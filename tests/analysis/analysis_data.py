"""Synthetic results tables with a known multiplicative structure, and real result stores on disk.

wall = base[model] × f_topo[topology] × f_strat[strategy] × f_alg[model][algorithm] × f_net[network]
(f_net = 1 on topology 6, which has no external network); gpu = 0.02 × base × 2 / tp; comm = wall − gpu.
On a full grid the mean of a product of independent factors is the product of their means, which
gives every marginal in closed form.
"""

from __future__ import annotations

import datetime as dt
import itertools
from pathlib import Path

import duckdb
import pyarrow as pa

MODELS = ("kimi-k3", "glm-5.3", "deepseek-v4-pro", "deepseek-v4-flash")
BASE = {"kimi-k3": 1.0, "glm-5.3": 1.2, "deepseek-v4-pro": 1.3, "deepseek-v4-flash": 0.5}
F_TOPO = {"1": 1.25, "2": 1.5, "3": 2.5, "4": 2.0, "5": 1.75, "6": 1.0}
F_STRAT = {"TP2EP16": 1.0, "TP4EP8": 2.0, "TP8EP4": 3.0, "TP16EP2": 4.0}
F_ALG = {m: {"ring_direct": 1.0, "dbt_direct": 1.5} for m in MODELS}
F_ALG["deepseek-v4-pro"] = {"ring_direct": 1.0, "dbt_direct": 1.25}  # glm beats pro under ring, loses under dbt
F_NET = {"ib_cc0": 1.0, "ib_hpcc": 1.125, "roce_hpcc": 1.25, "roce_dcqcn": 1.5}
TP = {"TP2EP16": 2, "TP4EP8": 4, "TP8EP4": 8, "TP16EP2": 16}


def wall(model: str, topo: str, strat: str, alg: str, net: str) -> float:
    fn = 1.0 if topo == "6" else F_NET[net]
    return BASE[model] * F_TOPO[topo] * F_STRAT[strat] * F_ALG[model][alg] * fn


def gpu(model: str, strat: str) -> float:
    return 0.02 * BASE[model] * 2 / TP[strat]


def study_rows(models=MODELS) -> list[dict]:
    rows = []
    for m, topo, strat, alg, net in itertools.product(models, F_TOPO, F_STRAT, ("ring_direct", "dbt_direct"), F_NET):
        w, g = wall(m, topo, strat, alg, net), gpu(m, strat)
        rows.append({"model": m, "topology": topo, "strategy": strat, "tp": TP[strat], "ep": 32 // TP[strat],
                     "algorithm": alg, "network": net, "backend": "fluid", "wall_s": w, "gpu_s": g, "comm_s": w - g,
                     "bottleneck_rank": 0, "status": "ok", "error": None, "version": "test", "params_json": "{}",
                     "input_hash": f"h{len(rows)}", "diagnostics_path": None, "spec_key": f"k{len(rows)}",
                     "overrides_json": "{}", "cc_model": "none", "cc_policy": "", "sim_wallclock_s": 1.0,
                     "run_id": f"{len(rows):064x}", "finished_at": dt.datetime(2026, 3, 1, 9, 30)})
    return rows


def write_store(directory: Path, rows: list[dict]) -> Path:
    """A real DuckDB results store with a ``runs`` table, as the experiments layer writes it."""
    directory.mkdir(parents=True, exist_ok=True)
    table = pa.Table.from_pylist(rows)
    con = duckdb.connect(str(directory / "results.duckdb"))
    con.register("t", table)
    con.execute("CREATE TABLE runs AS SELECT * FROM t")
    con.close()
    return directory


# A small table whose statistics are computed by hand in the tests (model A; B = 2 × A except where noted).
SMALL_A = {  # (topology, strategy, network) -> (wall_s, gpu_s)
    ("1", "TP2EP16", "ib_cc0"): (2.0, 1.0), ("1", "TP2EP16", "roce_dcqcn"): (4.0, 1.0),
    ("1", "TP4EP8", "ib_cc0"): (6.0, 2.0), ("1", "TP4EP8", "roce_dcqcn"): (8.0, 2.0),
    ("6", "TP2EP16", "ib_cc0"): (1.0, 0.5), ("6", "TP2EP16", "roce_dcqcn"): (1.0, 0.5),
    ("6", "TP4EP8", "ib_cc0"): (3.0, 1.0), ("6", "TP4EP8", "roce_dcqcn"): (3.0, 1.0),
}
SMALL_B_WALL = {("1", "TP4EP8", "roce_dcqcn"): 7.0, ("6", "TP2EP16", "ib_cc0"): 1.0, ("6", "TP2EP16", "roce_dcqcn"): 1.0}


def small_rows(extra_unmatched: bool = True) -> list[dict]:
    rows = []
    for (topo, strat, net), (w, g) in SMALL_A.items():
        for model, wall in (("A", w), ("B", SMALL_B_WALL.get((topo, strat, net), 2 * w))):
            rows.append({"model": model, "topology": topo, "strategy": strat, "network": net, "wall_s": wall,
                         "gpu_s": g, "comm_s": wall - g, "status": "ok"})
    if extra_unmatched:  # a configuration only B ran, and a failed run: neither may count in the matched analysis
        rows.append({"model": "B", "topology": "2", "strategy": "TP2EP16", "network": "ib_cc0", "wall_s": 100.0,
                     "gpu_s": 1.0, "comm_s": 99.0, "status": "ok"})
        rows.append({"model": "A", "topology": "2", "strategy": "TP2EP16", "network": "ib_cc0", "wall_s": None,
                     "gpu_s": None, "comm_s": None, "status": "error"})
    return rows
