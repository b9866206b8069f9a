"""The Python API (``moesim.api``, docs/api.md): real runs of V4 Flash with 64 tokens on topology 6 (one
32-GPU server, no network) and topology 3 (16 servers × 2 GPUs; the second GPU reaches the NIC over UPI, so
the ranks differ and rank 1 is the bottleneck), which take well under a second each once compiled."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

import moesim
from moesim.cli import run_cli
from moesim.errors import MoesimError

MODEL, TOPOLOGY, TOKENS = "deepseek-v4-flash", "6", 64
UNEVEN = "3"
"""A topology whose ranks finish at different times (the bottleneck is not rank 0)."""
EXAMPLES = Path(__file__).resolve().parents[1] / "examples"

API_NAMES = ("RunOutput", "ServeOutput", "load_model", "load_results", "load_topology", "place", "run", "serve",
             "serve_search", "sweep")
RANK_COLUMNS = ["rank", "wall_s", "gpu_s", "comm_s", "exposed_comm_s", "bottleneck"]
NODE_COLUMNS = ["rank", "node_id", "name", "layer", "kind", "start_s", "end_s", "duration_s"]
LAYER_COLUMNS = ["rank", "layer", "start_s", "end_s", "duration_s", "compute_s", "comm_s", "nodes"]
BREAKDOWN_COLUMNS = ["rank", "layer", "kind", "nodes", "size_bytes", "start_s", "end_s", "busy_s", "wait_s", "copied"]
REQUEST_COLUMNS = ["request", "arrival_s", "prompt_tokens", "output_tokens", "replica", "decode_replica", "scheduled_s",
                   "first_token_s", "finish_s", "kv_sent_s", "kv_transfer_s", "ttft_s", "tpot_s", "e2e_s", "slo_met"]
INTERPOLATION_COLUMNS = ["strategy", "topology", "phase", "tokens_or_batch", "context_tokens", "simulated_s",
                         "interpolated_s", "error"]


@pytest.fixture(scope="module")
def flow_run() -> moesim.RunOutput:
    return moesim.run(MODEL, UNEVEN, "TP2EP16", backend="flow", tokens=TOKENS)


@pytest.fixture(scope="module")
def timeline_run() -> moesim.RunOutput:
    return moesim.run(MODEL, int(TOPOLOGY), "TP4EP8", backend="fluid", layers=True, tokens=TOKENS)


# ------------------------------------------------------------------------------------------------ surface

def test_import_is_cheap_and_names_load_on_first_use() -> None:
    code = ("import sys, moesim; heavy = ('numba', 'numpy', 'pandas', 'moesim.api', 'moesim.system.run');"
            "before = [m for m in heavy if m in sys.modules]; moesim.run; print(before, 'moesim.api' in sys.modules)")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert res.stdout.split("\n")[0] == "[] True", res.stdout


def test_public_names() -> None:
    assert set(API_NAMES) | {"__version__"} == set(moesim.__all__)
    for name in API_NAMES:
        assert getattr(moesim, name) is getattr(moesim.api, name)
        assert name in dir(moesim)
    assert isinstance(moesim.__version__, str) and moesim.__version__
    with pytest.raises(AttributeError, match="no attribute 'simulate'"):
        moesim.simulate  # noqa: B018


# ------------------------------------------------------------------------------------------------ one run

def test_run_output(flow_run: moesim.RunOutput) -> None:
    out = flow_run
    assert isinstance(out, moesim.RunOutput)
    assert (out.spec.model, out.spec.topology, out.spec.strategy, out.backend) == (MODEL, UNEVEN, "TP2EP16", "flow")
    assert out.spec.overrides == (("tokens", TOKENS),)
    assert 0 < out.gpu_s <= out.wall_s and 0 < out.comm_s <= out.wall_s
    assert math.isclose(out.wall_s, out.result.ranks[out.bottleneck_rank].wall_s)
    assert out.bottleneck_rank == 1
    assert "topology 3 TP2EP16" in repr(out) and "[flow]" in repr(out)


def test_to_dict_is_what_the_cli_prints(flow_run: moesim.RunOutput, capsys: pytest.CaptureFixture[str]) -> None:
    record = flow_run.to_dict()
    assert {"model", "topology", "strategy", "tp", "ep", "backend", "wall_s", "gpu_s", "comm_s",
            "bottleneck_rank", "overrides", "parameters", "version"} <= set(record)
    assert record["overrides"] == {"tokens": TOKENS} and record["wall_s"] == flow_run.wall_s
    capsys.readouterr()
    code = run_cli(["run", "--model", MODEL, "--topology", UNEVEN, "--strategy", "TP2EP16", "--backend", "flow",
                    "--set", f"tokens={TOKENS}", "--json", "--progress", "none"])
    assert code == 0
    assert json.loads(capsys.readouterr().out) == json.loads(json.dumps(record))


def test_ranks_table(flow_run: moesim.RunOutput) -> None:
    ranks = flow_run.ranks
    assert isinstance(ranks, pd.DataFrame) and list(ranks.columns) == RANK_COLUMNS
    assert list(ranks["rank"]) == list(range(32))
    assert ranks["bottleneck"].sum() == 1
    bottleneck = ranks[ranks["bottleneck"]].iloc[0]
    assert bottleneck["rank"] == flow_run.bottleneck_rank and bottleneck["wall_s"] == flow_run.wall_s
    assert ranks["wall_s"].max() == flow_run.wall_s and ranks["wall_s"].nunique() > 1
    assert ((ranks["gpu_s"] > 0) & (ranks["comm_s"] > 0)).all()
    assert (ranks["exposed_comm_s"] == (ranks["wall_s"] - ranks["gpu_s"]).clip(lower=0.0)).all()


def test_tables_of_layers_need_a_timeline(flow_run: moesim.RunOutput) -> None:
    for what in ("layers", "nodes"):
        with pytest.raises(MoesimError, match="layers=True"):
            getattr(flow_run, what)


def test_nodes_and_layers_tables(timeline_run: moesim.RunOutput) -> None:
    nodes, layers = timeline_run.nodes, timeline_run.layers
    assert list(nodes.columns) == NODE_COLUMNS and list(layers.columns) == LAYER_COLUMNS
    assert set(nodes["rank"]) == set(range(32))
    assert (nodes["duration_s"] >= 0).all()
    assert ((nodes["duration_s"] - (nodes["end_s"] - nodes["start_s"])).abs() < 1e-15).all()
    assert set(nodes["kind"]) == {"compute", "ALL_REDUCE", "ALL_TO_ALL"}  # TP all-reduce, EP dispatch/combine
    # every rank finishes its last node at its own wall time
    last = nodes.groupby("rank")["end_s"].max()
    walls = timeline_run.ranks.set_index("rank")["wall_s"]
    assert ((last - walls).abs() <= 1e-12 * walls).all()
    # one row per rank and model layer, in order, each layer's nodes counted
    num_layers = moesim.load_model(MODEL).num_layers
    assert len(layers) == 32 * num_layers
    assert list(layers[layers["rank"] == 0]["layer"]) == list(range(num_layers))
    assert layers["nodes"].sum() == (nodes["layer"] >= 0).sum()
    assert ((layers["duration_s"] - (layers["end_s"] - layers["start_s"])).abs() < 1e-15).all()
    assert (layers["compute_s"] > 0).all() and (layers["comm_s"] > 0).all()


def test_recording_the_timeline_agrees_with_fast_forward(timeline_run: moesim.RunOutput) -> None:
    """layers=True turns the layer fast-forward off; the result stays within its tolerance (0.2 %)."""
    fast = moesim.run(MODEL, TOPOLOGY, "TP4EP8", backend="fluid", tokens=TOKENS)
    assert fast.result.parameters["fast_forwarded_layers"] > 0
    assert timeline_run.result.parameters["fast_forwarded_layers"] == 0
    assert math.isclose(fast.wall_s, timeline_run.wall_s, rel_tol=2e-3)


def test_breakdown_keeps_fast_forward_and_agrees_with_the_timeline(timeline_run: moesim.RunOutput) -> None:
    """The breakdown of a fast-forwarded run copies its jumped layers; it has the timeline's nodes and kinds."""
    fast = moesim.run(MODEL, TOPOLOGY, "TP4EP8", backend="fluid", tokens=TOKENS)
    assert fast.result.parameters["fast_forwarded_layers"] > 0
    layers, nodes = fast.breakdown(), fast.breakdown("nodes")
    assert list(layers.columns) == BREAKDOWN_COLUMNS
    assert len(nodes) == len(timeline_run.nodes) and nodes["copied"].any()
    assert set(layers["kind"]) == {"compute", "tp_all_reduce", "ep_dispatch", "ep_combine"}
    assert not layers.duplicated(["rank", "layer", "kind"]).any()
    walls = fast.ranks.set_index("rank")["wall_s"]
    assert ((nodes.groupby("rank")["end_s"].max() - walls).abs() <= 1e-12 * walls).all()
    with pytest.raises(MoesimError, match="allowed: layers, nodes"):
        fast.breakdown("chunks")


