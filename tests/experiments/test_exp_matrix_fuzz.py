"""Property tests over matrices: the dry-run count is the number of runs the sweep would plan, its
checks refuse exactly what planning refuses, and any matrix YAML gives a count or a one-line error."""

from __future__ import annotations

import copy
import tempfile
from pathlib import Path
from typing import Any

import yaml
from cli_fuzz import assert_result_or_one_line_error, run_cli
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from moesim.errors import MoesimError
from moesim.experiments.inputs import check_matrix, plan_runs
from moesim.experiments.matrix import Matrix, load_matrix

FUZZ = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])

LEVELS: dict[str, list[Any]] = {
    "model": ["deepseek-v4-flash", "kimi-k3"],
    "topology": ["1", "4", "6"],
    "strategy": ["TP2EP16", "TP4EP4", "TP1EP32", "TP8EP4"],
    "algorithm": ["ring_direct", "dbt_direct"],
    "network": ["ib_cc0", "roce_dcqcn"],
    "backend": ["fluid", "flow"],
    "tokens": [1024, 2048, 4096],
    "jitter_seed": [1, 2, 3],
}
REQUIRED = ("model", "topology", "strategy")


def levels(factor: str, min_size: int = 1) -> st.SearchStrategy[list[Any]]:
    return st.lists(st.sampled_from(LEVELS[factor]), min_size=min_size, max_size=len(LEVELS[factor]), unique=True)


@st.composite
def matrices(draw: st.DrawFn) -> dict[str, Any]:
    """A valid matrix document: the three required factors, some others, include and exclude entries."""
    optional = draw(st.lists(st.sampled_from([f for f in LEVELS if f not in REQUIRED]), max_size=3, unique=True))
    factors = {f: draw(levels(f)) for f in (*REQUIRED, *optional)}
    entry = st.lists(st.sampled_from(list(LEVELS)), min_size=1, max_size=3, unique=True).flatmap(
        lambda names: st.fixed_dictionaries({n: levels(n) for n in names}))
    doc: dict[str, Any] = {"name": "fuzz", "factors": factors}
    include, exclude = draw(st.lists(entry, max_size=2)), draw(st.lists(entry, max_size=3))
    if include:
        doc["include"] = include
    if exclude:
        doc["exclude"] = exclude
    return doc


def load(doc: Any, tmp: str) -> Matrix:
    path = Path(tmp) / "matrix.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False, allow_unicode=True))
    return load_matrix(path)


@FUZZ
@given(matrices())
def test_the_count_and_checks_agree_with_planning(doc: dict[str, Any]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        matrix = load(doc, tmp)
        try:
            runs = matrix.runs()
        except MoesimError as exc:  # everything excluded: the count refuses alike
            assert "has no runs" in str(exc)
            try:
                matrix.count_runs()
            except MoesimError as again:
                assert str(again) == str(exc)
                return
            raise AssertionError("count_runs accepted a matrix without runs") from None
        assert matrix.count_runs() == len(runs)
        try:
            planned: int | str = len(plan_runs(runs, source=matrix.source))
        except MoesimError as exc:
            planned = str(exc).split(" runs are impossible")[0]  # "SOURCE: K of N"
        try:
            checked: int | str = check_matrix(matrix)
        except MoesimError as exc:
            checked = str(exc).split(" runs are impossible")[0]
        assert checked == planned


# Junk for matrix fields: wrong types, unknown names, values out of range, huge counts of nothing.
JUNK = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(-10**20, 10**20), st.floats(allow_nan=True, allow_infinity=True),
              st.text(max_size=10), st.sampled_from(["TP2EP16", "TP0EP0", "6", "7", "x.yaml", "/etc/passwd", "kimi-k3",
                                                     "tokens", "exclude", "inf", "1e999", "-1", "ring_direct"])),
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(st.one_of(st.text(max_size=8), st.sampled_from(
        [*LEVELS, "factors", "include", "exclude", "presets", "colour"])), inner, max_size=3)),
    max_leaves=8)
KEYS = ["name", "description", "factors", "include", "exclude", "presets", "diagnostics", "colour", *LEVELS]


@FUZZ
@given(matrices(), st.lists(st.tuples(st.sampled_from(KEYS), st.sampled_from(KEYS), JUNK), min_size=1, max_size=3))
def test_any_matrix_file_gives_a_count_or_one_line(doc: dict[str, Any], edits: list[tuple[str, str, Any]]) -> None:
    doc = copy.deepcopy(doc)
    for top, inner, value in edits:  # replace a top-level value, or one inside a mapping
        if isinstance(doc.get(top), dict) and inner in LEVELS:
            doc[top][inner] = value
        else:
            doc[top] = value
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "matrix.yaml"
        path.write_text(yaml.safe_dump(doc, sort_keys=False, allow_unicode=True))
        code, out, err = run_cli("sweep", "run", str(path), "--out", str(Path(tmp) / "out"), "--dry-run")
        assert_result_or_one_line_error(code, err)
        assert code == 2 or " runs, all valid" in out
        assert not (Path(tmp) / "out").exists()


@FUZZ
@given(st.binary(max_size=200))
def test_raw_bytes_give_a_count_or_one_line(data: bytes) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "matrix.yaml"
        path.write_bytes(data)
        code, _, err = run_cli("sweep", "run", str(path), "--out", str(Path(tmp) / "out"), "--dry-run")
        assert_result_or_one_line_error(code, err)
