"""Reading diagnostics side files in the layouts the experiments store and users write."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from moesim.analysis.diagnostics import name_links, read_diagnostics
from moesim.topology.catalog import get_topology


def test_store_layout_folder_of_named_tables(tmp_path):
    # DIR/diagnostics/<run_id>/link_bytes.parquet as written for a 1-D per-link array, plus other tables
    run = tmp_path / "diagnostics" / "abc"
    run.mkdir(parents=True)
    pq.write_table(pa.table({"link_id": np.arange(3), "link_bytes": np.array([5.0, 0.0, 2.5])}), run / "link_bytes.parquet")
    pq.write_table(pa.table({"index": [0], "fct_s": [1e-3]}), run / "fct.parquet")  # not shown: ignored
    d = read_diagnostics("diagnostics/abc", tmp_path)
    assert list(d) == ["link_bytes"]
    assert d["link_bytes"].to_pydict() == {"link": ["0", "1", "2"], "bytes": [5.0, 0.0, 2.5]}


def test_single_file_with_kind_column(tmp_path):
    t = pa.table({"kind": ["queue", "queue", "pfc"], "time_s": [0.0, 1e-6, 2e-6], "link": ["a", "a", "b"],
                  "queue_bytes": [0.0, 10.0, None]})
    pq.write_table(t, tmp_path / "d.parquet")
    d = read_diagnostics(tmp_path / "d.parquet")
    assert d["queue"].column("port").to_pylist() == ["a", "a"]
    assert d["pfc"].to_pydict() == {"time_s": [2e-6], "port": ["b"]}


def test_missing_or_empty_paths():
    assert read_diagnostics(None) == {} and read_diagnostics("/nonexistent/x") == {}


def test_link_ids_get_names_from_the_topology():
    topo = get_topology("4")
    t = pa.table({"link": ["0", "1"], "bytes": [1.0, 2.0]})
    named = name_links(t, "4").column("link").to_pylist()
    assert named == [f"{topo.links[i].src}->{topo.links[i].dst}" for i in (0, 1)]
    assert name_links(t, "no-such-topology").column("link").to_pylist() == ["0", "1"]
