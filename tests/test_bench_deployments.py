"""benchmarks/bench_deployments.py: every documented deployment is a valid ``moesim run`` invocation whose
inputs resolve (model, template, DP-attention strategy, every ``--set``), without simulating anything, and
docs/deployments.md prints exactly the bench's commands."""

from __future__ import annotations

from pathlib import Path

import pytest
import typer
from helpers import load_benchmark

from moesim.cli import app
from moesim.system.run import prepare

ROOT = Path(__file__).resolve().parents[1]
bench = load_benchmark("bench_deployments")

RUN = typer.main.get_command(app).commands["run"]  # type: ignore[attr-defined]


RUNS = [(d, args) for d in bench.DEPLOYMENTS for args in d.runs()]


@pytest.mark.parametrize(("deployment", "args"), RUNS, ids=[f"{d.name}-{i}" for i, (d, _) in enumerate(RUNS)])
def test_each_command_parses_and_resolves(deployment, args):
    ctx = RUN.make_context("run", list(args))  # the CLI's own option parser: unknown flags fail here
    assert ctx.params["model"] == "deepseek-v3"
    spec = bench.spec_of(args)
    assert spec.backend == "fluid"
    prepared = prepare(spec)  # every input resolved, as `moesim run` does before simulating
    assert prepared.layout.num_ranks == prepared.topology_ref.num_gpus == 8 * deployment.servers
    assert prepared.workload_options.phase == deployment.phase
    overrides = spec.override_dict()
    assert overrides["gpu"] == "topology"
    if deployment.phase == "prefill":  # a batch of prompts: 16K tokens on every GPU
        assert prepared.tokens == 16_384 * prepared.layout.num_ranks
        assert overrides["all_to_all_algorithm"] == "hierarchical" and overrides["comm_sms"] == 0.18
    else:
        assert overrides["all_to_all_algorithm"] == "low_latency"
    if deployment.per_gpu:  # the two runs bracket the deployment's batch per GPU
        target, low, high = deployment.per_gpu
        assert low < target < high and ctx.params["batch"] in (low * 8 * deployment.servers,
                                                               high * 8 * deployment.servers)


def test_names_are_unique_and_quick_covers_both_phases_of_both_operators():
    names = [d.name for d in bench.DEPLOYMENTS]
    assert len(names) == len(set(names))
    quick = [d for d in bench.DEPLOYMENTS if d.quick]
    assert {(d.name.split("-")[0], d.phase) for d in quick} == {
        ("deepseek", "prefill"), ("deepseek", "decode"), ("sglang", "prefill"), ("sglang", "decode")}


def test_docs_print_the_bench_commands():
    text = " ".join((ROOT / "docs" / "deployments-measured.md").read_text().replace("\\\n", " ").split())
    assert f'STACK="{bench.STACK}"' in text
    for d in bench.DEPLOYMENTS:
        for args in d.runs():
            assert "$STACK" in d.doc_command(args) and d.doc_command(args) in text, d.name


def test_per_server_figures():
    # prefill: tokens / wall / servers; decode: the run's tokens_per_s / servers
    pre = next(d for d in bench.DEPLOYMENTS if d.phase == "prefill")
    dec = next(d for d in bench.DEPLOYMENTS if d.phase == "decode")
    assert bench.per_server(pre, {"parameters": {"tokens": 524_288}, "wall_s": 2.0}) == 524_288 / 2.0 / pre.servers
    assert bench.per_server(dec, {"tokens_per_s": 160_000.0}) == 160_000.0 / dec.servers
    # between two batches: 88 requests per GPU lie 24/64 of the way from the 64-request wall to the 128-request
    # one; output tokens per server = 88 per GPU × 8 GPUs × tokens per step / that wall
    online = next(d for d in bench.DEPLOYMENTS if d.per_gpu)
    assert online.per_gpu == (88, 64, 128)
    high = {"wall_s": 0.080, "parameters": {"decode": {"tokens_per_step": 1.85}}}
    low = {"wall_s": 0.048}
    wall = 0.048 + (0.080 - 0.048) * 24 / 64
    assert bench.time_s(online, high, low) == pytest.approx(wall, rel=1e-12)
    assert bench.per_server(online, high, low) == pytest.approx(88 * 8 * 1.85 / wall, rel=1e-12)


def test_sglang_expert_loads_are_whole_layers():
    # SGLang's attachment_ep_statistics: every MoE layer of DeepSeek-V3 (58) counts the same routed rows
    # (tokens × 8) over its 256 experts, so each row is one layer's load over the same tokens.
    for name, *_ in bench.IMBALANCE_CASES:
        lines = (ROOT / bench.EXPERT_DISTRIBUTION / f"{name}.csv").read_text().splitlines()
        rows = [[int(v) for v in line.split(",")] for line in lines[1:]]
        assert len(rows) == 58 and {len(r) for r in rows} == {256}, name
        assert len({sum(r) for r in rows}) == 1 and sum(rows[0]) % 8 == 0, name


def test_eplb_leaves_less_imbalance_than_no_replicas_on_sglang_loads():
    # max/mean rows per rank is at least 1 and EPLB's global placement with 32 replicas never does worse than
    # the 256 experts split contiguously over 32 ranks without replicas, layer by layer
    from moesim.workload.routing import contiguous_placement, imbalance, rank_rows, read_table

    table = read_table(str(ROOT / bench.EXPERT_DISTRIBUTION / "prefill_in4096.csv"), 256, 58)
    plain = [imbalance(rank_rows(row, contiguous_placement(256, 32))) for row in table]
    balanced = bench.layer_imbalance("prefill_in4096", 32, 1, 1)
    assert all(1.0 <= b <= p for b, p in zip(balanced, plain, strict=True))
    assert max(plain) > 2 and max(balanced) < 1.05  # real loads: a skew EPLB removes when it may replicate freely


def test_sglang_prefills_route_as_sglang_loads_of_their_prompt_length():
    # each SGLang prefill but the "simulated perfect EPLB" one runs SGLang's own loads for its prompt length
    for d in bench.DEPLOYMENTS:
        if not d.name.startswith("sglang-prefill"):
            continue
        overrides = bench.spec_of(d.args).override_dict()
        if d.name.endswith("balanced"):
            assert "routing" not in overrides
            continue
        prompt = overrides["prompt_lengths"][0]
        assert overrides["routing"] == "table" and d.name == f"sglang-prefill-{prompt // 1024}k"
        assert overrides["routing_table"].endswith(f"prefill_in{prompt}.csv")
        assert (ROOT / overrides["routing_table"]).is_file()


def test_draws_add_the_knob_to_decode_runs_only():
    """``--draws``: every decode deployment is one run with ``routing_draws`` and strided fluid drains set, at its
    own batch (the online decode at 88 per GPU, not 64 and 128); prefills stay as they are."""
    for d in bench.DEPLOYMENTS:
        drawn = bench.with_draws(d)
        if d.phase == "prefill":
            assert drawn == d
            continue
        (args,) = drawn.runs()
        base = d.args
        assert args[:len(base)] == base or d.per_gpu
        drawn_run, base_run = prepare(bench.spec_of(args)), prepare(bench.spec_of(base))
        assert drawn_run.workload_options.routing_draws and drawn_run.params.fluid.fluid_drain_step_s > 0
        assert not base_run.workload_options.routing_draws and base_run.params.fluid.fluid_drain_step_s == 0
        if d.per_gpu:  # the deployment's own batch per GPU, run directly
            assert drawn_run.workload_options.batch == d.per_gpu[0] * base_run.workload_options.batch // d.per_gpu[2]
