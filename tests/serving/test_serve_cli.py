"""`moesim serve` and `moesim serve search` through the real entry point, with their store and report."""

from __future__ import annotations

import json
import os
import re
import threading
from pathlib import Path

import pyarrow.csv as pcsv
import pytest
from cli_fuzz import run_cli
from serve_helpers import TRACE

from moesim.experiments.store import query_results

SMALL = ("--token-budget", "1024", "--max-seqs", "8")


def serve_args(model: str, cache: Path, *more: str) -> list[str]:
    return ["serve", "--model", model, "--topology", "star:2", "--strategy", "TP1EP2", "--backend", "flow",
            "--cache", str(cache), *SMALL, *more]


def test_serve_a_trace_twice_gives_the_same_requests_and_stores_a_report(tiny_model, cache_dir, tmp_path):
    out = tmp_path / "store"
    files = [tmp_path / "a.csv", tmp_path / "b.csv"]
    for f in files:
        code, stdout, err = run_cli(*serve_args(tiny_model, cache_dir, "--trace", str(TRACE), "--slo-ttft", "10ms",
                                                "--slo-tpot", "1ms", "--per-request", str(f), "--out", str(out),
                                                "--json", "--check-points", "0"))
        assert code == 0, err
    record = json.loads(stdout)
    assert record["requests"] == 40 and record["mode"] == "colocated" and 0 <= record["slo_attainment"] <= 1
    assert record["mean_in_system"] == pytest.approx(record["little_lambda_w"], rel=1e-9)
    assert files[0].read_bytes() == files[1].read_bytes()
    assert pcsv.read_csv(files[0]).num_rows == 40
    rows = query_results(out, "SELECT serve_id, requests, requests_path, ttft_p90_s FROM serving")
    assert rows.num_rows == 1 and rows.column("ttft_p90_s")[0].as_py() == record["ttft_p90_s"]  # rerun: replaced
    assert (out / rows.column("requests_path")[0].as_py()).is_file()
    code, stdout, err = run_cli("report", str(out))
    assert code == 0, err
    page = (out / "report.html").read_text()
    assert '<section id="serving"><h2>Serving</h2>' in page and "Latency CDFs" in page
    assert (out / "figures" / "serving_latency_cdf.png").is_file()


def test_serve_prints_the_figures(tiny_model, cache_dir):
    code, stdout, err = run_cli(*serve_args(tiny_model, cache_dir, "--rate", "100", "--requests", "100",
                                            "--prompt", "uniform:16:500", "--output", "fixed:8", "--slo-ttft", "1s"))
    assert code == 0, err
    for text in ("TTFT", "TPOT", "E2E", "throughput", "goodput", "Little's law", "interpolation error"):
        assert text in stdout
    assert "step costs:" in stdout


def test_each_latency_line_keeps_one_time_unit(cache_dir):
    """Outputs from 1 to 8192 tokens spread E2E from below to above a second: the line stays in one unit."""
    code, stdout, err = run_cli("serve", "--model", "qwen3-30b-a3b", "--topology", "hgx-h100:1", "--strategy",
                                "TP1EP8", "--backend", "flow", "--cache", str(cache_dir), "--rate", "5", "--requests",
                                "40", "--output", "lognormal:400:1.2:8192")
    assert code == 0, err
    lines = {line.split()[0]: line for line in stdout.splitlines() if line.strip().startswith(("TTFT", "TPOT", "E2E"))}
    assert set(lines) == {"TTFT", "TPOT", "E2E"}
    e2e = re.findall(r"(\d[\d.]*) (ms|s)\b", lines["E2E"])
    assert len(e2e) == 4 and {u for _, u in e2e} == {"s"} and min(float(v) for v, _ in e2e) < 1
    for line in lines.values():
        assert len(set(re.findall(r"\d (ms|s)\b", line))) == 1, line


