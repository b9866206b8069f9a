"""Property tests over Hugging Face config.json files: any file gives a model or a one-line error with
exit 2 (``moesim models show --json``), never a traceback."""

from __future__ import annotations

import json
import math
import tempfile
from pathlib import Path
from typing import Any

from cli_fuzz import assert_result_or_one_line_error, run_cli
from hf_config_samples import DEEPSEEK_V3, MIXTRAL_8X7B, QWEN3_30B_A3B
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

FUZZ = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
CONFIGS = [DEEPSEEK_V3, MIXTRAL_8X7B, QWEN3_30B_A3B]
KEYS = sorted({k for c in CONFIGS for k in c})
JUNK = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(-10**30, 10**30), st.sampled_from([0, 1, -1, 2**63, 10**400]),
              st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=10)),
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=6), inner, max_size=3)),
    max_leaves=6)


def dumps(value: Any) -> str:
    """JSON as Hugging Face writes it, but keeping what Python's json allows (NaN, Infinity, huge ints)."""
    return json.dumps(value, allow_nan=True)


@FUZZ
@given(st.sampled_from(CONFIGS), st.lists(st.tuples(st.sampled_from(KEYS), st.one_of(JUNK, st.just("<delete>"))),
                                          min_size=1, max_size=4))
def test_edited_configs_give_a_model_or_one_line(config: dict[str, Any], edits: list[tuple[str, Any]]) -> None:
    config = dict(config)
    for key, value in edits:
        if value == "<delete>":
            config.pop(key, None)
        else:
            config[key] = value
    check(dumps(config).encode())


@FUZZ
@given(st.one_of(st.binary(max_size=200), st.builds(dumps, JUNK).map(str.encode)))
def test_raw_bytes_give_a_model_or_one_line(data: bytes) -> None:
    check(data)


def check(data: bytes) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "config.json"
        path.write_bytes(data)
        code, out, err = run_cli("models", "show", str(path), "--json")
        assert_result_or_one_line_error(code, err)
        if code == 0:
            assert isinstance(json.loads(out), dict)


def test_an_unedited_config_gives_a_model() -> None:
    check(dumps(DEEPSEEK_V3).encode())
    assert not math.isnan(DEEPSEEK_V3["rms_norm_eps"])
