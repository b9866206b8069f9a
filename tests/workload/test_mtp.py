"""Multi-token prediction in decode (``workload/mtp.py``): tokens per step in closed form, the step's graph
(the main model over k + 1 tokens per sequence, the MTP layer k times over the batch), the oracle that
drafts nobody accepts only cost time and that drafts always accepted give k + 1 tokens per step, and that
runs without MTP keep their keys."""

from __future__ import annotations

import json
from pathlib import Path

import duckdb
import pytest

from moesim.errors import MoesimError
from moesim.experiments.inputs import input_hash, resolved_inputs
from moesim.experiments.runner import run_sweep
from moesim.models.catalog import get_model
from moesim.system.run import simulate_run
from moesim.system.spec import RunSpec
from moesim.workload.costs import attention_shard
from moesim.workload.generator import generate
from moesim.workload.layout import ParallelLayout
from moesim.workload.mtp import tokens_per_step
from moesim.workload.options import WorkloadOptions

MODEL, STRATEGY = "qwen3-30b-a3b", "TP1EP8"


@pytest.mark.parametrize(("k", "a", "expected"), [
    (1, 0.0, 1.0), (3, 0.0, 1.0),          # nothing accepted: the verified token only
    (1, 1.0, 2.0), (4, 1.0, 5.0),          # everything accepted: k + 1
    (1, 0.85, 1.85),                       # DeepSeek-V3's second token at 85 %
    (2, 0.5, 1.75), (3, 0.9, 1 + 0.9 + 0.81 + 0.729),
])
def test_tokens_per_step_is_the_chained_sum(k: int, a: float, expected: float) -> None:
    assert tokens_per_step(k, a) == pytest.approx(expected, rel=1e-15)


def _decode(batch: int, context: int = 1024, **mtp: object):
    options = WorkloadOptions(phase="decode", batch=batch, context_tokens=context, **mtp)  # type: ignore[arg-type]
    return generate(get_model(MODEL), ParallelLayout.parse(STRATEGY), options=options).graphs[0].nodes


def _sum(nodes, name: str, layers: range, what: str = "flops") -> int:
    return sum(getattr(n, what) for n in nodes if n.name == name and n.layer in layers)


@pytest.mark.parametrize("k", [1, 3])
def test_the_step_verifies_k_plus_1_tokens_and_runs_the_mtp_layer_k_times(k: int) -> None:
    model, batch, context = get_model(MODEL), 8, 1024
    mtp = _decode(batch, context, mtp_draft_tokens=k, mtp_acceptance=0.5)
    wide = _decode(batch * (k + 1), context)   # the main model over B·(k + 1) single-token sequences
    plain = _decode(batch, context)            # one MTP pass: a MoE layer over the B sequences
    main, extra = range(model.num_layers), range(model.num_layers, model.num_layers + k)
    assert max(n.layer for n in mtp) == model.num_layers + k - 1
    for name in ("routed_experts", "shared_ffn"):
        assert _sum(mtp, name, main) == _sum(wide, name, main)
        assert _sum(mtp, name, extra) == k * _sum(plain, name, range(1))
    for name in ("ep_dispatch", "ep_combine"):
        assert _sum(mtp, name, main, "size_bytes") == _sum(wide, name, main, "size_bytes")
        assert _sum(mtp, name, extra, "size_bytes") == k * _sum(plain, name, range(1), "size_bytes")
    # attention: FLOPs of B·(k + 1) queries, but each sequence's cache read once, not k + 1 times
    cache = batch * context * attention_shard(model, 1).kv_cache_bytes_per_token  # B·C cached tokens
    layer0 = next(n for n in mtp if n.name == "attention" and n.layer == 0)
    wide0 = next(n for n in wide if n.name == "attention" and n.layer == 0)
    assert layer0.flops == wide0.flops
    assert wide0.bytes_moved - layer0.bytes_moved == k * cache
    # each MTP pass starts with the module's projection, 2·hidden² weights (read at 1 byte) over B tokens
    hidden = model.hidden_size
    projections = [n for n in mtp if n.name == "mtp_projection"]
    assert [n.layer for n in projections] == list(extra)
    assert all(n.flops == 2 * batch * 2 * hidden ** 2 for n in projections)
    assert all(n.bytes_moved == 2 * hidden ** 2 + 3 * batch * hidden * 2 for n in projections)


def _run(batch: int, **mtp: object):
    overrides = {"phase": "decode", "batch": batch, "context_tokens": 2048, "gpu": "h800", **mtp}
    return simulate_run(RunSpec(MODEL, "hgx-h800:1", STRATEGY, overrides=tuple(sorted(overrides.items()))))


