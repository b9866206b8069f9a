"""The report's serving section: real serving results (a one-layer model on two hosts) in a real store."""

from __future__ import annotations

from importlib import resources

import numpy as np
import pytest
import yaml
from analysis_data import study_rows, write_store

from moesim.analysis.report import build_report
from moesim.analysis.serving import cdf_figure, curve_figure, headline, parts, serving_rows
from moesim.serving import Deployment, SchedulerConfig, Slo, StepCache, parse_length, poisson, serve
from moesim.serving.store import record_serving


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> list:
    """Three serving results of one deployment at three arrival rates."""
    root = tmp_path_factory.mktemp("served")
    data = yaml.safe_load((resources.files("moesim.models") / "data" / "deepseek-v4-flash.yaml").read_text())
    data.update(key="one-layer", num_layers=1, checkpoint_size_bytes=10**9)
    model = root / "one-layer.yaml"
    model.write_text(yaml.safe_dump(data))
    dep = Deployment(str(model), "star:2", "TP1EP2", backend="flow")
    out = []
    for rate in (100.0, 400.0, 1600.0):
        reqs = poisson(rate, 200, parse_length("uniform:16:300", "p", "prompt_tokens"),
                       parse_length("uniform:1:16", "o", "output_tokens"), 1)
        out.append(serve(dep, reqs, SchedulerConfig(token_budget=512, max_seqs=8), Slo(0.002, 0.0005),
                         cache=StepCache(root / "cache"), check_points=0))
    return out


def test_a_store_with_serving_results_only_gets_a_serving_report(results, tmp_path):
    store = tmp_path / "store"
    record_serving(store, [(r.record(), r.table) for r in results], command="moesim serve ...")
    files = build_report(store)
    page = files.html.read_text()
    assert '<section id="serving"><h2>Serving</h2>' in page and '<section id="provenance">' in page
    assert "moesim serve ..." in page
    assert {p.name for p in files.figures} == {"serving_latency_cdf.png", "serving_latency_cdf.svg",
                                               "serving_throughput_latency.png", "serving_throughput_latency.svg"}
    assert (store / "tables" / "serving.csv").read_text().count("\n") == 1 + len(results)


def test_the_section_joins_a_study_report_only_when_the_store_has_serving_results(results, tmp_path):
    rows = [r for r in study_rows(models=("deepseek-v4-flash",)) if r["topology"] in ("1", "2")]
    plain = write_store(tmp_path / "plain", rows)
    assert serving_rows(plain) is None and list(parts(plain)) == []
    both = write_store(tmp_path / "both", rows)
    record_serving(both, [(results[0].record(), results[0].table)])
    page = build_report(both).html.read_text()
    assert page.index('id="serving"') < page.index('id="runs"') and 'id="marginals"' in page


def test_the_figures_draw_what_the_rows_hold(results, tmp_path):
    store = tmp_path / "store"
    record_serving(store, [(r.record(), r.table) for r in results])
    rows = serving_rows(store)
    best = headline(rows)
    assert [r["goodput_per_gpu_rps"] for r in best] == sorted((r["goodput_per_gpu_rps"] for r in best), reverse=True)
    fig = cdf_figure(store, best)
    ttft_lines = fig.axes[0].get_lines()
    assert len(ttft_lines) == 3
    x, y = ttft_lines[0].get_data()
    assert y[-1] == 1.0 and np.all(np.diff(x) >= 0)  # a CDF, in ms: every request below its last step
    curves = curve_figure(rows)  # one deployment at three rates: one line of three points per panel
    (line,) = curves.axes[0].get_lines()
    throughput, p90 = line.get_data()
    assert list(throughput) == sorted(r.summary["throughput_rps"] for r in results)
    assert list(p90) == [r.summary["ttft_p90_s"] * 1e3 for r in sorted(results, key=lambda r: r.summary["throughput_rps"])]
