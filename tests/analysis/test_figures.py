"""Figures: expected numbers of bars/series, byte-identical re-renders, and pixel statistics."""

from __future__ import annotations

import io
import itertools

import numpy as np
import pyarrow as pa
import pytest
from matplotlib.image import imread

from moesim.analysis import figures as figs
from moesim.analysis.results import as_table
from moesim.analysis.stats import INTERACTIONS, GridView, interaction
from moesim.analysis.study import analyse

TOPOS, STRATS = ("1", "2", "3", "4", "5", "6"), ("TP2EP16", "TP4EP8", "TP8EP4", "TP16EP2")
ALGS, NETS = ("ring_direct", "dbt_direct"), ("ib_cc0", "ib_hpcc", "roce_hpcc", "roce_dcqcn")


def random_table(seed: int = 0, zero_comm_topology: str | None = None) -> pa.Table:
    """One model, 192 runs with random times drawn from a fixed seed."""
    rng = np.random.default_rng(seed)
    rows = []
    for t, s, a, n in itertools.product(TOPOS, STRATS, ALGS, NETS):
        gpu, comm = float(rng.uniform(0.02, 0.05)), float(rng.uniform(0.1, 2.0))
        if t == zero_comm_topology:
            comm = 0.0
        rows.append({"model": "m", "topology": t, "strategy": s, "algorithm": a, "network": n,
                     "gpu_s": gpu, "comm_s": comm, "wall_s": gpu + comm})
    return as_table(rows)


def bars(fig) -> int:
    return sum(len(c) for ax in fig.axes for c in ax.containers)


def pixels(fig) -> np.ndarray:
    return imread(io.BytesIO(figs.render(fig, "png")))[..., :3]


def color_count(img: np.ndarray, hex_color: str) -> int:
    rgb = np.array([int(hex_color[i:i + 2], 16) for i in (1, 3, 5)]) / 255.0
    return int(np.all(np.abs(img - rgb) < 1.5 / 255, axis=-1).sum())


def test_runs_figure_has_two_stacked_bars_per_run():
    fig = figs.runs_figure(random_table(), "m")
    assert len(fig.axes) == len(ALGS) * len(NETS)
    assert bars(fig) == 2 * 192  # GPU + comm for each of the 192 runs
    titles = {ax.get_title() for ax in fig.axes}
    assert "dbt_direct · roce_dcqcn" in titles


def test_runs_figure_colours_follow_the_data():
    area = (figs.DPI / 100) ** 2  # pixel counts below are for 100 dpi
    img = pixels(figs.runs_figure(random_table(), "m"))
    assert img.std() > 0.05  # not blank
    for k in range(len(TOPOS)):
        assert color_count(img, figs.color(k)) > 200 * area, k
    assert color_count(img, figs.GPU_COLOR) > 50 * area
    assert color_count(img, figs.color(len(TOPOS))) == 0  # no 7th topology colour
    # a topology without communication time has no comm bar, so its colour is absent from the bars
    img0 = pixels(figs.runs_figure(random_table(zero_comm_topology="3"), "m"))
    legend_patch = color_count(img, figs.color(2)) > color_count(img0, figs.color(2))
    assert legend_patch and color_count(img0, figs.color(2)) < 200 * area


def test_renders_are_byte_identical():
    t = random_table(seed=3)
    a, b = figs.runs_figure(t, "m"), figs.runs_figure(t, "m")
    for fmt in ("png", "svg"):
        assert figs.render(a, fmt) == figs.render(b, fmt)
    svg = figs.render(a, "svg").decode()
    assert "<dc:date>" not in svg


def test_interaction_and_architecture_figures(study_table):
    a = analyse(study_table)
    counts = {}
    for view in INTERACTIONS:
        res = interaction(study_table, view)
        fig = figs.grid_figure(res, view) if isinstance(view, GridView) else figs.ratio_figure(res, view)
        counts[view.name] = bars(fig)
        assert pixels(fig).std() > 0.05
    assert counts == {"topology_strategy": 4 * 6 * 4, "dbt_ring_by_strategy": 4 * 4, "dcqcn_hpcc_by_topology": 4 * 5}
    fig = figs.architecture_figure(a.architecture)
    assert bars(fig) == 9 * 4
    heights = sorted(p.get_height() for c in fig.axes[0].containers for p in c)
    assert heights[-1] == 1.0 and heights[0] > 0


