"""Oracles of the replay: an M/D/1 queue, Little's law, lone requests, a full KV cache, trace replay."""

from __future__ import annotations

import math

import numpy as np
import pytest
from serve_helpers import TRACE, column, one_replica, requests

from moesim.serving import (
    Deployment,
    SchedulerConfig,
    Slo,
    StepCache,
    parse_length,
    poisson,
    read_trace,
    serve,
)
from moesim.system.run import simulate_run
from moesim.system.spec import RunSpec


def step_wall(model: str, **overrides) -> float:
    """One step simulated directly (not through the serving cache)."""
    return simulate_run(RunSpec(model, "star:2", "TP1EP2", backend="flow", overrides=tuple(sorted(overrides.items())))).wall_s


def test_one_request_per_step_is_an_md1_queue_with_the_pollaczek_khinchine_mean_wait(tiny_model, cache_dir):
    """One replica, one request per step (max_seqs 1, one output token), every prompt 256 tokens, so every
    step is the simulated 256-token prefill, D seconds; Poisson arrivals at λ = ρ/D. For M/D/1 the
    Pollaczek–Khinchine formula gives the mean wait W_q = λ·E[S²] / (2(1 − ρ)) = ρ·D / (2(1 − ρ))."""
    d = step_wall(tiny_model, tokens=256)
    rho, n, batches = 0.6, 20000, 20
    reqs = poisson(rho / d, n, parse_length("fixed:256", "p", "prompt_tokens"), parse_length("fixed:1", "o", "output_tokens"), 5)
    res = serve(one_replica(tiny_model), reqs, SchedulerConfig(token_budget=256, max_seqs=1), cache=StepCache(cache_dir),
                check_points=0)
    wait = column(res, "scheduled_s") - reqs.arrival_s
    np.testing.assert_allclose(column(res, "ttft_s"), wait + d, rtol=1e-12, atol=1e-15)
    expected = rho * d / (2 * (1 - rho))
    # waits are correlated from one request to the next: the standard error comes from batch means
    means = wait.reshape(batches, -1).mean(axis=1)
    stderr = means.std(ddof=1) / math.sqrt(batches)
    assert stderr < 0.1 * expected
    assert abs(wait.mean() - expected) < 4 * stderr


