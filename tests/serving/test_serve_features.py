"""Oracles of the serving features beside plain continuous batching: gamma arrivals, replica routing,
data-parallel attention ranks, prefix caching, preemption (recompute, swap) and multi-token prediction."""

from __future__ import annotations

import dataclasses
import json
import math
import re

import numpy as np
import pytest
from cli_fuzz import run_cli
from serve_helpers import column, one_replica, requests, write_tiny_model
from test_serve_oracles import time_average_in_system

from moesim.errors import MoesimError
from moesim.serving import (
    Deployment,
    Requests,
    SchedulerConfig,
    StepCache,
    make_requests,
    parse_arrivals,
    parse_length,
    poisson,
    read_trace,
    serve,
)
from moesim.serving.config import ADDED
from moesim.serving.costs.grid import step_spec
from moesim.serving.simulate import grids, step_costs

FIXED = parse_length("fixed:10", "p", "prompt_tokens"), parse_length("5", "o", "output_tokens")


# ---------------------------------------------------------------------------------------------- arrivals
def gaps_of(r: Requests) -> np.ndarray:
    return np.diff(np.concatenate([[0.0], r.arrival_s]))


@pytest.mark.parametrize("cv", [1.0, 0.5, 3.0])
def test_gamma_gaps_have_mean_one_over_the_rate_and_the_cv_asked_for(cv):
    """Gamma gaps of shape 1/CV² and scale CV²/λ: mean 1/λ (so CV = 1 has Poisson's mean rate), standard
    deviation CV/λ; the sample mean's standard error is CV/(λ√n)."""
    n, rate = 40000, 8.0
    r = poisson(rate, n, *FIXED, seed=4, cv=cv)
    gaps = gaps_of(r)
    assert abs(gaps.mean() - 1 / rate) < 4 * cv / (rate * math.sqrt(n))
    assert gaps.std() * rate == pytest.approx(cv, rel=0.05)
    assert r.source.startswith(f"gamma cv {cv:g} 8/s")


def test_gamma_with_cv_one_matches_poisson_mean_rate():
    n, rate = 40000, 5.0
    gamma = make_requests(None, rate, n, "fixed:10", "5", 1, "gamma:1")
    exp = make_requests(None, rate, n, "fixed:10", "5", 1)
    # both estimate 1/λ with standard error 1/(λ√n): their difference has √2 times that
    assert abs(gaps_of(gamma).mean() - gaps_of(exp).mean()) < 4 * math.sqrt(2) / (rate * math.sqrt(n))
    assert exp.source.startswith("poisson 5/s")  # the default keeps its name and draws


@pytest.mark.parametrize("text,problem", [("gamma:0", "field 'CV'"), ("gamma:x", "field 'CV'"),
                                          ("gamma:500", "field 'CV'"), ("weibull:2", "field 'arrivals'")])
def test_bad_arrivals_are_a_one_line_error(text, problem):
    with pytest.raises(MoesimError) as err:
        parse_arrivals(text)
    assert problem in str(err.value) and "--arrivals" in str(err.value) and "\n" not in str(err.value)


# ---------------------------------------------------------------------------------------------- routing
def four_replicas(model: str) -> Deployment:
    return Deployment(model, "star:8", "TP1EP2", backend="flow")