def test_trace_of_a_run(flow_run: moesim.RunOutput, tmp_path: Path) -> None:
    path = flow_run.to_chrome_trace(tmp_path / "t.json", links=True)
    trace = json.loads(path.read_text())
    assert trace["otherData"]["wall_s"] == flow_run.wall_s
    assert {e["ph"] for e in trace["traceEvents"]} == {"M", "X", "C"}
    out = moesim.run(MODEL, UNEVEN, "TP2EP16", backend="flow", tokens=TOKENS, trace=tmp_path / "u.json")
    assert json.loads((tmp_path / "u.json").read_text())["otherData"]["wall_s"] == out.wall_s == flow_run.wall_s


def test_strategy_names_are_normalised() -> None:
    out = moesim.run(MODEL, TOPOLOGY, "tp4ep8", backend="flow", tokens=TOKENS)
    assert out.spec.strategy == "TP4EP8" and out.to_dict()["strategy"] == "TP4EP8"


def test_progress_is_called_as_the_run_advances(monkeypatch: pytest.MonkeyPatch) -> None:
    import moesim.system.run as system_run

    monkeypatch.setattr(system_run, "PROGRESS_EVERY_S", 0.0)
    calls: list[tuple[float, int, int]] = []
    out = moesim.run(MODEL, TOPOLOGY, "TP2EP16", backend="fluid", tokens=TOKENS,
                     progress=lambda t, done, total: calls.append((t, done, total)))
    assert len(calls) > 10
    num_layers = moesim.load_model(MODEL).num_layers
    assert {total for _, _, total in calls} == {num_layers}
    times, done = [c[0] for c in calls], [c[1] for c in calls]
    assert times == sorted(times) and done == sorted(done)
    assert 0 <= done[0] < done[-1] <= num_layers and times[-1] <= out.wall_s


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"model": "no-such-model"}, "unknown model 'no-such-model'"),
    ({"topology": "9"}, "unknown topology '9'"),
    ({"strategy": "TP4EP16"}, "TP × EP = 64 does not match 32 ranks"),
    ({"strategy": "four-by-eight"}, "expected the form TP<n>EP<m>"),
    ({"backend": "warp"}, "unknown network backend 'warp'"),
    ({"tokens": "abc"}, "field 'tokens': expected an integer, got 'abc'"),
])
def test_bad_inputs_raise_moesim_error(kwargs: dict, message: str) -> None:
    args = {"model": MODEL, "topology": TOPOLOGY, "strategy": "TP2EP16", "backend": "flow", **kwargs}
    with pytest.raises(MoesimError, match=message):
        moesim.run(**args)


