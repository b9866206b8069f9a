"""One validation path for every parameter (moesim.schema): each declared parameter, drawn from outside its
allowed values (below or above its range, NaN, an infinity, a fraction where an integer is wanted, a name
not among its choices, a value of another type, a list nested too deep), is refused on the command line
with one line naming it and exit code 2; so is each field of a model file."""

from __future__ import annotations

import contextlib
import io
import json
import math
import tempfile
from importlib import resources
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from moesim.cli import run_cli
from moesim.models.spec import AttentionSpec, ModelSpec
from moesim.schema import Param
from moesim.system.run import OVERRIDES

RUN = ["run", "--model", "deepseek-v4-flash", "--topology", "1", "--strategy", "TP2EP16", "--backend", "flow",
       "--progress", "none"]
EXAMPLES = 6
"""Examples per parameter: the parameters are many, each refusal takes milliseconds."""


def _floats(**bounds: Any) -> st.SearchStrategy[float]:
    return st.floats(allow_nan=False, allow_infinity=False, **bounds)


def out_of_range(p: Param) -> st.SearchStrategy[Any]:
    """Values ``p`` does not allow, as a user could write them."""
    item = p.item
    wrong_type = st.sampled_from([{"a": 1}, "not-a-value" if item is not str else 7])
    c = p.allowed
    if c.choices:
        bad: st.SearchStrategy[Any] = st.one_of(
            st.text("abcdefghijklmnopqrstuvwxyz_", min_size=1, max_size=12).filter(lambda v: v not in c.choices),
            st.integers(-5, 100).filter(lambda v: v not in c.choices))
    elif item in (int, float):
        parts: list[st.SearchStrategy[Any]] = [st.sampled_from([math.nan, math.inf, -math.inf])]
        if c.low is not None:
            parts.append(st.integers(max_value=math.ceil(c.low) - 1) if item is int
                         else _floats(max_value=c.low, exclude_max=not c.low_open))
        if c.high is not None:
            parts.append(st.integers(min_value=math.floor(c.high) + 1) if item is int
                         else _floats(min_value=c.high, exclude_min=not c.high_open))
        if item is int:
            parts.append(_floats(min_value=-1e6, max_value=1e6).filter(lambda v: not v.is_integer()))
        bad = st.one_of(parts)
    elif item is bool:
        bad = st.sampled_from(["maybe", 2, 0.5, "yes"])
    else:  # a rule or a file
        bad = st.sampled_from(["no-such-rule", "/nonexistent/file.yaml"])
    if p.is_list:
        bad = st.one_of(bad.map(lambda v: [v]), st.just([[[1]]]), st.just("[x"))
    return st.one_of(bad, wrong_type)


def run(args: list[str]) -> tuple[int, str]:
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        code = run_cli(args)
    return code, err.getvalue()


def assert_refused(code: int, err: str, field: str, file: str = "") -> None:
    """Exit 2 and one line naming the field (or, for a file-valued parameter, the file)."""
    lines = err.strip().splitlines()
    assert code == 2, (code, err)
    assert len(lines) == 1 and lines[0].startswith("moesim: error: ") and "Traceback" not in err, err
    assert f"field '{field}'" in lines[0] or (file and lines[0].startswith(f"moesim: error: {file}: ")), lines[0]


@pytest.mark.parametrize("name", sorted(OVERRIDES))
@settings(max_examples=EXAMPLES, deadline=None, derandomize=True)
@given(data=st.data())
def test_every_run_parameter_out_of_range_is_one_line_and_exit_2(name: str, data: st.DataObject) -> None:
    value = data.draw(out_of_range(OVERRIDES[name]), label=name)
    text = value if isinstance(value, str) else json.dumps(value)
    assert_refused(*run([*RUN, "--set", f"{name}={text}"]), name, file=text if text.endswith(".yaml") else "")


BUILTIN = yaml.safe_load((resources.files("moesim.models") / "data" / "deepseek-v4-flash.yaml").read_text())
MODEL_FIELDS = [(p, prefix) for cls, prefix in ((ModelSpec, ""), (AttentionSpec, "attention."))
                for p in Param.of(cls, "model") if p.item is not str]
"""Every declared field of a model file but its free-text ones (key, name)."""


@pytest.mark.parametrize("param,prefix", MODEL_FIELDS, ids=[prefix + p.name for p, prefix in MODEL_FIELDS])
@settings(max_examples=EXAMPLES, deadline=None, derandomize=True)
@given(data=st.data())
def test_every_model_field_out_of_range_is_one_line_and_exit_2(param: Param, prefix: str, data: st.DataObject) -> None:
    value = data.draw(out_of_range(param), label=param.name)
    model = json.loads(json.dumps(BUILTIN))
    (model["attention"] if prefix else model)[param.name] = value
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "model.yaml"
        path.write_text(yaml.safe_dump(model))
        assert_refused(*run(["models", "show", str(path)]), prefix + param.name)


def test_every_numeric_parameter_has_a_bounded_range() -> None:
    """So that the suites above can draw from above every range, and no parameter accepts an absurd size."""
    params = [*OVERRIDES.values(), *(p for p, _ in MODEL_FIELDS)]
    unbounded = [p.name for p in params if p.item in (int, float) and not p.allowed.choices
                 and (p.allowed.low is None or p.allowed.high is None)]
    assert unbounded == []