def test_far_apart_requests_take_one_prefill_step_then_one_decode_step_per_token(tiny_model, cache_dir, small_config):
    """Alone in the system, a request's first token comes after one prefill pass of its prompt (simulated: a
    512-token grid point) and each further token after one decode step of batch 1; its decode steps read
    contexts P+1 … P+out−1, so its TPOT is the decode step at the mean context P + out/2 (step cost linear in
    context at batch 1, where attention is bound by the cache bytes)."""
    prompt, out = 512, 8
    res = serve(one_replica(tiny_model), requests([0.0, 10.0, 20.0], prompt, out), small_config,
                cache=StepCache(cache_dir), check_points=0)
    np.testing.assert_allclose(column(res, "ttft_s"), step_wall(tiny_model, tokens=prompt), rtol=1e-9)
    decode = step_wall(tiny_model, phase="decode", batch=1, context_tokens=prompt + out // 2)
    np.testing.assert_allclose(column(res, "tpot_s"), decode, rtol=1e-3)


def time_average_in_system(arrival: np.ndarray, finish: np.ndarray) -> tuple[float, float]:
    """(mean number of requests present over [first arrival, last finish], that span), from the events."""
    times = np.concatenate([arrival, finish])
    steps = np.concatenate([np.ones_like(arrival), -np.ones_like(finish)])
    order = np.lexsort((-steps, times))
    times, level = times[order], np.cumsum(steps[order])
    span = finish.max() - arrival.min()
    return float(np.sum(level[:-1] * np.diff(times)) / span), float(span)


@pytest.mark.parametrize("case", ["decode-first", "prefill-first, chunked", "disaggregated", "trace"])
def test_littles_law_holds_on_every_run(tiny_model, cache_dir, case):
    """L = λ·W: the replay's own time average of requests present equals arrival rate × mean time in the
    system (λ = n / span), and both match the occupancy rebuilt here from the per-request times."""
    config = SchedulerConfig(token_budget=2048, max_seqs=16)
    dep = one_replica(tiny_model)
    reqs = poisson(400.0, 600, parse_length("uniform:16:1500", "p", "prompt_tokens"),
                   parse_length("uniform:1:64", "o", "output_tokens"), 2)
    if case == "prefill-first, chunked":
        config = SchedulerConfig(token_budget=1024, max_seqs=16, chunk_tokens=300, policy="prefill-first")
    elif case == "disaggregated":
        dep = Deployment(tiny_model, "star:4", "TP1EP2", backend="flow", disaggregate=(2, 2))
    elif case == "trace":
        reqs = read_trace(TRACE).scaled(200.0)  # 200 times as fast, so requests queue
    res = serve(dep, reqs, config, cache=StepCache(cache_dir), check_points=0)
    s = res.summary
    assert s["mean_in_system"] == pytest.approx(s["little_lambda_w"], rel=1e-9)
    rebuilt, span = time_average_in_system(column(res, "arrival_s"), column(res, "finish_s"))
    assert rebuilt == pytest.approx(s["mean_in_system"], rel=1e-9) and span == pytest.approx(s["duration_s"])
    assert s["mean_in_system"] > 1.0  # requests did overlap: the law was tested under queueing


@pytest.mark.parametrize("room", [1, 2])
def test_requests_wait_while_the_kv_cache_is_full(tiny_model, cache_dir, small_config, room):
    """With room for ``room`` requests' KV caches (prompt + output tokens each), at most that many run at
    once, in arrival order, however many are waiting."""
    config = SchedulerConfig(token_budget=2048, max_seqs=16, kv_tokens=room * 120)
    res = serve(one_replica(tiny_model), requests(np.linspace(0, 1e-4, 8), 100, 20), config,
                cache=StepCache(cache_dir), check_points=0)
    start, end = column(res, "scheduled_s"), column(res, "finish_s")
    running = [int(np.sum((start <= t) & (end > t))) for t in start]
    assert max(running) == room
    assert np.all(np.diff(start) >= 0)  # first come, first served


def test_chunked_prefill_spreads_a_long_prompt_over_steps(tiny_model, cache_dir):
    """A 3000-token prompt with chunks of 1024 gets its first token after ⌈3000/1024⌉ = 3 steps, so later than
    one step of the last chunk alone; without chunking it would not fit a 2048-token budget at all."""
    reqs = requests([0.0], 3000, 4)
    chunked = serve(one_replica(tiny_model), reqs, SchedulerConfig(token_budget=2048, max_seqs=16, chunk_tokens=1024),
                    cache=StepCache(cache_dir), check_points=0)
    assert column(chunked, "ttft_s")[0] > 2 * step_wall(tiny_model, tokens=1024)
    assert chunked.summary["steps"] == 3 + 3  # three prefill chunks, then three decode steps
    from moesim.errors import MoesimError

    with pytest.raises(MoesimError, match="exceeds the token budget"):
        serve(one_replica(tiny_model), reqs, SchedulerConfig(token_budget=2048, max_seqs=16),
              cache=StepCache(cache_dir), check_points=0)


def test_a_trace_replay_is_identical_when_rerun(tiny_model, cache_dir, small_config):
    runs = [serve(one_replica(tiny_model), read_trace(TRACE), small_config, Slo(0.01, 0.001),
                  cache=StepCache(cache_dir), check_points=0) for _ in range(2)]
    for name in runs[0].table.column_names:  # NaN (no KV transfer) equals NaN here
        np.testing.assert_array_equal(column(runs[0], name), column(runs[1], name))
    assert runs[0].serve_id == runs[1].serve_id
    assert runs[1].fill.simulated == 0 and runs[1].fill.cached == runs[1].fill.steps  # the second found every step
