"""`serve search`: candidates, the capacity bracket, the ranking by goodput per GPU."""

from __future__ import annotations

import numpy as np
import pytest

from moesim.errors import MoesimError
from moesim.serving import SchedulerConfig, SearchSpace, Slo, StepCache, parse_length, poisson, search, serve
from moesim.serving.metrics import SUSTAIN_TOLERANCE
from moesim.serving.search import CONFIRM_BACKOFF, CONFIRM_BISECTIONS, CONFIRM_REPEATS, MAX_DOUBLINGS
from moesim.serving.simulate import Executor


def space(model: str, **kw) -> SearchSpace:
    return SearchSpace(model, "star:4", ("TP1EP2", "TP2EP2"), modes=("colocated", "disaggregated"), backend="flow", **kw)


def test_candidates_are_every_split_and_division_that_fits(tiny_model):
    found, skipped = space(tiny_model).candidates()
    labels = sorted(d.label() for d in found)
    assert labels == ["TP1EP2 colocated on star:4", "TP1EP2 prefill ×2 : TP1EP2 decode ×2 servers on star:4",
                      "TP2EP2 colocated on star:4"]
    assert any("does not divide" in s for s in skipped)
    more, _ = space(tiny_model, servers=(4, 8)).candidates()
    assert {d.topology for d in more} == {"star:4", "star:8"} and len(more) > len(found)


def test_each_candidates_capacity_is_bracketed_confirmed_and_the_best_comes_first(tiny_model, cache_dir):
    base = poisson(1.0, 300, parse_length("uniform:16:400", "p", "prompt_tokens"),
                   parse_length("uniform:1:32", "o", "output_tokens"), 4)
    iterations, target = 3, 0.9
    result = search(space(tiny_model), base, SchedulerConfig(token_budget=1024, max_seqs=8), Slo(0.004, 0.0008),
                    attainment=target, iterations=iterations, cache=StepCache(cache_dir), executor=Executor())
    per_gpu = [c.goodput_per_gpu_rps for c in result.candidates]
    assert per_gpu == sorted(per_gpu, reverse=True) and per_gpu[0] > 0
    for c in result.candidates:
        assert c.best is not None and c.best.passes(target) and not c.unbounded
        # the capacity is a confirmation: the requests CONFIRM_REPEATS times in a row, passing again
        assert c.best.confirmation and c.best.summary["requests"] == CONFIRM_REPEATS * len(base)
        short = [e for e in c.evaluations if not e.confirmation]
        passed = max(e.rate_rps for e in short if e.passes(target))
        above = min(e.rate_rps for e in short if not e.passes(target) and e.rate_rps > passed)
        # geometric bisection halves the bracket's log-width each step, from a factor of 2
        assert above / passed <= 2 ** (1 / 2 ** iterations) * (1 + 1e-12)
        # the confirmed rate is the bisection's; or, when the longer run fails there, the highest it passes, within
        # a CONFIRM_BACKOFF bracket bisected CONFIRM_BISECTIONS times; or, when the longer run passes at the lowest
        # failing rate above, that rate (the runs were too short)
        long_failed = [e.rate_rps for e in c.evaluations if e.confirmation and not e.passes(target)
                       and e.rate_rps <= passed]
        if c.conservative:
            assert c.best.rate_rps == above and not long_failed
        elif long_failed:
            assert c.best.rate_rps < passed
            gap = min(r for r in long_failed if r > c.best.rate_rps) / c.best.rate_rps
            assert gap <= (1 / CONFIRM_BACKOFF) ** (1 / 2 ** CONFIRM_BISECTIONS) * (1 + 1e-12)
        else:
            assert c.best.rate_rps == passed
        s = c.best.summary
        assert s["goodput_rps"] == pytest.approx(s["window_attainment"] * s["throughput_rps"])
        assert s["goodput_rps"] <= s["throughput_rps"] and s["sustained"]
        assert c.goodput_per_gpu_rps == pytest.approx(s["goodput_rps"] / c.deployment.num_gpus)
        # what stops it: at the lowest failing rate above, not keeping up, or the SLO limit fewer requests meet
        fail = min((e for e in c.evaluations if e.rate_rps > c.best.rate_rps and not e.passes(target)),
                   key=lambda e: (e.rate_rps, e.confirmation))
        ttft, tpot = (fail.table.column(k).to_numpy(zero_copy_only=False) for k in ("ttft_s", "tpot_s"))
        shares = {"TTFT": (ttft <= 0.004).mean(), "TPOT": ((tpot <= 0.0008) | np.isnan(tpot)).mean()}
        expected = ("throughput" if not fail.summary["sustained"] else min(shares, key=shares.__getitem__))
        assert c.limited_by(Slo(0.004, 0.0008), target).startswith(f"{expected} (")
    assert len(result.records()) == sum(len(c.evaluations) for c in result.candidates)
    assert len({r["serve_id"] for r, _ in result.records()}) == len(result.records())


