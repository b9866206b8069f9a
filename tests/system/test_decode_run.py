"""Decode runs end to end: latency-bound at batch 1, bandwidth-bound at a large batch; the per-step figures
of RunResult.summary, the report's runs table and `moesim run`; one-line errors for misplaced decode knobs."""

from __future__ import annotations

import json
import subprocess
import sys

import pyarrow as pa
import pytest

from moesim.analysis.report import decode_columns
from moesim.errors import MoesimError
from moesim.system.run import simulate_run
from moesim.system.spec import RunSpec
from moesim.topology.catalog import get_topology

DOUBLED = {f"{link.kind}_bandwidth_bps": 2 * link.bandwidth_bps for link in get_topology("1").links}
"""Every link kind of topology 1 (PCIe, fabric) at twice its bandwidth."""


def step_s(batch: int, context: int, **links: float) -> float:
    over = {"phase": "decode", "batch": batch, "context_tokens": context, **links}
    spec = RunSpec("deepseek-v4-flash", "1", "TP4EP8", backend="flow", overrides=tuple(sorted(over.items())))
    return simulate_run(spec).summary()["step_s"]


def test_batch_one_is_latency_bound_and_a_large_batch_bandwidth_bound():
    """Doubling every link's bandwidth: < 10 % at batch 1 (messages of a few KB: per-message latency),
    > 25 % at batch 4096 with a short context (25 MB all-to-all buffers dominate the step)."""
    assert len({bw for bw in DOUBLED.values()}) == 2  # both link kinds of the topology are doubled
    small, small_fast = step_s(1, 256), step_s(1, 256, **DOUBLED)
    big, big_fast = step_s(4096, 256), step_s(4096, 256, **DOUBLED)
    assert abs(small - small_fast) / small < 0.10
    assert (big - big_fast) / big > 0.25
    assert big > 5 * small


def test_summary_adds_step_figures_only_for_decode():
    decode = simulate_run(RunSpec("deepseek-v4-flash", "1", "TP4EP8", backend="analytical",
                                  overrides=(("batch", 8), ("decode_steps", 3), ("phase", "decode"))))
    prefill = simulate_run(RunSpec("deepseek-v4-flash", "1", "TP4EP8", backend="analytical",
                                   overrides=(("tokens", 64),)))
    d, p = decode.summary(), prefill.summary()
    assert set(d) - set(p) == {"step_s", "tokens_per_s"} and set(p) <= set(d)
    assert d["step_s"] == decode.wall_s / 3 and d["tokens_per_s"] == 8 * 3 / decode.wall_s
    assert d["parameters"]["decode"] == {"batch": 8, "context_tokens": 4096, "decode_steps": 3}
    assert d["parameters"]["tokens"] == 24 and "decode" not in p["parameters"]
    # the report's runs table reads the same figures back from the stored parameters
    rows = pa.table({"wall_s": [decode.wall_s, prefill.wall_s],
                     "params_json": [json.dumps(d["parameters"]), json.dumps(p["parameters"])]})
    assert decode_columns(rows) == {"step_s": pa.array([d["step_s"], None], pa.float64()),
                                    "tokens_per_s": pa.array([d["tokens_per_s"], None], pa.float64())}
    assert decode_columns(rows.slice(1)) == {}


def test_tokens_is_refused_in_a_decode_run():
    spec = RunSpec("deepseek-v4-flash", "1", "TP4EP8", overrides=(("phase", "decode"), ("tokens", 64)))
    with pytest.raises(MoesimError, match="field 'tokens': a prefill length"):
        simulate_run(spec)


def moesim(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "moesim.cli", "run", "--model", "deepseek-v4-flash", "--topology",
                           "1", "--strategy", "TP4EP8", "--backend", "analytical", "--progress", "none", *args],
                          capture_output=True, text=True, check=False)


@pytest.mark.slow
def test_run_flags_map_to_the_decode_overrides():
    res = moesim("--phase", "decode", "--batch", "4", "--context", "100", "--steps", "2", "--json")
    assert res.returncode == 0, res.stderr
    record = json.loads(res.stdout)
    assert record["overrides"] == {"phase": "decode", "batch": 4, "context_tokens": 100, "decode_steps": 2}
    assert record["step_s"] == record["wall_s"] / 2
    text = moesim("--phase", "decode", "--batch", "4", "--context", "100", "--steps", "2")
    assert text.returncode == 0, text.stderr
    assert f"{record['step_s'] * 1e3:.6f} ms per step" in text.stdout and "tokens/s" in text.stdout


@pytest.mark.parametrize("args,needle", [
    (["--batch", "4"], "field 'batch': applies only with phase=decode"),
    (["--phase", "decode", "--set", "decode_steps=2", "--steps", "3"], "decode_steps"),
    (["--phase", "decode", "--batch", "0"], "field 'batch': 0 is not allowed"),
])
def test_bad_decode_flags_are_one_line_errors(args, needle):
    res = moesim(*args)
    assert res.returncode == 2, res.stdout
    assert needle in res.stderr and len(res.stderr.strip().splitlines()) == 1
