"""`serve search`: candidates, the capacity bracket, the ranking by goodput per GPU."""

from __future__ import annotations

import pytest

from moesim.errors import MoesimError
from moesim.serving import SchedulerConfig, SearchSpace, Slo, StepCache, parse_length, poisson, search
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


def test_each_candidates_capacity_is_bracketed_and_the_best_comes_first(tiny_model, cache_dir):
    base = poisson(1.0, 300, parse_length("uniform:16:400", "p", "prompt_tokens"),
                   parse_length("uniform:1:32", "o", "output_tokens"), 4)
    iterations, target = 3, 0.9
    result = search(space(tiny_model), base, SchedulerConfig(token_budget=1024, max_seqs=8), Slo(0.004, 0.0008),
                    attainment=target, iterations=iterations, cache=StepCache(cache_dir), executor=Executor())
    per_gpu = [c.goodput_per_gpu_rps for c in result.candidates]
    assert per_gpu == sorted(per_gpu, reverse=True) and per_gpu[0] > 0
    for c in result.candidates:
        assert c.best is not None and c.best.attainment >= target
        failed = [e.rate_rps for e in c.evaluations if e.attainment < target]
        above = min(r for r in failed if r > c.best.rate_rps)
        # geometric bisection halves the bracket's log-width each step, from a factor of 2
        assert above / c.best.rate_rps <= 2 ** (1 / 2 ** iterations) * (1 + 1e-12)
        assert c.best.summary["goodput_rps"] == pytest.approx(c.best.attainment * c.best.rate_rps)
        assert c.goodput_per_gpu_rps == pytest.approx(c.best.summary["goodput_rps"] / c.deployment.num_gpus)
    assert len(result.records()) == sum(len(c.evaluations) for c in result.candidates)


def test_a_search_needs_an_slo(tiny_model):
    base = poisson(1.0, 10, parse_length("fixed:16", "p", "prompt_tokens"), parse_length("fixed:2", "o", "output_tokens"))
    with pytest.raises(MoesimError, match="give an SLO"):
        search(space(tiny_model), base, SchedulerConfig(), Slo())