@pytest.mark.parametrize("args,code,message", [
    (["--trace", "missing.csv"], 2, "missing.csv: trace file not found"),
    (["--rate", "5", "--slo-ttft", "soon"], 2, "--slo-ttft: field 'duration'"),
    (["--rate", "5", "--disaggregate", "2"], 2, "expected PREFILL_SERVERS:DECODE_SERVERS"),
    (["--rate", "5", "--disaggregate", "1:1", "--prefill-strategy", "TP2EP2"], 2, "takes 4 servers per replica"),
    (["--rate", "5", "--policy", "random"], 2, "field 'policy'"),
    (["--rate", "5", "--set", "tokens=64"], 2, "set by the serving simulator"),
    ([], 2, "give a trace"),
    (["--rate", "5", "--slo-ttft", "1e1000000s"], 2, "--slo-ttft: field 'duration': cannot read the number"),
    (["--rate", "5", "--slo-ttft", "1e-400s"], 2, "--slo-ttft: field 'duration': must be a finite time > 0"),
    (["--rate", "5", "--slo-ttft", ""], 2, "--slo-ttft: field 'duration': cannot read ''"),
    (["--rate", "5", "--gpu-memory-gb", "inf"], 2, "--gpu-memory-gb: field 'memory': must be a finite number"),
    (["--rate", "5", "--requests", "1000000000"], 2, "--requests: field 'requests': must be an integer in [1, 1000000]"),
    (["--rate", "5", "--disaggregate", ""], 2, "--disaggregate '': expected PREFILL_SERVERS:DECODE_SERVERS"),
    (["--rate", "5", "--kv-backend", "bogus"], 2, "--kv-backend: field 'backend': unknown backend 'bogus'"),
    (["--rate", "1e-320"], 2, "--rate: field 'rate': 1000 requests at"),
    (["--trace", str(TRACE.parent)], 2, f"{TRACE.parent}: is a directory, not a trace file"),
    (["--rate", "5", "--set", "overlap=two-batch"], 2, "--set overlap: serving does not model two-batch overlap"),
    (["--rate", "5", "--set", "micro_batches=2"], 2, "--set micro_batches: serving does not model two-batch overlap"),
    (["--rate", "5", "--executor", "bogus"], 2, "--executor: field 'executor': unknown executor 'bogus' (allowed: "),
])
def test_bad_input_is_one_line_with_exit_code_2(tiny_model, cache_dir, args, code, message):
    got, _, err = run_cli(*serve_args(tiny_model, cache_dir, *args))
    assert got == code and message in err and err.count("\n") == 1, err


def test_a_pipe_holding_a_trace_is_read_as_the_file_is(tiny_model, cache_dir, tmp_path):
    """``--trace`` on a FIFO (as ``--trace <(zcat trace.csv.gz)`` gives): the same requests as the file."""
    fifo = tmp_path / "trace.pipe"
    os.mkfifo(fifo)
    writer = threading.Thread(target=lambda: fifo.write_bytes(TRACE.read_bytes()))
    writer.start()
    args = ("--slo-ttft", "10ms", "--json", "--check-points", "0", "--quiet")
    code, piped, err = run_cli(*serve_args(tiny_model, cache_dir, "--trace", str(fifo), *args))
    writer.join(timeout=60)
    assert code == 0, err
    code, direct, err = run_cli(*serve_args(tiny_model, cache_dir, "--trace", str(TRACE), *args))
    assert code == 0, err
    a, b = json.loads(piped), json.loads(direct)
    assert a["requests"] == b["requests"] == 40 and a["ttft_p90_s"] == b["ttft_p90_s"] and a["e2e_mean_s"] == b["e2e_mean_s"]


def test_step_cost_progress_gives_the_elapsed_time_and_what_is_left(tiny_model, tmp_path):
    code, _, err = run_cli(*serve_args(tiny_model, tmp_path / "fresh", "--rate", "50", "--requests", "20", "--prompt",
                                       "fixed:64", "--output", "fixed:4", "--check-points", "0", "--json"))
    assert code == 0, err
    lines = [line for line in err.splitlines() if line.startswith("step costs:")]
    assert lines and all(re.fullmatch(r"step costs: (\d+)/(\d+) simulated, [0-9.]+ s elapsed, about [0-9.]+ s left", x)
                         for x in lines), lines
    assert lines[-1].split()[2] == f"{len(list((tmp_path / 'fresh').glob('*.json')))}/{len(lines)}"
    assert lines[-1].endswith("about 0.0 s left")


def test_a_wrong_executor_is_refused_even_when_every_step_is_cached(tiny_model, cache_dir):
    args = ("--rate", "50", "--requests", "20", "--prompt", "fixed:64", "--output", "fixed:4", "--check-points", "0",
            "--json", "--quiet")
    assert run_cli(*serve_args(tiny_model, cache_dir, *args))[0] == 0  # every step now cached
    code, out, err = run_cli(*serve_args(tiny_model, cache_dir, *args, "--executor", "bogus"))
    assert code == 2 and out == "" and "--executor: field 'executor': unknown executor 'bogus'" in err


def test_a_missing_model_is_a_usage_error(cache_dir):
    code, _, err = run_cli("serve", "--topology", "star:2", "--strategy", "TP1EP2", "--rate", "1")
    assert code == 3 and "--model" in err