@pytest.mark.parametrize("routing", ["least-loaded", "round-robin", "random"])
def test_routing_policies_conserve_requests(tiny_model, cache_dir, small_config, routing):
    """Every request is served once, on one of the four replicas, and Little's law holds; round-robin sends
    request i to replica i mod 4; random is seeded."""
    reqs = poisson(300.0, 400, parse_length("uniform:16:600", "p", "prompt_tokens"),
                   parse_length("uniform:1:32", "o", "output_tokens"), 3)
    config = dataclasses.replace(small_config, routing=routing, routing_seed=7)
    res = serve(four_replicas(tiny_model), reqs, config, cache=StepCache(cache_dir), check_points=0)
    replica, finish = column(res, "replica"), column(res, "finish_s")
    assert np.all(np.isfinite(finish)) and set(replica) <= {0, 1, 2, 3} and len(replica) == len(reqs)
    assert res.summary["mean_in_system"] == pytest.approx(res.summary["little_lambda_w"], rel=1e-9)
    if routing == "round-robin":
        assert list(replica) == [i % 4 for i in range(len(reqs))]
    if routing == "random":
        expected = np.random.default_rng(7).integers(4, size=len(reqs))
        assert list(replica) == list(expected)
    if routing == "least-loaded":  # the default: the same replay as a config that does not name it
        default = serve(four_replicas(tiny_model), reqs, small_config, cache=StepCache(cache_dir), check_points=0)
        assert list(column(default, "finish_s")) == list(finish)
        assert default.serve_id != res.serve_id  # routing_seed set: part of the key


def test_new_scheduler_fields_enter_the_key_only_when_set():
    key = SchedulerConfig().key()
    assert not set(ADDED) & set(key)
    assert SchedulerConfig(preemption="swap").key()["preemption"] == "swap"


# ---------------------------------------------------------------------------------------------- DP attention
def test_a_dp_step_lasts_as_long_as_its_slowest_rank(tiny_model, cache_dir, small_config):
    """Two ranks, two prompts arriving together (1024 and 64 tokens, one output token each): each rank takes
    one, and both get their token when the longer prefill ends: at the prefill time of 1024 tokens alone."""
    dp = dataclasses.replace(small_config, dp_ranks=2)
    res = serve(one_replica(tiny_model), requests([0.0, 0.0], [1024, 64], 1), dp, cache=StepCache(cache_dir),
                check_points=0)
    alone = serve(one_replica(tiny_model), requests([0.0], 1024, 1), small_config, cache=StepCache(cache_dir),
                  check_points=0)
    short = serve(one_replica(tiny_model), requests([0.0], 64, 1), small_config, cache=StepCache(cache_dir),
                  check_points=0)
    assert sorted(column(res, "dp_rank")) == [0, 1]
    np.testing.assert_array_equal(column(res, "ttft_s"), column(alone, "ttft_s")[0])
    assert column(short, "ttft_s")[0] < column(alone, "ttft_s")[0]  # the short rank waited for the long one
    assert res.summary["steps"] == 1


@pytest.mark.parametrize("dp_ranks", [2, 4])
def test_dp_ranks_on_both_sides_of_a_disaggregated_deployment_conserve_requests(tiny_model, cache_dir, small_config,
                                                                                dp_ranks):
    """Prefill and decode replicas of two GPUs with two ranks each: every request is served once, by a rank
    of its replica, and Little's law holds; four ranks do not divide two GPUs."""
    dep = Deployment(tiny_model, "star:4", "TP1EP2", backend="flow", disaggregate=(2, 2))
    reqs = poisson(300.0, 200, parse_length("uniform:16:600", "p", "prompt_tokens"),
                   parse_length("uniform:1:32", "o", "output_tokens"), 2)
    config = dataclasses.replace(small_config, dp_ranks=dp_ranks)
    if dp_ranks == 4:
        with pytest.raises(MoesimError, match="field 'dp_ranks': 4 ranks do not divide the 2 GPUs"):
            serve(dep, reqs, config, cache=StepCache(cache_dir), check_points=0)
        return
    res = serve(dep, reqs, config, cache=StepCache(cache_dir), check_points=0)
    assert np.all(np.isfinite(column(res, "finish_s"))) and set(column(res, "dp_rank")) == {0, 1}
    assert res.summary["mean_in_system"] == pytest.approx(res.summary["little_lambda_w"], rel=1e-9)


