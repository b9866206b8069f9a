"""Communication proxies and the normalised architecture comparison (docs/study.md §2)."""

from __future__ import annotations

import pytest

from moesim.analysis.architecture import architecture, comm_proxies, lookup_models
from moesim.analysis.stats import group_means

# docs/study.md §2: (h, layers, leading dense layers, top-k)
STUDY = {"kimi-k3": (3584, 93, 1, 16), "glm-5.3": (6144, 78, 3, 8), "deepseek-v4-pro": (7168, 61, 0, 6),
         "deepseek-v4-flash": (4096, 43, 0, 6)}


def test_lookup_reports_unknown_models():
    specs, missing = lookup_models(["kimi-k3", "my-own-model"])
    assert [s.key for s in specs] == ["kimi-k3"] and missing == ["my-own-model"]


def test_proxies_closed_form(study_table):
    specs, missing = lookup_models(list(STUDY))
    assert not missing
    p = {r["model"]: r for r in comm_proxies(specs, study_table).to_pylist()}
    tp = {k: h * n for k, (h, n, d, k_) in STUDY.items()}
    ep = {k: h * k_ * (n - d) for k, (h, n, d, k_) in STUDY.items()}
    comm = {r["model"]: r["comm_s"] for r in group_means(study_table, ("model",), ("comm_s",)).to_pylist()}
    for k in STUDY:
        assert p[k]["tp_proxy"] == tp[k] and p[k]["ep_proxy"] == ep[k]
        assert p[k]["tp_proxy_rel"] == pytest.approx(tp[k] / max(tp.values()))
        assert p[k]["ep_proxy_rel"] == pytest.approx(ep[k] / max(ep.values()))
        assert p[k]["comm_mean_rel"] == pytest.approx(comm[k] / max(comm.values()))
    assert list(p) == list(STUDY)  # study order


def test_architecture_normalised_to_largest():
    specs, _ = lookup_models(list(STUDY))
    rows = architecture(specs).to_pylist()
    topk = {r["model"]: r["normalized"] for r in rows if r["parameter"] == "top_k"}
    assert topk == pytest.approx({"kimi-k3": 1.0, "glm-5.3": 0.5, "deepseek-v4-pro": 6 / 16, "deepseek-v4-flash": 6 / 16})
    h = {r["model"]: r["value"] for r in rows if r["parameter"] == "comm_dim"}
    assert h == {k: v[0] for k, v in STUDY.items()}
    assert max(r["normalized"] for r in rows if r["parameter"] == "ep_proxy") == 1.0
