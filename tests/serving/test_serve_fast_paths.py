"""The replay's shortcuts give what the general path gives, bit for bit: a decode step that completes nothing
ends without the general bookkeeping (``ReplicaGroup.finish_quiet``), and decode steps reuse the step time
along the batch axis (``StepCosts.decode``)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from serve_helpers import one_replica, requests

from moesim.serving import (
    Deployment,
    SchedulerConfig,
    SearchSpace,
    Slo,
    StepCache,
    parse_length,
    poisson,
    search,
)
from moesim.serving.disagg import KvTransfers
from moesim.serving.replay import replay
from moesim.serving.scheduler import ReplicaGroup
from moesim.serving.simulate import Executor, grids, step_costs

LONGEST_PROMPT, LONGEST_OUTPUT = 600, 40


def disaggregated(model: str) -> Deployment:
    return Deployment(model, "star:4", "TP1EP2", backend="flow", disaggregate=(2, 2))


def general_path(mp: pytest.MonkeyPatch) -> None:
    """Every step ends through ``ReplicaGroup.finish``."""
    mp.setattr(ReplicaGroup, "finish_quiet", lambda self: False)


def replays(deployment: Deployment, reqs, config: SchedulerConfig, cache_dir) -> tuple:
    """The replay with its shortcuts, how many steps took the quiet path, and the replay on the general path."""
    envelope = requests([0.0], LONGEST_PROMPT, LONGEST_OUTPUT)  # one grid for every example
    costs, _ = step_costs(grids(deployment, [envelope], config), StepCache(cache_dir), Executor())
    def run():
        transfers = KvTransfers(deployment.topology, deployment.run.network) if deployment.disaggregate else None
        return replay(reqs, deployment.replicas(), costs, config, transfers)

    quiet = 0
    real = ReplicaGroup.finish_quiet
    with pytest.MonkeyPatch.context() as mp:
        def counted(self):
            nonlocal quiet
            ended = real(self)
            quiet += ended
            return ended
        mp.setattr(ReplicaGroup, "finish_quiet", counted)
        fast = run()
    with pytest.MonkeyPatch.context() as mp:
        general_path(mp)
        slow = run()
    return fast, quiet, slow


def assert_same(a, b) -> None:
    for name in ("scheduled_s", "first_token_s", "finish_s", "replica", "decode_replica", "transfer_start_s",
                 "transfer_end_s"):
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name), err_msg=name)  # NaN equals NaN
    assert (a.steps, a.busy_s, a.area, a.prefill_tokens) == (b.steps, b.busy_s, b.area, b.prefill_tokens)


traces = st.integers(1, 60).flatmap(lambda n: st.tuples(
    st.lists(st.floats(0.0, 0.05, allow_nan=False), min_size=n, max_size=n),
    st.lists(st.integers(1, LONGEST_PROMPT), min_size=n, max_size=n),
    st.lists(st.integers(1, LONGEST_OUTPUT), min_size=n, max_size=n)))


@settings(max_examples=25, deadline=None, derandomize=True)
@given(trace=traces, policy=st.sampled_from(["decode-first", "prefill-first"]), split=st.booleans())
def test_quiet_decode_steps_replay_as_the_general_path_does(tiny_model, cache_dir, trace, policy, split):
    """Random traces (bursts and gaps, short and long prompts and outputs) on a colocated replica and on a
    prefill:decode pair: per request every time, per replica steps and busy seconds, and the ∫ n dt of Little's
    law are the same numbers with and without the quiet path."""
    gaps, prompt, output = trace
    reqs = requests(np.cumsum(gaps), np.asarray(prompt), np.asarray(output))
    config = SchedulerConfig(token_budget=1024, max_seqs=8, policy=policy)
    deployment = disaggregated(tiny_model) if split else one_replica(tiny_model)
    fast, quiet, slow = replays(deployment, reqs, config, cache_dir)
    assert_same(fast, slow)
    if max(output) > 2:
        assert quiet > 0  # the path under test was taken


def test_a_search_finds_the_same_capacities_on_the_general_path(tiny_model, cache_dir):
    """A small search (both modes) gives the same records, figure for figure, and the same per-request table
    of each capacity with the shortcuts as on the general path."""
    base = poisson(1.0, 200, parse_length("uniform:16:400", "p", "prompt_tokens"),
                   parse_length("uniform:1:32", "o", "output_tokens"), 7)
    space = SearchSpace(tiny_model, "star:4", ("TP1EP2",), modes=("colocated", "disaggregated"), backend="flow")
    args = (space, base, SchedulerConfig(token_budget=1024, max_seqs=8), Slo(0.004, 0.0008))
    fast = search(*args, iterations=2, cache=StepCache(cache_dir), executor=Executor())
    with pytest.MonkeyPatch.context() as mp:
        general_path(mp)
        slow = search(*args, iterations=2, cache=StepCache(cache_dir), executor=Executor())
    assert len(fast.candidates) == 2
    assert [r for r, _ in fast.records()] == [r for r, _ in slow.records()]
    for (_, a), (_, b) in zip(fast.records(), slow.records(), strict=True):
        assert (a is None) == (b is None)
        assert a is None or a.to_pandas().equals(b.to_pandas())


def test_a_decode_step_is_the_bilinear_interpolation_of_its_cell_each_time_it_is_asked(tiny_model, cache_dir):
    """t(B, C) = (1 − v)·[(1 − u)·t00 + u·t10] + v·[(1 − u)·t01 + u·t11], u and v the position of B and C in
    their grid cell (extrapolated past the last): the same value the first time and again (from the rows kept)."""
    config = SchedulerConfig(token_budget=1024, max_seqs=8)
    deployment = one_replica(tiny_model)
    (costs,) = step_costs(grids(deployment, [requests([0.0], 600, 40)], config), StepCache(cache_dir),
                          Executor())[0].values()
    xs, cs, t = costs.dec_b, costs.dec_c, costs.dec_t
    for batch in (1, 3, 5, 8, 12):
        for context in (0.0, 17.5, 640.0, 1024.0, 3000.0):
            i = min(max(np.searchsorted(xs, batch, side="right") - 1, 0), len(xs) - 2)
            j = min(max(np.searchsorted(cs, context, side="right") - 1, 0), len(cs) - 2)
            u, v = (batch - xs[i]) / (xs[i + 1] - xs[i]), (context - cs[j]) / (cs[j + 1] - cs[j])
            expected = ((1 - v) * ((1 - u) * t[j][i] + u * t[j][i + 1])
                        + v * ((1 - u) * t[j + 1][i] + u * t[j + 1][i + 1]))
            first, again = costs.decode(batch, context), costs.decode(batch, context)
            assert first == again and math.isclose(first, expected, rel_tol=1e-12)