def test_dp_ranks_split_the_kv_cache_and_conserve_requests(tiny_model, cache_dir, small_config):
    """With room for one request per rank (the replica's 2 × 120 tokens split in two), at most one request
    runs on each rank at a time, two on the replica; every request finishes once."""
    config = dataclasses.replace(small_config, kv_tokens=240, dp_ranks=2)
    res = serve(one_replica(tiny_model), requests(np.linspace(0, 1e-4, 8), 100, 20), config,
                cache=StepCache(cache_dir), check_points=0)
    start, end, rank = column(res, "scheduled_s"), column(res, "finish_s"), column(res, "dp_rank")
    for k in (0, 1):
        mine = rank == k
        assert max(int(np.sum((start[mine] <= t) & (end[mine] > t))) for t in start[mine]) == 1
    assert np.all(np.isfinite(end)) and sorted(np.bincount(rank)) == [4, 4]


def test_a_dp_split_gives_each_gpu_a_rank_with_its_own_cache_and_steps_with_every_ranks_batch(
        tiny_model, cache_dir, small_config):
    """DP2EP2: two ranks without ``dp_ranks``, each holding the 120 tokens of its own GPU's cache (one
    120-token request at a time per rank, two on the replica); a grid step of x tokens per rank is the run
    of 2x (both ranks' batches); TP inside a rank and a conflicting ``dp_ranks`` are one-line errors."""
    dep = Deployment(tiny_model, "star:2", "DP2EP2", backend="flow")
    kind = dep.replicas()[0].kind
    assert kind.dp_ranks == 2
    assert dict(step_spec(kind, "prefill", 64, 0).overrides)["tokens"] == 128
    assert dict(step_spec(kind, "decode", 4, 1024).overrides)["batch"] == 8
    config = dataclasses.replace(small_config, kv_tokens=120)
    res = serve(dep, requests(np.linspace(0, 1e-4, 8), 100, 20), config, cache=StepCache(cache_dir), check_points=0)
    start, end, rank = column(res, "scheduled_s"), column(res, "finish_s"), column(res, "dp_rank")
    for k in (0, 1):
        mine = rank == k
        assert max(int(np.sum((start[mine] <= t) & (end[mine] > t))) for t in start[mine]) == 1
    assert np.all(np.isfinite(end)) and sorted(np.bincount(rank)) == [4, 4]
    with pytest.raises(MoesimError, match="field 'dp_ranks': 4, but the DP2EP2 split has 2"):
        serve(dep, requests([0.0], 10, 1), dataclasses.replace(config, dp_ranks=4), cache=StepCache(cache_dir),
              check_points=0)
    with pytest.raises(MoesimError, match="TP inside a rank is not"):
        _ = Deployment(tiny_model, "star:4", "DP2TP2EP4", backend="flow").replicas()[0].kind.dp_ranks



