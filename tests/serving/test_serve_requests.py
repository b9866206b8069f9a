"""Requests: trace files (CSV and Parquet, one-line errors) and the seeded generators."""

from __future__ import annotations

import math

import numpy as np
import pyarrow as pa
import pyarrow.csv as pcsv
import pyarrow.parquet as pq
import pytest
from serve_helpers import TRACE

from moesim.errors import MoesimError
from moesim.serving import make_requests, parse_length, poisson, read_trace


def test_a_trace_is_replayed_by_arrival_time_and_keeps_its_row_numbers():
    raw = pcsv.read_csv(TRACE)
    r = read_trace(TRACE)
    assert len(r) == raw.num_rows == 40
    assert np.all(np.diff(r.arrival_s) >= 0)
    order = np.argsort(raw.column("arrival_s").to_numpy(), kind="stable")
    assert list(r.ids) == list(order) and list(r.ids) != list(range(40))  # the fixture has two rows out of order
    assert list(r.prompt_tokens) == [raw.column("prompt_tokens")[int(i)].as_py() for i in r.ids]


def test_parquet_and_csv_traces_give_the_same_requests(tmp_path):
    path = tmp_path / "trace.parquet"
    pq.write_table(pcsv.read_csv(TRACE), path)
    a, b = read_trace(TRACE), read_trace(path)
    assert a.fingerprint() == b.fingerprint()


@pytest.mark.parametrize("text,problem", [
    ("arrival_s,prompt_tokens\n0,5\n", "field 'output_tokens': missing column"),
    ("arrival_s,prompt_tokens,output_tokens\n0,5.5,3\n", "field 'prompt_tokens (row 1)': must be an integer"),
    ("arrival_s,prompt_tokens,output_tokens\n0,5,3\n-1,5,3\n", "field 'arrival_s (row 2)': must be a time"),
    ("arrival_s,prompt_tokens,output_tokens\n0,0,3\n", "field 'prompt_tokens (row 1)'"),
    ("arrival_s,prompt_tokens,output_tokens\n", "the trace has no requests"),
    ("arrival_s,prompt_tokens,output_tokens\nsoon,5,3\n", "field 'arrival_s': must hold numbers"),
])
def test_a_bad_trace_is_a_one_line_error_naming_file_and_field(tmp_path, text, problem):
    path = tmp_path / "bad.csv"
    path.write_text(text)
    with pytest.raises(MoesimError) as err:
        read_trace(path)
    assert str(path) in str(err.value) and problem in str(err.value) and "\n" not in str(err.value)


def test_poisson_gaps_have_mean_one_over_the_rate_within_their_error():
    n, rate = 20000, 8.0
    r = poisson(rate, n, parse_length("fixed:10", "p", "prompt_tokens"), parse_length("5", "o", "output_tokens"), 3)
    gaps = np.diff(np.concatenate([[0.0], r.arrival_s]))
    # exponential gaps: mean 1/rate, standard deviation 1/rate, so the mean's standard error is 1/(rate·√n)
    assert abs(gaps.mean() - 1 / rate) < 4 / (rate * math.sqrt(n))
    assert set(r.prompt_tokens) == {10} and set(r.output_tokens) == {5}


def test_the_same_seed_at_another_rate_scales_the_arrivals_and_keeps_the_lengths():
    p, o = parse_length("uniform:1:100", "p", "prompt_tokens"), parse_length("lognormal:50:0.5", "o", "output_tokens")
    a, b, c = poisson(2.0, 500, p, o, 11), poisson(4.0, 500, p, o, 11), poisson(2.0, 500, p, o, 12)
    np.testing.assert_allclose(b.arrival_s, a.arrival_s / 2, rtol=1e-15)
    assert np.array_equal(a.prompt_tokens, b.prompt_tokens) and np.array_equal(a.output_tokens, b.output_tokens)
    assert not np.array_equal(a.prompt_tokens, c.prompt_tokens)


def test_length_distributions_stay_in_their_ranges(tmp_path):
    rng = np.random.default_rng(0)
    u = parse_length("uniform:3:7", "p", "prompt_tokens").sample(rng, 5000)
    assert u.min() == 3 and u.max() == 7
    ln = parse_length("lognormal:1000:0.5:1500", "p", "prompt_tokens").sample(rng, 20001)
    assert ln.max() == 1500 and ln.min() >= 1
    # the median of a lognormal is exp(mu) = 1000; a 20001-draw sample median lies within a few percent
    assert abs(np.median(ln) / 1000 - 1) < 0.03
    t = parse_length(f"trace:{TRACE}", "p", "prompt_tokens").sample(rng, 1000)
    assert set(t) <= set(pcsv.read_csv(TRACE).column("prompt_tokens").to_pylist())
    path = tmp_path / "lengths.parquet"
    pq.write_table(pa.table({"n": [4, 9]}), path)
    assert set(parse_length(f"trace:{path}:n", "o", "output_tokens").sample(rng, 200)) == {4, 9}


@pytest.mark.parametrize("text", ["gauss:10", "uniform:9:3", "fixed:0", "lognormal:100", "fixed:1.5", "trace:"])
def test_a_bad_distribution_is_a_one_line_error(text):
    with pytest.raises(MoesimError) as err:
        parse_length(text, "--prompt", "prompt_tokens")
    assert "--prompt" in str(err.value) or "trace" in str(err.value)


def test_requests_need_a_trace_or_a_rate_but_not_both():
    with pytest.raises(MoesimError, match="not both"):
        make_requests(TRACE, 2.0)
    with pytest.raises(MoesimError, match="--rate"):
        make_requests()


def test_an_arrival_beyond_the_latest_time_is_refused(tmp_path):
    """At 1e300 s a step's duration vanishes in the rounding (TTFT, TPOT and E2E came out 0)."""
    path = tmp_path / "far.csv"
    path.write_text("arrival_s,prompt_tokens,output_tokens\n0,10,2\n1e300,10,2\n")
    with pytest.raises(MoesimError, match=r"far.csv: field 'arrival_s \(row 2\)': must be a time in \[0, 1e\+09\] s"):
        read_trace(path)
    with pytest.raises(MoesimError, match="--rate: field 'rate'"):
        poisson(1e-320, 20, parse_length("fixed:8", "p", "prompt_tokens"), parse_length("fixed:2", "o", "output_tokens"))
    slow = poisson(1.0, 20, parse_length("fixed:8", "p", "prompt_tokens"), parse_length("fixed:2", "o", "output_tokens"))
    with pytest.raises(MoesimError, match="the last request would arrive"):
        slow.scaled(1e-300)


def test_repeated_requests_follow_each_other_at_the_same_rate():
    r = poisson(10.0, 50, parse_length("uniform:1:100", "p", "prompt_tokens"), parse_length("fixed:2", "o", "output_tokens"))
    twice = r.repeated(2)
    assert len(twice) == 100 and np.all(np.diff(twice.arrival_s) > 0) and len(set(twice.ids)) == 100
    np.testing.assert_allclose(twice.arrival_s[50:] - twice.arrival_s[:50], r.arrival_s[-1] - r.arrival_s[0]
                               + (r.arrival_s[-1] - r.arrival_s[0]) / 49)
    assert twice.offered_rate_rps == pytest.approx(r.offered_rate_rps)
    assert list(twice.prompt_tokens) == list(r.prompt_tokens) * 2
