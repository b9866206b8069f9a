"""Step costs: the grid, the cache keyed by run id, interpolation and its reported error, the executors."""

from __future__ import annotations

import json

import pytest
import yaml
from serve_helpers import one_replica, requests

from moesim.experiments.inputs import plan_runs
from moesim.models.catalog import get_model
from moesim.serving import Deployment, SchedulerConfig, StepCache, poisson, serve
from moesim.serving.costs import Grid, StepCosts, batch_axis, context_axis, fill, step_spec
from moesim.serving.costs.interpolation import AttentionCost
from moesim.serving.requests import parse_length
from moesim.system.run import simulate_run
from moesim.workload.costs import attention_work, decode_attention_work, roofline_time_s
from moesim.workload.graph import Node, NodeKind
from moesim.workload.precision import Precision


def kind_of(model: str):
    (replica,) = Deployment(model, "star:2", "TP1EP2", backend="flow").replicas()
    return replica.kind


def test_the_axes_cover_the_limits():
    assert batch_axis(200) == (1, 2, 4, 8, 16, 32, 64, 128, 256)
    assert batch_axis(1) == (1, 2)
    assert context_axis(5000) == (0, 1024, 4096, 16384)
    assert context_axis(0) == (0, 1024)


def test_a_rerun_finds_every_step_in_the_cache_under_its_run_id(tiny_model, tmp_path):
    kind = kind_of(tiny_model)
    specs = [step_spec(kind, "prefill", t, 0) for t in (64, 128)] + [step_spec(kind, "decode", 4, 1024)]
    cache = StepCache(tmp_path)
    walls, first = fill(specs, cache)
    again, second = fill(specs, cache)
    assert (first.simulated, second.simulated, second.cached) == (3, 0, 3)
    assert again == walls
    ids = {p.run_id for p in plan_runs(specs)}
    assert {p.stem for p in tmp_path.glob("*.json")} == ids
    for s in specs:
        assert walls[s.key()] == simulate_run(s).wall_s


def test_changing_the_model_file_simulates_its_steps_again(tiny_model, tmp_path):
    path = tmp_path / "model.yaml"
    path.write_text(open(tiny_model).read())
    specs = [step_spec(kind_of(str(path)), "prefill", 32, 0)]
    cache = StepCache(tmp_path / "cache")
    before, _ = fill(specs, cache)
    data = yaml.safe_load(path.read_text())
    data["num_layers"] = 2
    path.write_text(yaml.safe_dump(data))
    after, report = fill(specs, cache)
    assert report.simulated == 1 and after[specs[0].key()] > before[specs[0].key()]


def test_grid_points_are_the_simulated_steps_and_between_them_the_error_is_reported(tiny_model, cache_dir):
    kind = kind_of(tiny_model)
    grid = Grid((1, 2, 4, 8), (1, 2, 4, 8), (0, 1024))
    walls, _ = fill([step_spec(kind, *p) for p in grid.points()], StepCache(cache_dir))
    costs = StepCosts(kind, grid, walls)
    assert costs.interpolated("prefill", 4, 0) == pytest.approx(walls[step_spec(kind, "prefill", 4, 0).key()], rel=1e-12)
    assert costs.decode(8, 1024) == pytest.approx(walls[step_spec(kind, "decode", 8, 1024).key()], rel=1e-12)
    lo, hi = costs.decode(2, 512), costs.decode(4, 512)
    assert min(lo, hi) <= costs.decode(3, 512) <= max(lo, hi)
    # a serve run reports the error at its most used cells against a simulation of their mean point
    reqs = poisson(200.0, 200, parse_length("uniform:10:300", "p", "prompt_tokens"),
                   parse_length("uniform:2:30", "o", "output_tokens"), 1)
    res = serve(Deployment(tiny_model, "star:2", "TP1EP2", backend="flow"), reqs,
                SchedulerConfig(token_budget=512, max_seqs=8), cache=StepCache(cache_dir), check_points=2)
    assert {e["phase"] for e in res.interpolation} == {"prefill", "decode"}
    for e in res.interpolation:
        phase, x, c = e["phase"], e["tokens_or_batch"], e["context_tokens"]
        simulated = simulate_run(step_spec(kind, phase, x, c)).wall_s
        assert e["simulated_s"] == simulated
        assert e["error"] == pytest.approx(e["interpolated_s"] / simulated - 1, abs=1e-15)
        assert abs(e["error"]) < 0.05
    assert res.record()["interpolation_error_max"] == max(abs(e["error"]) for e in res.interpolation)
    assert json.loads(json.dumps(res.record(), default=repr))["step_grid"][0]["prefill_tokens"][-1] == 512


def test_the_local_executor_fills_the_same_costs_as_this_process(tiny_model, tmp_path):
    kind = kind_of(tiny_model)
    specs = [step_spec(kind, "prefill", t, 0) for t in (16, 48)] + [step_spec(kind, "decode", b, 2048) for b in (2, 6)]
    inline, _ = fill(specs, StepCache(tmp_path / "inline"))
    pooled, report = fill(specs, StepCache(tmp_path / "pool"), executor="local", workers=2)
    assert pooled == inline and report.simulated == 4


@pytest.mark.parametrize("bad", [-1.0, 1e300, float("nan")])
def test_a_cached_step_time_out_of_range_is_simulated_again(tiny_model, tmp_path, bad):
    """A cache file whose wall_s is negative, absurd or NaN (an E2E of −7 s, "requests never finished")
    is not trusted: the step is simulated again and the file rewritten with the simulated time."""
    cache, config = StepCache(tmp_path / "c"), SchedulerConfig(token_budget=64, max_seqs=2)
    reqs = requests([0.0, 0.5, 1.0], 40, 3)
    first = serve(one_replica(tiny_model), reqs, config, cache=cache, check_points=0)
    path = sorted(cache.directory.glob("*.json"))[0]
    record = json.loads(path.read_text())
    simulated = record["wall_s"]
    path.write_text(json.dumps({**record, "wall_s": bad}))
    again = serve(one_replica(tiny_model), reqs, config, cache=cache, check_points=0)
    assert again.fill.simulated == 1 and again.summary["e2e_mean_s"] == first.summary["e2e_mean_s"]
    assert json.loads(path.read_text())["wall_s"] == simulated


@pytest.mark.parametrize("precision", [Precision(), Precision(attention="fp8", dense="fp8", kv="fp8")])
@pytest.mark.parametrize("tp", [1, 4])
def test_a_steps_attention_is_the_workload_layers(precision, tp):
    """A prefill pass of T tokens (T² pairs, nothing cached) costs ``attention_work(T)``'s node and a decode step of
    B sequences over C cached tokens (B·C pairs, B·C read) ``decode_attention_work(B, C)``'s, with the same
    data types; a mixed step is the same linear function of its tokens, pairs and cached tokens."""
    model = get_model("deepseek-v4-flash")
    cost = AttentionCost(model, tp, 1.0, precision, 1e15, 3.35e12)

    def roofline(work) -> float:
        node = Node(0, "attention", NodeKind.COMPUTE, flops=work.flops, bytes_moved=work.bytes_moved,
                    peak_scale=work.peak_scale)
        return roofline_time_s(node, 1e15, 3.35e12)

    for tokens in (1, 7, 300, 8192):
        assert cost.time_s(tokens, tokens * tokens, 0) == roofline(attention_work(model, tp, tokens, 1.0, None,
                                                                                   precision))
    for batch, context in ((1, 1), (16, 4096), (256, 100_000)):
        assert cost.time_s(batch, batch * context, batch * context) == roofline(
            decode_attention_work(model, tp, batch, context, 1.0, precision))