def test_every_gpu_of_a_dp_split_holds_the_weights_outside_the_routed_experts(tmp_path, cache_dir, small_config):
    """A model whose checkpoint is its routed experts (1 B per parameter) plus 1 GB: a GPU of DP2EP2 holds the
    1 GB and half the experts, one of TP1EP2 half of everything, so KV capacity = ⌊(f·M − weights) / kv⌋ with
    weights = 1 GB + E/2 and (E + 1 GB)/2 (E: the experts' bytes)."""
    import yaml

    from moesim.models import get_model
    from moesim.models.residency import replica_bytes

    model = get_model(str(write_tiny_model(tmp_path)))
    experts = replica_bytes(model, model.routed_experts, 1.0)
    data = yaml.safe_load((tmp_path / "tiny.yaml").read_text()) | {"checkpoint_size_bytes": experts + 10**9}
    (tmp_path / "tiny.yaml").write_text(yaml.safe_dump(data, sort_keys=False))
    free = small_config.memory_fraction * small_config.gpu_memory_bytes
    reqs = [requests([0.0], 64, 2)]
    for strategy, weights in (("DP2EP2", 10**9 + experts / 2), ("TP1EP2", (experts + 10**9) / 2)):
        dep = Deployment(str(tmp_path / "tiny.yaml"), "star:2", strategy, backend="flow")
        costs, _ = step_costs(grids(dep, reqs, small_config), StepCache(cache_dir))
        replica = dep.replicas()[0]
        kv = costs[replica.kind].kv_bytes_per_token
        assert small_config.kv_capacity(replica, costs[replica.kind]) == int((free - weights) // kv), strategy

# ---------------------------------------------------------------------------------------------- prefix caching
def write_prefix_trace(path, rows) -> None:
    path.write_text("arrival_s,prompt_tokens,output_tokens,prefix_id,prefix_tokens\n"
                    + "".join(f"{a},{p},{o},{i},{k}\n" for a, p, o, i, k in rows))


def test_prefix_hits_remove_exactly_the_cached_tokens_prefill(tiny_model, cache_dir, small_config, tmp_path):
    """Far-apart requests on one replica: the first of each prefix prefills all its prompt; later ones skip
    the prefix (a prefix as long as the prompt leaves one token to compute). The prefill tokens are the
    prompts' minus the hits, and a hit's TTFT is the step of its remaining tokens over the cached prefix:
    t_step(P − k tokens, (P − k)·P pairs, k cached) from the replica's step costs."""
    rows = [(0, 512, 2, "sys", 256), (10, 512, 2, "sys", 256), (20, 300, 2, "other", 100), (30, 400, 2, "sys", 256),
            (40, 256, 2, "sys", 256), (50, 512, 2, "", 0)]
    write_prefix_trace(tmp_path / "t.csv", rows)
    reqs = read_trace(tmp_path / "t.csv")
    res = serve(one_replica(tiny_model), reqs, small_config, cache=StepCache(cache_dir), check_points=0)
    cached = column(res, "cached_tokens")
    assert list(cached) == [0, 256, 0, 256, 255, 0]
    assert res.summary["prefill_tokens"] == int(reqs.prompt_tokens.sum()) - 256 - 256 - 255
    assert res.summary["cached_tokens"] == 767
    costs, _ = step_costs(grids(one_replica(tiny_model), [reqs], small_config), StepCache(cache_dir))
    c = costs[one_replica(tiny_model).replicas()[0].kind]
    p, k = 512, 256
    assert column(res, "ttft_s")[1] == pytest.approx(c.step(p - k, (p - k) * p, k, 0, 0), rel=1e-12)
    assert column(res, "ttft_s")[1] < column(res, "ttft_s")[0]


def test_a_prefix_hit_rate_caches_that_share_of_every_prompt(tiny_model, cache_dir, small_config):
    config = dataclasses.replace(small_config, prefix_hit_rate=0.25)
    reqs = requests([0.0, 10.0], [512, 101], 3)
    res = serve(one_replica(tiny_model), reqs, config, cache=StepCache(cache_dir), check_points=0)
    assert list(column(res, "cached_tokens")) == [128, 25]
    assert res.summary["prefill_tokens"] == 512 + 101 - 128 - 25


@pytest.mark.parametrize("header,row,problem", [
    ("arrival_s,prompt_tokens,output_tokens,prefix_id", "0,5,3,a", "field 'prefix_tokens': missing column"),
    ("arrival_s,prompt_tokens,output_tokens,prefix_id,prefix_tokens", "0,5,3,a,6",
     "field 'prefix_tokens (row 1)': must be at most prompt_tokens (5)"),
    ("arrival_s,prompt_tokens,output_tokens,prefix_id,prefix_tokens", "0,5,3,a,-1", "field 'prefix_tokens (row 1)'"),
])
def test_bad_prefix_columns_are_a_one_line_error(tmp_path, header, row, problem):
    path = tmp_path / "bad.csv"
    path.write_text(f"{header}\n{row}\n")
    with pytest.raises(MoesimError) as err:
        read_trace(path)
    assert str(path) in str(err.value) and problem in str(err.value) and "\n" not in str(err.value)


# ---------------------------------------------------------------------------------------------- preemption
def crowded() -> Requests:
    """Requests whose outputs outgrow a small cache: admitted on their prompts, they must be preempted."""
    return poisson(2000.0, 120, parse_length("uniform:16:200", "p", "prompt_tokens"),
                   parse_length("uniform:20:200", "o", "output_tokens"), 8)


@pytest.mark.parametrize("mode", ["recompute", "swap"])
def test_preemption_never_loses_a_request_and_littles_law_holds(tiny_model, cache_dir, mode):
    """A 600-token cache and requests of up to 400 tokens arriving in a burst: requests are preempted, every
    one still finishes with all its output, once, and L = λW on the run (the occupancy rebuilt from the
    per-request times equals the replay's own)."""
    config = SchedulerConfig(token_budget=2048, max_seqs=16, kv_tokens=600, preemption=mode)
    reqs = crowded()
    res = serve(one_replica(tiny_model), reqs, config, cache=StepCache(cache_dir), check_points=0)
    s = res.summary
    assert s["preemptions"] > 0 and int(column(res, "preemptions").sum()) == s["preemptions"]
    finish, first = column(res, "finish_s"), column(res, "first_token_s")
    assert np.all(np.isfinite(finish)) and np.all(finish >= first) and np.all(first > column(res, "arrival_s"))
    assert s["mean_in_system"] == pytest.approx(s["little_lambda_w"], rel=1e-9)
    rebuilt, _ = time_average_in_system(column(res, "arrival_s"), finish)
    assert rebuilt == pytest.approx(s["mean_in_system"], rel=1e-9)
    if mode == "recompute":  # preempted requests prefill their prompt and produced tokens again
        assert s["prefill_tokens"] > int(reqs.prompt_tokens.sum())
    else:  # swapped caches come back: nothing is prefilled twice
        assert s["prefill_tokens"] == int(reqs.prompt_tokens.sum())


def two_in_a_small_cache(model: str, cache_dir, mode: str, bandwidth_bps: float = 1e12):
    """Requests 0 and 1 (prompt 100, output 50) arriving together into a 260-token cache: one step prefills
    both (101 tokens reserved each), then 29 decode steps fill the cache (202 + 2 × 29 = 260), and before
    the 30th, request 1 (the later) is preempted holding 100 + 1 + 29 = 130 tokens."""
    config = SchedulerConfig(token_budget=2048, max_seqs=16, kv_tokens=260, preemption=mode,
                             swap_bandwidth_bps=bandwidth_bps)
    return serve(one_replica(model), requests([0.0, 0.0], 100, 50), config, cache=StepCache(cache_dir),
                 check_points=0)


def test_recompute_prefills_the_preempted_tokens_again(tiny_model, cache_dir):
    res = two_in_a_small_cache(tiny_model, cache_dir, "recompute")
    assert list(column(res, "preemptions")) == [0, 1]
    assert res.summary["prefill_tokens"] == 100 + 100 + 130  # both prompts, then request 1's 130 tokens again
    assert column(res, "finish_s")[1] > column(res, "finish_s")[0]


def test_swap_time_is_the_cache_bytes_over_the_host_link(tiny_model, cache_dir, small_config):
    """Request 1's 130 tokens go out to the host in the step that preempts it, and come back once request 0
    is done (they fit only then): at a slower link, request 0 finishes later by one swap time, 130 × KV
    bytes per token / bandwidth, and request 1 by two; nothing is prefilled twice."""
    fast, slow = (two_in_a_small_cache(tiny_model, cache_dir, "swap", bw) for bw in (1e15, 1e10))
    assert list(column(slow, "preemptions")) == [0, 1] and slow.summary["prefill_tokens"] == 200
    costs, _ = step_costs(grids(one_replica(tiny_model), [requests([0.0], 100, 50)], small_config),
                          StepCache(cache_dir))
    kv_bytes = costs[one_replica(tiny_model).replicas()[0].kind].kv_bytes_per_token
    swap_s = 130 * kv_bytes * 8 * (1 / 1e10 - 1 / 1e15)
    late = column(slow, "finish_s") - column(fast, "finish_s")
    np.testing.assert_allclose(late, [swap_s, 2 * swap_s], rtol=1e-9)


def test_preemption_with_room_to_spare_replays_as_full_reservation(tiny_model, cache_dir, small_config):
    """With a cache that holds every request whole, no request is ever preempted and reserving token by
    token changes nothing: the same times per request."""
    reqs = crowded()
    plain = serve(one_replica(tiny_model), reqs, small_config, cache=StepCache(cache_dir), check_points=0)
    lazy = serve(one_replica(tiny_model), reqs, dataclasses.replace(small_config, preemption="recompute"),
                 cache=StepCache(cache_dir), check_points=0)
    assert lazy.summary["preemptions"] == 0
    for name in ("scheduled_s", "first_token_s", "finish_s"):
        np.testing.assert_array_equal(column(lazy, name), column(plain, name))


# ---------------------------------------------------------------------------------------------- MTP
@pytest.mark.parametrize("acceptance,decode_steps", [(1.0, 3), (0.0, 9)])
def test_mtp_decode_steps_follow_the_tokens_per_step(tiny_model, cache_dir, small_config, acceptance, decode_steps):
    """A lone request of 10 output tokens: its first from the prefill, the other 9 at 1 + a + a² tokens per
    decode step with 2 drafts: 3 steps with every draft accepted, 9 with none (each then costing more than
    a step without drafts)."""
    config = dataclasses.replace(small_config, mtp_draft_tokens=2, mtp_acceptance=acceptance)
    res = serve(one_replica(tiny_model), requests([0.0], 64, 10), config, cache=StepCache(cache_dir), check_points=0)
    assert res.summary["steps"] == 1 + decode_steps
    plain = serve(one_replica(tiny_model), requests([0.0], 64, 10), small_config, cache=StepCache(cache_dir),
                  check_points=0)
    per_step = (column(res, "finish_s") - column(res, "first_token_s"))[0] / decode_steps
    plain_step = (column(plain, "finish_s") - column(plain, "first_token_s"))[0] / 9
    assert per_step > plain_step


def test_the_serve_command_takes_the_features(tiny_model, cache_dir):
    code, stdout, err = run_cli("serve", "--model", tiny_model, "--topology", "star:2", "--strategy", "TP1EP2",
                                "--backend", "flow", "--cache", str(cache_dir), "--token-budget", "2048",
                                "--max-seqs", "16", "--rate", "2000", "--requests", "120", "--arrivals", "gamma:2",
                                "--kv-tokens", "1200", "--preemption", "swap",
                                "--prompt", "uniform:16:200", "--output", "uniform:20:200", "--prefix-hit-rate", "0.5",
                                "--mtp-draft-tokens", "1", "--mtp-acceptance", "0.8", "--dp-ranks", "2",
                                "--routing", "random", "--json", "--check-points", "0")
    assert code == 0, err
    record = json.loads(stdout)
    assert record["requests_source"].startswith("gamma cv 2 2000/s")
    assert record["scheduler"]["preemption"] == "swap" and record["scheduler"]["routing"] == "random"
    assert record["cached_tokens"] > 0 and record["mean_in_system"] == pytest.approx(record["little_lambda_w"])
    code, stdout, err = run_cli("serve", "--model", tiny_model, "--topology", "star:2", "--strategy", "TP1EP2",
                                "--backend", "flow", "--cache", str(cache_dir), "--token-budget", "2048",
                                "--max-seqs", "16", "--rate", "2000", "--requests", "120", "--kv-tokens", "600",
                                "--prompt", "uniform:16:200", "--output", "uniform:20:200", "--preemption",
                                "recompute", "--check-points", "0")
    assert code == 0, err
    assert re.search(r"\d+ prompt tokens prefilled; [1-9]\d* preemptions \(recompute\)", stdout)
    code, _, err = run_cli("serve", "--model", tiny_model, "--topology", "star:2", "--strategy", "TP1EP2",
                           "--trace", "x.csv", "--arrivals", "gamma:2")
    assert code != 0 and "--arrivals: applies to generated requests" in err