def test_serve_search_stores_every_rate_tried_and_the_report_draws_the_curves(tiny_model, cache_dir, tmp_path):
    out = tmp_path / "search"
    code, stdout, err = run_cli("serve", "search", "--model", tiny_model, "--topology", "star:4", "--strategies",
                                "TP1EP2", "--backend", "flow", "--cache", str(cache_dir), *SMALL, "--requests", "200",
                                "--prompt", "uniform:16:500", "--output", "uniform:1:32", "--slo-ttft", "5ms",
                                "--slo-tpot", "1ms", "--iterations", "2", "--workers", "1", "--out", str(out), "--json",
                                "--quiet")
    assert code == 0, err
    result = json.loads(stdout)
    modes = [c["mode"] for c in result["candidates"]]
    assert sorted(modes) == ["colocated", "disaggregated"]
    for c in result["candidates"]:  # what stops each capacity, at the lowest failing rate above it
        assert c["limited_by"] is None or re.match(r"(throughput|TTFT|TPOT) \(", c["limited_by"]), c["limited_by"]
    assert result["skipped"] and all("does not divide" in s for s in result["skipped"])
    assert all(c["search_cpu_s"] > 0 for c in result["candidates"])  # each search's own CPU time
    tried = sum(len(c["rates_tried"]) for c in result["candidates"])
    rows = query_results(out, "SELECT search_id, requests_path FROM serving")
    assert rows.num_rows == tried and set(rows.column("search_id").to_pylist()) == {result["search_id"]}
    assert sum(p is not None for p in rows.column("requests_path").to_pylist()) == 2  # one capacity row each
    assert run_cli("report", str(out))[0] == 0
    assert (out / "figures" / "serving_throughput_latency.png").is_file()


def search_args(model: str, cache: Path, *more: str) -> list[str]:
    return ["serve", "search", "--model", model, "--topology", "star:4", "--strategies", "TP1EP2", "--backend", "flow",
            "--cache", str(cache), *SMALL, "--prompt", "uniform:16:500", "--output", "uniform:1:32", "--slo-ttft", "5ms",
            "--workers", "1", "--quiet", *more]


@pytest.mark.parametrize("args,message", [
    (["--servers", ""], "--servers '': expected comma-separated server counts"),
    (["--ratios", ""], "--ratios '': expected PREFILL_SERVERS:DECODE_SERVERS"),
    (["--strategies", ""], "--strategies '': expected comma-separated splits"),
    (["--modes", "disaggregated", "--ratios", "5:5"], "no candidate fits: --ratios 5:5: 10 servers, star:4 has 4"),
    (["--trace", str(TRACE), "--rate", "-3"], "--rate: field 'rate': the first rate tried must be a finite number"),
])
def test_bad_search_input_is_one_line_naming_the_option(tiny_model, cache_dir, args, message):
    code, _, err = run_cli(*search_args(tiny_model, cache_dir, *args))
    assert code == 2 and message in err and err.count("\n") == 1, err


def test_an_absurd_rate_gives_goodput_within_throughput(tiny_model, cache_dir):
    code, out, err = run_cli(*serve_args(tiny_model, cache_dir, "--rate", "1e308", "--requests", "20", "--prompt",
                                         "uniform:16:500", "--output", "fixed:8", "--slo-ttft",
                                         "1s", "--json", "--check-points", "0"))
    assert code == 0, err
    record = json.loads(out)
    assert record["goodput_rps"] <= record["throughput_rps"] and not record["sustained"]


def test_a_search_on_few_requests_bounds_the_capacity_and_says_when_runs_are_too_short(tiny_model, cache_dir):
    """30 requests: every rate used to meet the SLO (each run over before a queue formed), so the search
    doubled to 1e11 requests/s; now a rate must be sustained, and the capacity stays below what full
    steps without waiting could serve (``rough_capacity_rps``)."""
    from moesim.serving import SchedulerConfig, Slo, StepCache, make_requests
    from moesim.serving.search import SearchSpace, rough_capacity_rps
    from moesim.serving.simulate import grids, step_costs

    code, out, err = run_cli(*search_args(tiny_model, cache_dir, "--modes", "colocated", "--requests", "30",
                                          "--json"))
    assert code == 0, err
    c = json.loads(out)["candidates"][0]
    assert c["upper_bound_found"] and c["capacity_rps"] is not None
    config = SchedulerConfig(token_budget=1024, max_seqs=8)
    base = make_requests(None, 1.0, 30, "uniform:16:500", "uniform:1:32")
    d = SearchSpace(tiny_model, "star:4", ("TP1EP2",), backend="flow").candidates()[0][0]
    costs, _ = step_costs(grids(d, [base], config), StepCache(cache_dir))
    assert c["best"]["throughput_rps"] <= rough_capacity_rps(d, base, config, costs)
    code, text, err = run_cli(*search_args(tiny_model, cache_dir, "--modes", "colocated", "--requests", "30"))
    assert ("runs are too short" in text) == c["conservative"] and Slo(0.005).given


def test_serve_search_says_why_combinations_were_left_out_and_what_limits_each(tiny_model, cache_dir):
    code, out, err = run_cli(*search_args(tiny_model, cache_dir, "--requests", "100", "--iterations", "1",
                                          "--slo-tpot", "1ms"))
    assert code == 0, err
    left = [line for line in out.splitlines() if line.strip().startswith("left out:")]
    assert left and all("does not divide" in line or "more (--json lists every one)" in line for line in left)
    rows = [line for line in out.splitlines() if " per GPU " in line]
    assert rows and all(re.search(r"; limited by (throughput|TTFT|TPOT) \(", line) or "no upper bound" in line
                        for line in rows), rows
