"""The steady-state window: throughput, achieved arrival rate and goodput over it, and whether a run sustains
its arrival rate (docs/serving.md, "Metrics")."""

from __future__ import annotations

import json

import numpy as np
import pytest
from cli_fuzz import run_cli
from serve_helpers import TRACE, column, one_replica, requests

from moesim.serving import Slo, StepCache, parse_length, poisson, read_trace, serve
from moesim.serving.metrics import MIN_WINDOW_REQUESTS, WARMUP_FRACTION


def test_evenly_spaced_lone_requests_are_served_at_their_arrival_rate(tiny_model, cache_dir, small_config):
    """Requests 0.5 s apart, each done long before the next: the window runs from arrival ⌊0.2·n⌋ to the
    last, every arrival in it but the last has finished by its end, so throughput = arrival rate = 2/s."""
    n, gap = 60, 0.5
    res = serve(one_replica(tiny_model), requests(np.arange(n) * gap, 64, 4), small_config, Slo(ttft_s=10.0),
                cache=StepCache(cache_dir), check_points=0)
    s = res.summary
    k = int(WARMUP_FRACTION * n)
    assert (s["window_start_s"], s["window_end_s"], s["window_requests"]) == (k * gap, (n - 1) * gap, n - 1 - k)
    assert s["achieved_rate_rps"] == pytest.approx(1 / gap) and s["throughput_rps"] == pytest.approx(1 / gap)
    assert s["goodput_rps"] == pytest.approx(1 / gap) and s["window_attainment"] == 1.0
    assert s["sustained"] and abs(s["ttft_growth"]) < 1e-6


def test_a_burst_beyond_capacity_is_not_sustained(tiny_model, cache_dir, small_config):
    """300 requests arriving within 3 ms queue up: completions in the window lag arrivals far behind, the
    wait grows, and the run is flagged instead of reported as a capacity."""
    res = serve(one_replica(tiny_model), requests(np.linspace(0, 3e-3, 300), 1000, 16), small_config,
                Slo(ttft_s=1.0), cache=StepCache(cache_dir), check_points=0)
    s = res.summary
    assert not s["sustained"]
    assert s["throughput_rps"] is None or s["throughput_rps"] < 0.5 * s["achieved_rate_rps"]


def test_too_few_requests_are_never_sustained(tiny_model, cache_dir, small_config):
    n = MIN_WINDOW_REQUESTS  # the window holds n − 1 − ⌊0.2·n⌋ < MIN_WINDOW_REQUESTS arrivals
    res = serve(one_replica(tiny_model), requests(np.arange(n) * 1.0, 64, 4), small_config, Slo(ttft_s=10.0),
                cache=StepCache(cache_dir), check_points=0)
    assert res.summary["throughput_rps"] == pytest.approx(1.0) and not res.summary["sustained"]


@pytest.mark.parametrize("case,slo", [("trace", Slo(0.01, 0.001)), ("poisson overload", Slo(0.2, 0.002))])
def test_goodput_is_the_slo_meeting_completions_in_the_window_and_never_exceeds_throughput(tiny_model, cache_dir,
                                                                                          small_config, case, slo):
    """On a trace replayed 10 times as fast and on Poisson arrivals above capacity (where goodput as
    rate × attainment exceeded throughput), goodput counts completions within the SLO in the window."""
    if case == "trace":
        reqs = read_trace(TRACE).scaled(10.0)
    else:
        reqs = poisson(3000.0, 400, parse_length("uniform:16:1500", "p", "prompt_tokens"),
                       parse_length("uniform:1:64", "o", "output_tokens"), 2)
    res = serve(one_replica(tiny_model), reqs, small_config, slo, cache=StepCache(cache_dir),
                check_points=0)
    s = res.summary
    finish, met = column(res, "finish_s"), column(res, "slo_met")
    length = s["window_end_s"] - s["window_start_s"]
    done = (finish > s["window_start_s"]) & (finish <= s["window_end_s"])
    assert s["throughput_rps"] == pytest.approx(done.sum() / length)
    assert s["goodput_rps"] == pytest.approx((done & met).sum() / length)
    assert 0 < s["goodput_rps"] <= s["throughput_rps"]
    if case == "poisson overload":
        assert not s["sustained"] and s["offered_rate_rps"] * s["slo_attainment"] > s["throughput_rps"]


def test_serve_prints_throughput_arrival_rate_and_goodput_and_flags_an_unsustained_rate(tiny_model, cache_dir):
    args = ["serve", "--model", tiny_model, "--topology", "star:2", "--strategy", "TP1EP2", "--backend", "flow",
            "--cache", str(cache_dir), "--token-budget", "1024", "--max-seqs", "8", "--prompt", "uniform:16:500",
            "--output", "fixed:8", "--slo-ttft", "1s", "--requests", "200", "--check-points", "0", "--quiet"]
    code, calm, err = run_cli(*args, "--rate", "20")
    assert code == 0, err
    line = next(ln for ln in calm.splitlines() if "steady-state window" in ln)
    assert "arrival rate" in line and "throughput" in line and "warning" not in calm
    assert "goodput" in calm
    code, flooded, err = run_cli(*args, "--rate", "1e6")
    assert code == 0, err
    assert "warning: not a steady state" in flooded and "does not sustain this rate" in flooded
    code, out, err = run_cli(*args, "--rate", "1e6", "--json")
    record = json.loads(out)
    assert record["sustained"] is False and record["goodput_rps"] <= record["throughput_rps"]
    assert {"achieved_rate_rps", "throughput_rps", "goodput_rps", "window_start_s"} <= set(record)

