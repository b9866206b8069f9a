"""One declaration of every serving knob: SchedulerConfig's fields are moesim.schema params whose defaults the
API and the CLI read; a deployment holds a RunSpec template; durations read as the topology layer reads them."""

from __future__ import annotations

import inspect
import os
import subprocess
import sys

import pytest

import moesim.api as api
from moesim.errors import MoesimError
from moesim.serving import Deployment, SchedulerConfig, parse_duration_s
from moesim.serving.deployment import ROLES
from moesim.system.spec import RunSpec


@pytest.mark.parametrize("field,value,message", [
    ("token_budget", 0, "scheduler: field 'token_budget': 0 is not allowed (int in [1, 1e+07])"),
    ("token_budget", True, "scheduler: field 'token_budget': expected an integer, got True"),
    ("chunk_tokens", 2.5, "scheduler: field 'chunk_tokens': expected an integer"),
    ("memory_fraction", 1.5, "scheduler: field 'memory_fraction': 1.5 is not allowed (float in (0, 1])"),
    ("gpu_memory_bytes", float("inf"), "scheduler: field 'gpu_memory_bytes': inf is not allowed"),
    ("policy", "random", "scheduler: field 'policy': unknown policy 'random' (allowed: decode-first, prefill-first)"),
    ("max_seqs", 10**5, "scheduler: field 'max_seqs': 100000 sequences need a token budget"),
])
def test_a_bad_scheduler_field_is_one_line_naming_it(field, value, message):
    with pytest.raises(MoesimError) as err:
        SchedulerConfig(**{field: value})
    assert message in str(err.value) and "\n" not in str(err.value)


def test_the_api_takes_its_defaults_from_the_declared_fields():
    """``moesim.serve``/``serve_search`` default to SchedulerConfig's and RunSpec's fields (a changed default
    there changes them here)."""
    scheduler = SchedulerConfig()
    spec = RunSpec("m", "t", "TP1EP1")
    for fn in (api.serve, api.serve_search):
        params = inspect.signature(fn).parameters
        for name in ("token_budget", "max_seqs", "chunk_tokens", "policy", "kv_tokens", "gpu_memory_bytes",
                     "memory_fraction"):
            assert params[name].default == getattr(scheduler, name), (fn.__name__, name)
        for name in ("algorithm", "network", "backend"):
            assert params[name].default == getattr(spec, name), (fn.__name__, name)
    assert inspect.signature(api.run).parameters["backend"].default == spec.backend
    assert inspect.signature(api.load_topology).parameters["network"].default == spec.network


def test_the_cli_help_shows_the_declared_defaults():
    out = subprocess.run([sys.executable, "-m", "moesim", "serve", "--help"], capture_output=True, text=True,
                         timeout=120, env=dict(os.environ, COLUMNS="200"))
    assert out.returncode == 0, out.stderr
    text = " ".join(out.stdout.split())
    s = SchedulerConfig()
    for option, default in (("--token-budget", s.token_budget), ("--max-seqs", s.max_seqs),
                            ("--memory-fraction", s.memory_fraction), ("--gpu-memory-gb", s.gpu_memory_bytes / 1e9)):
        assert option in text and f"[default: {default}]" in text.split(option, 1)[1][:400], option


def test_a_deployment_holds_its_run_template():
    template = RunSpec("deepseek-v4-flash", "hgx-h100:4", "tp2ep8", backend="flow",
                       overrides=(("fabric_bandwidth_bps", "400e9"),))
    d = Deployment(template, disaggregate=(2, 2))
    assert d.run.strategy == "TP2EP8" and d.run.overrides == (("fabric_bandwidth_bps", 400e9),)
    assert Deployment("deepseek-v4-flash", "hgx-h100:4", "TP2EP8", backend="flow",
                      overrides=(("fabric_bandwidth_bps", 400e9),), disaggregate=(2, 2)) == d
    reps = d.replicas()
    assert {r.role for r in reps} <= set(ROLES)
    # a step's run is the template on the replica's own cluster, with the step's knobs added to the overrides
    assert reps[0].kind.spec(tokens=64) == RunSpec("deepseek-v4-flash", "hgx-h100:2", "TP2EP8", "ring_direct", "ib_cc0",
                                                   "flow", (("fabric_bandwidth_bps", 400e9), ("tokens", 64)))
    record = d.as_dict()
    assert list(record) == ["model", "topology", "strategy", "algorithm", "network", "backend", "overrides",
                            "disaggregate", "prefill_strategy", "mode"]
    with pytest.raises(MoesimError, match="already holds"):
        Deployment(template, "star:2")


@pytest.mark.parametrize("text,seconds", [("1s", 1.0), ("50ms", 0.05), ("200us", 2e-4), ("0.2µs", 0.2e-6),
                                          ("3", 3.0), (0.5, 0.5), ("5 s", 5.0)])
def test_durations_read_as_the_topology_layer_reads_them(text, seconds):
    assert parse_duration_s(text, "--slo-ttft") == seconds


@pytest.mark.parametrize("text,message", [("soon", "cannot read 'soon'"), ("-1s", "cannot read '-1s'"),
                                          ("0ms", "must be a finite time > 0"), ("1e-400s", "must be a finite time > 0"),
                                          (float("nan"), "must be a finite time > 0")])
def test_a_bad_duration_is_one_line_naming_the_option(text, message):
    with pytest.raises(MoesimError) as err:
        parse_duration_s(text, "--slo-tpot")
    assert str(err.value).startswith("--slo-tpot: field 'duration': ") and message in str(err.value)