# ------------------------------------------------------------------------------------------------ sweeps

@pytest.fixture(scope="module")
def swept(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("api_sweep")
    runs = [{"model": MODEL, "topology": int(UNEVEN), "strategy": s, "backend": "flow", "tokens": TOKENS}
            for s in ("tp2ep16", "TP4EP8")]
    summary = moesim.sweep(runs, out, workers=1)
    assert (summary.total, summary.ran, summary.cached, summary.failures) == (2, 2, 0, ())
    return out


def test_sweep_of_dicts_then_load_results(swept: Path, flow_run: moesim.RunOutput) -> None:
    df = moesim.load_results(swept)
    assert isinstance(df, pd.DataFrame) and len(df) == 2
    assert {"model", "topology", "strategy", "tp", "ep", "algorithm", "network", "backend", "tokens",
            "wall_s", "gpu_s", "comm_s", "bottleneck_rank"} <= set(df.columns)
    assert list(df["strategy"]) == ["TP2EP16", "TP4EP8"] and list(df["tokens"]) == [TOKENS, TOKENS]
    assert df["wall_s"].dtype == "float64" and df["tokens"].dtype == "Int64"  # a parameter keeps its type
    # a run in a worker of the sweep gives what the same run gives in this process
    row = df[df["strategy"] == "TP2EP16"].iloc[0]
    assert (row["wall_s"], row["gpu_s"], row["comm_s"]) == (flow_run.wall_s, flow_run.gpu_s, flow_run.comm_s)


def test_sweep_again_finds_the_runs_stored(swept: Path) -> None:
    runs = [{"model": MODEL, "topology": UNEVEN, "strategy": s, "backend": "flow", "tokens": TOKENS}
            for s in ("TP2EP16", "TP4EP8")]
    summary = moesim.sweep(runs, swept, workers=1)
    assert (summary.total, summary.cached, summary.ran) == (2, 2, 0)


def test_sweep_stores_each_runs_breakdown(swept: Path) -> None:
    import pyarrow.parquet as pq

    df = moesim.load_results(swept, include_failed=True)
    for run_id in df["run_id"]:
        table = pq.read_table(swept / "breakdown" / f"{run_id}.parquet")
        assert table.column_names == ["run_id", *BREAKDOWN_COLUMNS] and set(table.column("run_id").to_pylist()) == {run_id}


@pytest.mark.slow
def test_load_results_with_failed_runs_gives_every_column(tmp_path: Path) -> None:
    # a packet run that passes every up-front check but cannot finish (no window, no PFC headroom, a small
    # buffer: the incast drops packets and the reference model never retransmits), beside one that succeeds
    lossy = {"buffer_bytes": 300_000, "has_win": False, "headroom_factor": 0.0}
    runs = [{"model": MODEL, "topology": 1, "strategy": "TP2EP16", "backend": "flow", "tokens": TOKENS},
            {"model": MODEL, "topology": 1, "strategy": "TP2EP16", "backend": "packet", **lossy}]
    summary = moesim.sweep(runs, tmp_path, workers=1)
    assert (summary.total, len(summary.failures)) == (2, 1)
    df = moesim.load_results(tmp_path, include_failed=True)
    assert len(df) == 2 and {"run_id", "status", "error", "params_json", "wall_s"} <= set(df.columns)
    failed = df[df["status"] == "error"]
    assert list(failed["backend"]) == ["packet"] and "cannot complete" in failed["error"].iloc[0]
    assert failed["wall_s"].isna().all() and df[df["status"] == "ok"]["wall_s"].notna().all()
    assert len(moesim.load_results(tmp_path)) == 1  # by default only the runs that succeeded


def test_sweep_of_a_matrix_file_with_a_preset(tmp_path: Path) -> None:
    (tmp_path / "m.yaml").write_text(
        "name: api\nfactors:\n  model: deepseek-v4-flash\n  topology: 6\n  strategy: [TP2EP16, TP4EP8]\n"
        "  algorithm: ring_direct\n  network: ib_cc0\n  backend: flow\n  tokens: 64\n"
        "presets:\n  one: {factors: {strategy: TP8EP4}}\n")
    summary = moesim.sweep(tmp_path / "m.yaml", tmp_path / "out", preset="one", workers=1)
    assert (summary.total, summary.ran, summary.failures) == (1, 1, ())
    assert list(moesim.load_results(tmp_path / "out")["strategy"]) == ["TP8EP4"]


@pytest.mark.parametrize(("what", "kwargs", "message"), [
    ([{"model": MODEL, "topology": "6"}], {}, "missing strategy"),
    (["TP2EP16"], {}, "got an item of type str"),
    ([{"model": MODEL, "topology": "6", "strategy": "TP2EP16"}], {"preset": "quick"}, "preset= needs a matrix"),
    (EXAMPLES / "no-such-matrix.yaml", {}, "no-such-matrix.yaml"),
])
def test_sweep_refuses_bad_input_before_running(what: object, kwargs: dict, message: str, tmp_path: Path) -> None:
    with pytest.raises(MoesimError, match=message):
        moesim.sweep(what, tmp_path / "out", **kwargs)  # type: ignore[arg-type]
    assert not (tmp_path / "out" / "results.duckdb").exists()


def test_place_takes_rescore_none_and_refuses_a_bad_rescore_before_searching() -> None:
    result = moesim.place(MODEL, TOPOLOGY, "TP2EP16", evaluations=2, rescore="none", tokens=TOKENS)
    assert result.rescored == () and result.best.wall_s <= result.default.wall_s
    with pytest.raises(MoesimError, match=r"field 'rescore': unknown backend 'warp'"):
        moesim.place(MODEL, TOPOLOGY, "TP2EP16", evaluations=2, rescore="warp", tokens=TOKENS)


def test_load_results_of_a_folder_without_a_store(tmp_path: Path) -> None:
    with pytest.raises(MoesimError, match="no results store found"):
        moesim.load_results(tmp_path)


# ------------------------------------------------------------------------------------------------ loaders

def test_load_topology() -> None:
    six = moesim.load_topology(6)
    assert six.num_gpus == 32 and six is moesim.load_topology("6")
    mine = moesim.load_topology(EXAMPLES / "topology.yaml")
    assert mine.name == "example-4x8-leaf-spine" and mine.num_gpus == 32
    ib = moesim.load_topology(4)
    roce = moesim.load_topology(4, network="roce_dcqcn")
    delays = {n: {round(link.delay_s, 9) for link in t.links if link.kind == "fabric"} for n, t in
              (("ib", ib), ("roce", roce))}
    assert delays == {"ib": {7e-7}, "roce": {1e-6}}
    with pytest.raises(MoesimError, match="unknown topology '9'"):
        moesim.load_topology("9")


def test_load_model() -> None:
    model = moesim.load_model(MODEL)
    assert model.key == MODEL and model.num_layers > 1
    with pytest.raises(MoesimError, match="unknown model"):
        moesim.load_model("no-such-model")


# ------------------------------------------------------------------------------------------------ serving

def test_serve_gives_per_request_and_aggregate_tables(tmp_path: Path) -> None:
    """V4 Flash with one layer on two hosts (flow backend): a trace of three far-apart requests."""
    from importlib import resources

    import yaml

    model = tmp_path / "one-layer.yaml"
    spec = yaml.safe_load((resources.files("moesim.models") / "data" / f"{MODEL}.yaml").read_text())
    spec.update(key="one-layer", num_layers=1, checkpoint_size_bytes=10**9)
    model.write_text(yaml.safe_dump(spec))
    trace = tmp_path / "trace.csv"
    trace.write_text("arrival_s,prompt_tokens,output_tokens\n0,100,5\n1,200,1\n2,50,3\n")
    out = moesim.serve(str(model), "star:2", "tp1ep2", backend="flow", trace=trace, slo_ttft="1s", slo_tpot=0.05,
                       token_budget=256, max_seqs=4, cache=tmp_path / "cache", check_points=1, out=tmp_path / "store")
    assert isinstance(out, moesim.ServeOutput)
    assert list(out.requests.columns) == REQUEST_COLUMNS and len(out.requests) == 3
    assert list(out.interpolation.columns) == INTERPOLATION_COLUMNS
    row = out.summary.iloc[0]
    assert row["requests"] == 3 and row["slo_attainment"] == 1.0 and row["gpus"] == 2
    assert out.to_dict()["strategy"] == "TP1EP2" and math.isnan(out.requests["tpot_s"][1])  # one output token
    assert moesim.load_results(tmp_path / "store").empty  # serving rows live in their own table
    with pytest.raises(MoesimError, match="field 'policy'"):
        moesim.serve(str(model), "star:2", "TP1EP2", trace=trace, policy="lottery", cache=tmp_path / "cache")


# ------------------------------------------------------------------------------------------------ docs

def test_docs_api_names_every_table_column() -> None:
    """docs/api.md gives each DataFrame's columns in order, as the tables have them."""
    doc = (Path(__file__).resolve().parents[1] / "docs" / "api.md").read_text()
    rows = {line.split("|")[1].strip(" `"): line.split("|")[2] for line in doc.splitlines()
            if line.startswith("| `") and line.count("|") >= 3}
    for name, columns in (("ranks", RANK_COLUMNS), ("nodes", NODE_COLUMNS), ("layers", LAYER_COLUMNS),
                          ("breakdown()", BREAKDOWN_COLUMNS), ("requests", REQUEST_COLUMNS),
                          ("interpolation", INTERPOLATION_COLUMNS)):
        assert f"DataFrame `{', '.join(columns)}`" in rows[name], name
    for name in API_NAMES:
        assert f"`{name}`" in doc.split("\n\n")[1], name
