"""A refine copies the packet row of a stored reference whose input hash equals a run's key, and only such a
row: on a real store of four fluid V4 Flash runs (orderings inside fluid's band), a reference holding three of
the packet runs under their keys (and the fourth under another key) leaves that fourth run to simulate; one
holding all four settles every ordering without a simulation, and a second refine copies nothing again."""

from __future__ import annotations

from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from moesim.analysis.bands import BackendBands, Band, ErrorBands
from moesim.analysis.refine import plan, refine
from moesim.analysis.refine_cost import CostModel
from moesim.analysis.refine_reuse import adopt, load_stored
from moesim.errors import MoesimError
from moesim.experiments.inputs import input_hash
from moesim.system.spec import RunSpec

FLUID = {("1", "TP2EP16"): 1.0, ("2", "TP2EP16"): 1.2, ("1", "TP4EP8"): 2.1, ("2", "TP4EP8"): 2.0}
PACKET = {("1", "TP2EP16"): 1.5, ("2", "TP2EP16"): 1.1, ("1", "TP4EP8"): 2.05, ("2", "TP4EP8"): 2.9}
"""Packet's 2.05 s for topology 1 TP4EP8 lies 2.5 % from fluid's 2.0 s for topology 2, inside fluid's band."""
BANDS = ErrorBands("packet", {"fluid": BackendBands(Band(0.1, 100), relative_cost=0.5)})
MODEL = CostModel(hop_s=1e-8, rank_layer_s=0.0, source="test")


def _spec(config: tuple[str, str], backend: str) -> RunSpec:
    return RunSpec("deepseek-v4-flash", *config, "ring_direct", "roce_dcqcn", backend)


def _row(wall: float, seconds: float = 1.0) -> dict:
    return {"wall_s": wall, "gpu_s": 0.1, "comm_s": wall - 0.1, "bottleneck_rank": 0, "cc_model": "dcqcn",
            "cc_policy": "test", "version": "0.1.0", "params_json": "{}", "sim_wallclock_s": seconds}


@pytest.fixture(scope="module")
def keys() -> dict[tuple[str, str], str]:
    return {c: input_hash(_spec(c, "packet")) for c in FLUID}


@pytest.fixture
def store(tmp_path: Path) -> Path:
    out = tmp_path / "store"
    assert adopt(out, [(_spec(c, "fluid"), input_hash(_spec(c, "fluid")), _row(w)) for c, w in FLUID.items()]) == 4
    return out


def _reference(path: Path, keys: dict[tuple[str, str], str], wrong: frozenset[tuple[str, str]] = frozenset()) -> Path:
    rows = [{**_row(PACKET[c]), "run_id": f"r{i}", "spec_key": _spec(c, "packet").key(), "backend": "packet",
             "status": "ok", "input_hash": "0" * 64 if c in wrong else keys[c], "model": "deepseek-v4-flash",
             "topology": c[0], "strategy": c[1]} for i, c in enumerate(FLUID)]
    pq.write_table(pa.Table.from_pylist(rows), path)
    return path


def _backends(store: Path) -> dict[tuple[str, str, str], float]:
    con = duckdb.connect(str(store / "results.duckdb"), read_only=True)
    try:
        return {(t, s, b): w for t, s, b, w in con.execute("SELECT topology, strategy, backend, wall_s FROM runs").fetchall()}
    finally:
        con.close()


def test_only_rows_with_the_runs_exact_key_are_taken(store: Path, tmp_path: Path, keys: dict[tuple[str, str], str]):
    odd = ("2", "TP4EP8")
    stored = load_stored([_reference(tmp_path / "ref.parquet", keys, frozenset({odd}))], "packet")
    p = plan(store, "packet", None, 1, BANDS, model=MODEL, stored=stored)
    assert p.unresolved > p.still_open >= 1  # the three stored rows settle some orderings, not 1 vs 2 at TP4EP8
    assert sorted((s.topology, s.strategy) for s, _, _ in p.reused) == sorted(set(FLUID) - {odd})
    assert [(c.spec.topology, c.spec.strategy) for c in p.runs] == [odd]  # the row under another key is not used
    assert f"3 packet rows of stored references with the same inputs (ref.parquet) leave {p.still_open}; 1 packet " \
        f"runs settle {p.unresolved} of them" in p.lines("packet", 1)[0]
    assert {b for _, _, b in _backends(store)} == {"fluid"}  # a plan writes nothing


def test_a_refine_copies_the_stored_rows_instead_of_simulating_and_again_copies_nothing(
        store: Path, tmp_path: Path, keys: dict[tuple[str, str], str]):
    stored = load_stored([_reference(tmp_path / "ref.parquet", keys)], "packet")
    lines: list[str] = []
    summary = refine(store, "packet", 60.0, workers=1, progress="none", bands=BANDS, announce=lines.append,
                     stored=stored, command="moesim refine store")
    assert summary.ran == 0 and summary.remaining == 0 and summary.failures == ()
    assert "4 packet rows copied from stored references with the same inputs" in lines
    rows = _backends(store)
    assert {k: v for k, v in rows.items() if k[2] == "packet"} == {(*c, "packet"): w for c, w in PACKET.items()}
    assert {k: v for k, v in rows.items() if k[2] == "fluid"} == {(*c, "fluid"): w for c, w in FLUID.items()}
    again = refine(store, "packet", 60.0, workers=1, progress="none", bands=BANDS, stored=stored)
    assert again.ran == 0 and again.remaining == 0 and _backends(store) == rows


def test_a_file_that_is_not_a_results_table_is_one_line(tmp_path: Path):
    (tmp_path / "x.parquet").write_text("not parquet")
    with pytest.raises(MoesimError, match=r"^--reuse .*x\.parquet: not a readable Parquet results table"):
        load_stored([tmp_path / "x.parquet"], "packet")
    pq.write_table(pa.table({"wall_s": [1.0]}), tmp_path / "y.parquet")
    with pytest.raises(MoesimError, match=r"^--reuse .*y\.parquet: missing column input_hash"):
        load_stored([tmp_path / "y.parquet"], "packet")