def test_a_search_spread_over_worker_processes_finds_what_one_process_finds(tiny_model, cache_dir):
    """The candidates' capacity searches run in two spawned processes give the same records, figure for figure,
    and the same per-request tables as the search in this process (each search is the same computation)."""
    base = poisson(1.0, 200, parse_length("uniform:16:400", "p", "prompt_tokens"),
                   parse_length("uniform:1:32", "o", "output_tokens"), 5)
    args = (space(tiny_model), base, SchedulerConfig(token_budget=1024, max_seqs=8), Slo(0.004, 0.0008))
    one = search(*args, iterations=2, cache=StepCache(cache_dir), executor=Executor())
    two = search(*args, iterations=2, cache=StepCache(cache_dir), executor=Executor(workers=2))
    assert len(one.candidates) == 3
    assert [r for r, _ in one.records()] == [r for r, _ in two.records()]
    tables = [(a, b) for (_, a), (_, b) in zip(one.records(), two.records(), strict=True)]
    assert all((a is None) == (b is None) for a, b in tables)
    assert all(a.to_pandas().equals(b.to_pandas()) for a, b in tables if a is not None)  # NaN where NaN


def test_the_capacity_is_met_when_replayed_with_ten_times_the_requests(tiny_model, cache_dir):
    """The issue's check: a capacity from a finite run must hold on a run ten times as long at that rate
    (sustained, and the attainment target met over the steady-state window)."""
    lengths = dict(prompt=parse_length("uniform:16:400", "p", "prompt_tokens"),
                   output=parse_length("uniform:1:32", "o", "output_tokens"))
    target, slo, config = 0.9, Slo(0.004, 0.0008), SchedulerConfig(token_budget=1024, max_seqs=8)
    one = SearchSpace(tiny_model, "star:2", ("TP1EP2",), backend="flow")
    result = search(one, poisson(1.0, 200, seed=7, **lengths), config, slo, attainment=target, iterations=4,
                    cache=StepCache(cache_dir), executor=Executor())
    best = result.candidates[0].best
    assert best is not None
    long = serve(one.candidates()[0][0], poisson(best.rate_rps, 2000, seed=7, **lengths), config, slo,
                 cache=StepCache(cache_dir), check_points=0).summary
    assert long["sustained"] and long["window_attainment"] >= target
    assert long["throughput_rps"] >= (1 - SUSTAIN_TOLERANCE) * best.rate_rps


def test_a_search_that_never_fails_says_no_upper_bound_was_found(tiny_model, cache_dir):
    """From a start so low that MAX_DOUBLINGS doublings still pass, the capacity is only a lower bound."""
    base = poisson(1.0, 100, parse_length("fixed:16", "p", "prompt_tokens"), parse_length("fixed:2", "o", "output_tokens"))
    one = SearchSpace(tiny_model, "star:2", ("TP1EP2",), backend="flow")
    result = search(one, base, SchedulerConfig(token_budget=1024, max_seqs=8), Slo(1.0), start_rps=1e-6,
                    iterations=2, cache=StepCache(cache_dir), executor=Executor())
    c = result.candidates[0]
    assert c.unbounded and c.best is not None
    assert c.best.rate_rps == pytest.approx(1e-6 * 2 ** MAX_DOUBLINGS)
    assert all(e.passes(0.9) for e in c.evaluations)


def test_a_search_needs_an_slo(tiny_model):
    base = poisson(1.0, 10, parse_length("fixed:16", "p", "prompt_tokens"), parse_length("fixed:2", "o", "output_tokens"))
    with pytest.raises(MoesimError, match="give an SLO"):
        search(space(tiny_model), base, SchedulerConfig(), Slo())


def test_what_limits_a_capacity_is_the_slo_limit_fewer_requests_meet_at_the_next_rate(tiny_model):
    """At the lowest failing rate above the capacity: not sustained → throughput; else the limit met by the
    smaller share of requests (TPOT undefined for one output token meets any limit)."""
    import pyarrow as pa

    from moesim.serving.search import Candidate, Evaluation

    def ev(rate, sustained, attainment, ttft, tpot):
        return Evaluation(rate, {"sustained": sustained, "window_attainment": attainment},
                          pa.table({"ttft_s": ttft, "tpot_s": tpot}))

    d = space(tiny_model).candidates()[0][0]
    ok = ev(1.0, True, 1.0, [0.01] * 4, [0.001] * 4)
    slo = Slo(0.1, 0.002)
    ttft_bound = Candidate(d, (ok, ev(4.0, True, 0.25, [0.2, 0.3, 0.5, 0.05], [0.001] * 4),
                               ev(2.0, True, 0.5, [0.2, 0.3, 0.01, 0.05], [0.003, 0.001, 0.001, float("nan")])), ok)
    assert ttft_bound.limited_by(slo, 0.9) == "TTFT (TTFT 50 %, TPOT 75 % of requests met at 2 req/s)"
    tpot_bound = Candidate(d, (ok, ev(2.0, True, 0.5, [0.01] * 4, [0.003, 0.003, 0.003, float("nan")])), ok)
    assert tpot_bound.limited_by(slo, 0.9) == "TPOT (TTFT 100 %, TPOT 25 % of requests met at 2 req/s)"
    overloaded = Candidate(d, (ok, ev(2.0, False, 1.0, [0.01] * 4, [0.001] * 4)), ok)
    assert overloaded.limited_by(slo, 0.9) == "throughput (not sustained at 2 req/s)"
    assert Candidate(d, (ok,), ok, unbounded=True).limited_by(slo, 0.9) is None
    assert Candidate(d, (ok, ev(2.0, True, 0.5, [0.2] * 4, [0.001] * 4)), ok).limited_by(Slo(0.1), 0.9).startswith(
        "TTFT (TTFT 0 % of")