def test_link_bytes_heat_map():
    r1 = pa.table({"link": ["gpu0->sw", "gpu1->sw", "gpu0->sw"], "bytes": [1e9, 3e9, 1e9]})
    r2 = pa.table({"link": ["gpu1->sw", "nic0->x"], "bytes": [5e9, 7e9]})
    fig = figs.link_bytes_figure([("run a", r1), ("run b", r2)])
    data = fig.axes[0].images[0].get_array()
    expected = np.array([[2.0, 3.0, np.nan], [np.nan, 5.0, 7.0]])  # GB per (run, link), links sorted
    assert np.allclose(np.ma.filled(data.astype(float), np.nan), expected, equal_nan=True)


@pytest.mark.parametrize("n_ports,expected", [(3, 3), (11, 8)])
def test_timelines_draw_one_series_per_port(n_ports, expected):
    q = pa.table({"time_s": [i * 1e-6 for i in range(5 * n_ports)], "port": [f"p{i % n_ports}" for i in range(5 * n_ports)],
                  "queue_bytes": [float(1000 * (i % 7)) for i in range(5 * n_ports)]})
    fig = figs.timeline_figure([("run", q)], "queue_bytes", "Queue length")
    assert len(fig.axes[0].lines) == expected
    pfc = pa.table({"time_s": [1e-6, 2e-6, 3e-6], "port": ["a", "b", "a"]})
    fig = figs.timeline_figure([("run", pfc), ("run2", pfc)], None, "PFC")
    assert [len(ax.lines) for ax in fig.axes] == [2, 2]


def test_pngs_are_rendered_at_150_dpi_and_say_so():
    from PIL import Image

    fig = figs.runs_figure(random_table(), "m")
    img = Image.open(io.BytesIO(figs.render(fig, "png")))
    assert figs.DPI >= 150
    assert [round(d) for d in img.info["dpi"]] == [figs.DPI, figs.DPI]  # pHYs chunk
    w_in, h_in = fig.get_size_inches()
    assert img.size == (round(w_in * figs.DPI), round(h_in * figs.DPI))


def test_topologies_are_named_by_their_shape():
    from moesim.analysis.labels import topology_label, topology_tick

    # docs/study.md §4: topology 4 = 4 servers, each 2 PCIe switches with 4 GPUs + 1 NIC
    assert topology_label("4") == "T4: 4 servers × 8 GPUs on 2 PCIe switches, 2 NICs each"
    assert topology_label("6") == "T6: 1 server × 32 GPUs on 8 PCIe switches, no NIC"
    assert topology_tick("3").splitlines() == ["T3", "16×2 GPU, 1 NIC", "2 CPUs"]
    assert topology_label("my_cluster.yaml") == "my_cluster.yaml"


def test_ratio_figure_draws_from_parity_on_a_zoomed_axis():
    """Ratios of 0.95–1.25: bars start at 1, the y-axis spans about that range (not 0–1.25), ticks name topologies."""
    view = next(v for v in INTERACTIONS if v.name == "dcqcn_hpcc_by_topology")
    ratios = {"1": 1.25, "2": 1.02, "3": 0.95, "4": 1.04, "5": 1.10}
    res = pa.Table.from_pylist([{"model": "m", "topology": t, "roce_dcqcn": r, "roce_hpcc": 1.0, "ratio": r}
                                for t, r in ratios.items()])
    fig = figs.ratio_figure(res, view)
    ax = fig.axes[0]
    patches = list(ax.containers[0])
    assert [p.get_y() for p in patches] == [1.0] * 5
    assert np.allclose([1.0 + p.get_height() for p in patches], list(ratios.values()))
    lo, hi = ax.get_ylim()
    assert 0.75 < lo < 0.95 and 1.25 < hi < 1.45  # room for the labels, nowhere near 0
    assert [t.get_text().splitlines()[0] for t in ax.get_xticklabels()] == ["T1", "T2", "T3", "T4", "T5"]
    assert ax.get_ylabel() == "wall time under roce_dcqcn\n÷ wall time under roce_hpcc"
    assert ax.get_xlabel() == "server topology"
    assert "+4.0 %" in [t.get_text() for t in ax.texts]  # T4's change is written on its bar


def test_grid_figure_labels_in_words(study_table):
    view = next(v for v in INTERACTIONS if isinstance(v, GridView))
    fig = figs.grid_figure(interaction(study_table, view), view)
    assert fig.axes[0].get_ylabel() == "wall time, relative to\ntopology 6 / TP2EP16"
    labels = fig.legends[0].get_texts()
    assert labels[0].get_text() == "T1: 32 servers × 1 GPU on 1 CPU, 1 NIC each"
    # the baseline cell sits exactly on parity: its bar has no height
    assert 0.0 in {p.get_height() for c in fig.axes[0].containers for p in c}
