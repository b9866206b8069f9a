"""Architecture comparison and communication proxies of the models (docs/study.md §2).

TP proxy = h × layers, EP proxy = h × top-k × MoE layers. Each parameter is also shown divided by
its largest value over the compared models, so models of very different size fit one figure.
"""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa

from moesim.analysis.results import MODEL, levels
from moesim.analysis.stats import group_means
from moesim.errors import MoesimError
from moesim.models.catalog import get_model
from moesim.models.spec import ModelSpec

ARCH_PARAMS = ("comm_dim", "num_layers", "moe_layers", "top_k", "routed_experts", "expert_ffn_width",
               "total_params", "tp_proxy", "ep_proxy")


def lookup_models(keys: Sequence[str]) -> tuple[list[ModelSpec], list[str]]:
    """ModelSpecs of ``keys`` from the built-in catalog, and the keys it does not know."""
    found, missing = [], []
    for k in keys:
        try:
            found.append(get_model(k))
        except MoesimError:  # unknown key: a user model the catalog does not hold
            missing.append(k)
    return found, missing


def _value(spec: ModelSpec, param: str) -> float:
    v = getattr(spec, param)
    return float("nan") if v is None else float(v)


def architecture(specs: Sequence[ModelSpec]) -> pa.Table:
    """Long table: parameter, model, value, normalized (value / max over models of that parameter)."""
    rows = []
    for p in ARCH_PARAMS:
        vals = [_value(s, p) for s in specs]
        finite = [v for v in vals if v == v]
        top = max(finite) if finite else float("nan")
        for s, v in zip(specs, vals, strict=True):
            rows.append({"parameter": p, MODEL: s.key, "value": v, "normalized": v / top if top else float("nan")})
    schema = pa.schema([("parameter", pa.string()), (MODEL, pa.string()), ("value", pa.float64()),
                        ("normalized", pa.float64())])
    return pa.Table.from_pylist(rows, schema=schema)


def comm_proxies(specs: Sequence[ModelSpec], table: pa.Table | None = None) -> pa.Table:
    """Per model: h, layers, MoE layers, top-k, both proxies and, with results, mean comm time.

    Proxies and comm time are also given relative to the largest model value (``*_rel``), so one can
    read off whether the proxies order the models as the measured communication does.
    """
    comm = {}
    if table is not None and table.num_rows:
        comm = {r[MODEL]: r["comm_s"] for r in group_means(table, (MODEL,), ("comm_s",)).to_pylist()}
    order = {k: i for i, k in enumerate(levels(table, MODEL))} if table is not None and table.num_rows else {}
    specs = sorted(specs, key=lambda s: order.get(s.key, len(order)))
    rows = [{MODEL: s.key, "comm_dim": s.comm_dim, "num_layers": s.num_layers, "moe_layers": s.moe_layers,
             "top_k": s.top_k, "tp_proxy": s.tp_proxy, "ep_proxy": s.ep_proxy,
             "comm_mean_s": comm.get(s.key, float("nan"))} for s in specs]
    for col, rel in (("tp_proxy", "tp_proxy_rel"), ("ep_proxy", "ep_proxy_rel"), ("comm_mean_s", "comm_mean_rel")):
        vals = [r[col] for r in rows if r[col] == r[col]]
        top = max(vals) if vals else float("nan")
        for r in rows:
            r[rel] = r[col] / top if top else float("nan")
    return pa.Table.from_pylist(rows)