def test_acceptance_0_costs_more_per_token_and_acceptance_1_gives_k_plus_1_tokens() -> None:
    """Oracle: with nothing accepted a step still yields one token per sequence but pays for the drafts
    and their verification; with everything accepted it yields k + 1 for less than k + 1 plain steps
    (a small decode batch reads its weights once for all k + 1 tokens)."""
    k, batch = 2, 8
    plain = _run(batch)
    none = _run(batch, mtp_draft_tokens=k, mtp_acceptance=0.0)
    every = _run(batch, mtp_draft_tokens=k, mtp_acceptance=1.0)
    per_token = {name: r.wall_s / r.parameters["decode"].get("tokens_per_step", 1)
                 for name, r in (("plain", plain), ("none", none), ("every", every))}
    assert none.parameters["decode"]["tokens_per_step"] == 1.0
    assert every.parameters["decode"]["tokens_per_step"] == k + 1
    assert per_token["none"] > per_token["plain"]
    assert per_token["every"] < per_token["plain"]
    assert none.wall_s == every.wall_s  # the acceptance changes the tokens, not the step
    assert "tokens_per_step" not in plain.parameters["decode"]
    steps = every.parameters["decode"]["decode_steps"]  # the record's throughput counts every accepted token
    assert every.summary()["tokens_per_s"] == pytest.approx(batch * steps * (k + 1) / every.wall_s, rel=1e-12)
    assert plain.summary()["tokens_per_s"] == pytest.approx(batch * steps / plain.wall_s, rel=1e-12)


def test_acceptance_is_no_simulation_input_and_unset_mtp_keeps_the_key() -> None:
    def spec(**extra: object) -> RunSpec:
        overrides = {"phase": "decode", "batch": 8, **extra}
        return RunSpec(MODEL, "hgx-h800:1", STRATEGY, overrides=tuple(sorted(overrides.items())))
    assert input_hash(spec(mtp_draft_tokens=1, mtp_acceptance=0.8)) == input_hash(spec(mtp_draft_tokens=1,
                                                                                       mtp_acceptance=0.9))
    assert input_hash(spec(mtp_draft_tokens=1, mtp_acceptance=0.8)) != input_hash(spec())
    assert not any(k.startswith("mtp") for k in resolved_inputs(spec())["workload_options"])


@pytest.mark.parametrize(("kwargs", "needle"), [
    ({"mtp_draft_tokens": 1, "mtp_acceptance": 0.8}, "applies only with phase=decode"),
    ({"phase": "decode", "mtp_draft_tokens": 2}, "field 'mtp_acceptance': mtp_draft_tokens needs it"),
    ({"phase": "decode", "mtp_acceptance": 0.5}, "field 'mtp_draft_tokens': mtp_acceptance needs it"),
    ({"phase": "decode", "mtp_draft_tokens": 1, "mtp_acceptance": 1.5}, "field 'mtp_acceptance'"),
    ({"phase": "decode", "mtp_draft_tokens": 0, "mtp_acceptance": 0.5}, "field 'mtp_draft_tokens'"),
])
def test_bad_mtp_options_are_one_line_errors(kwargs: dict, needle: str) -> None:
    with pytest.raises(MoesimError, match=needle) as err:
        WorkloadOptions(**kwargs)
    assert "\n" not in str(err.value)


def test_a_sweep_over_the_acceptance_simulates_once_and_stores_each_runs_tokens(tmp_path: Path) -> None:
    """Real sweep into a real store: two acceptances, one simulation, each row its own tokens per step."""
    specs = [RunSpec(MODEL, "hgx-h800:1", STRATEGY, overrides=tuple(sorted(
        {"phase": "decode", "batch": 8, "mtp_draft_tokens": 2, "mtp_acceptance": a}.items()))) for a in (0.5, 1.0)]
    summary = run_sweep(specs, tmp_path, progress="none")
    assert (summary.ran, summary.simulations, summary.failures) == (2, 1, ())
    con = duckdb.connect(str(tmp_path / "results.duckdb"), read_only=True)
    rows = con.execute("SELECT params_json, wall_s FROM runs").fetchall()
    con.close()
    tokens = sorted(json.loads(p)["decode"]["tokens_per_step"] for p, _ in rows)
    assert tokens == [1 + 0.5 + 0.25, 3.0]
    assert rows[0][1] == rows[1][1]
