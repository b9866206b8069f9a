"""One validation path for every parameter: `run --set`, `sweep --set`, matrix YAML and the Python API
check a value with the same schema (type, unit, range) and refuse it with the same one-line error."""

from __future__ import annotations

import math
import subprocess
import sys

import pytest

from moesim.errors import MoesimError
from moesim.experiments.factors import canonical_level
from moesim.system.run import MAX_TOKENS, OVERRIDES, prepare
from moesim.system.spec import RunSpec

BAD = {  # (name, value as a user writes it, as the command line parses it) → what the error says
    "tokens=abc": ("tokens", "abc", "expected an integer"),
    "tokens=null": ("tokens", None, "expected an integer"),
    "tokens=nan": ("tokens", math.nan, "expected an integer"),
    "tokens=inf": ("tokens", math.inf, "expected an integer"),
    "tokens=[1]": ("tokens", [1], "expected an integer"),
    "tokens={}": ("tokens", {}, "expected an integer"),
    "tokens=1.5": ("tokens", 1.5, "expected an integer"),
    "tokens=true": ("tokens", True, "expected an integer"),
    "tokens=0": ("tokens", 0, "not allowed (int tokens in [1, 1e+09])"),
    "tokens=1e23": ("tokens", 99999999999999999999999, "not allowed (int tokens in [1, 1e+09])"),
    "buffer_bytes=abc": ("buffer_bytes", "abc", "expected an integer"),
    "buffer_bytes=-1": ("buffer_bytes", -1, "not allowed"),
    "cc_mode=abc": ("cc_mode", "abc", "expected an integer"),
    "start_jitter_s=-1e-9": ("start_jitter_s", -1e-9, "not allowed (float s in [0, 1])"),
    "rate_ai_bps=inf": ("rate_ai_bps", math.inf, "not allowed"),
    "fabric_bandwidth_bps=0": ("fabric_bandwidth_bps", 0, "not allowed (float bit/s in [1e+06, 1e+15])"),
    "fabric_bandwidth_bps=1e-300": ("fabric_bandwidth_bps", 1e-300, "not allowed (float bit/s in [1e+06, 1e+15])"),
    "fabric_bandwidth_bps=inf": ("fabric_bandwidth_bps", math.inf, "not allowed"),
    "fabric_bandwidth_bps=nan": ("fabric_bandwidth_bps", math.nan, "not allowed"),
    "fluid_window=wide": ("fluid_window", "wide", "not allowed (one of rate, bytes)"),
    "fluid_drain_step_s=-1e-7": ("fluid_drain_step_s", -1e-7, "not allowed (float s in [0, 0.001])"),
}


def spec(**over: object) -> RunSpec:
    return RunSpec("deepseek-v4-flash", "1", "TP2EP16", overrides=tuple(sorted(over.items())))


@pytest.mark.parametrize("case", sorted(BAD))
def test_run_and_sweep_refuse_alike(case: str) -> None:
    name, value, needle = BAD[case]
    with pytest.raises(MoesimError, match=rf"field '{name}'") as run_err:
        prepare(spec(**{name: value}))
    assert needle in str(run_err.value) and "\n" not in str(run_err.value)
    with pytest.raises(MoesimError, match=rf"field '{name}'") as sweep_err:
        canonical_level(name, value, "matrix.yaml")
    # the same sentence after the source
    assert str(run_err.value).split(": ", 1)[1] == str(sweep_err.value).split(": ", 1)[1]


def test_good_values_are_converted_to_their_type() -> None:
    assert prepare(spec(tokens="256")).tokens == 256
    assert prepare(spec(tokens=256.0)).tokens == 256
    assert prepare(spec(buffer_bytes="4e6")).params.switch.buffer_bytes == 4_000_000
    assert canonical_level("fabric_bandwidth_bps", "4e11", "cli") == 4e11
    assert prepare(spec(fast_forward="false")).settings.fast_forward is False


def test_every_parameter_has_a_unit_or_a_type_and_a_range() -> None:
    for name, p in OVERRIDES.items():
        assert p.describe() and p.section in ("workload", "system", "network", "topology", "placement"), name
        assert "inf" not in p.describe() or p.kind in (int, float), name
        if name.endswith(("_s", "_bps", "_bytes")):
            assert p.unit, name
    assert OVERRIDES["tokens"].allowed.high == MAX_TOKENS


@pytest.mark.slow
def test_the_command_line_refuses_with_exit_code_2() -> None:
    for item in ("tokens=abc", "tokens=1.5", "tokens=99999999999999999999999", "buffer_bytes=abc"):
        res = subprocess.run([sys.executable, "-m", "moesim.cli", "run", "--model", "deepseek-v4-flash", "--topology",
                              "1", "--strategy", "TP2EP16", "--backend", "packet", "--set", item],
                             capture_output=True, text=True, timeout=120)
        assert res.returncode == 2, (item, res.stderr)
        assert len(res.stderr.strip().splitlines()) == 1 and "Traceback" not in res.stderr, res.stderr
