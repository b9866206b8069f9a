"""Diagrams: each study topology renders to a real picture; SVG names every GPU; output is byte-stable."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

import matplotlib.image as mpimg
import numpy as np
import pytest

from moesim.errors import MoesimError
from moesim.topology import get_topology
from moesim.topology.draw import draw_topology, render_topology

NAMES = ["1", "2", "3", "4", "5", "6"]


def svg_texts(path: Path) -> list[str]:
    root = ET.parse(path).getroot()
    assert root.tag.endswith("svg")
    return ["".join(el.itertext()) for el in root.iter() if el.tag.endswith("text")]


@pytest.mark.parametrize("name", NAMES)
def test_svg_is_valid_and_names_every_gpu(tmp_path: Path, name: str) -> None:
    topo = get_topology(name)
    path = draw_topology(topo, tmp_path / f"t{name}.svg")
    texts = svg_texts(path)
    assert {g.name for g in topo.gpus} <= set(texts)
    assert f"Topology {name}" in texts
    if name != "6":
        assert "sw0" in texts and any("NIC" in t for t in texts)


@pytest.mark.parametrize("name", NAMES)
def test_png_is_a_real_non_empty_picture(tmp_path: Path, name: str) -> None:
    path = draw_topology(get_topology(name), tmp_path / f"t{name}.png")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    img = mpimg.imread(path)
    assert img.ndim == 3 and img.shape[0] > 300 and img.shape[1] > 500
    ink = (img[..., :3].mean(axis=2) < 0.9).mean()  # share of non-white pixels
    assert 0.01 < ink < 0.6
    assert len(np.unique(img[::3, ::3, :3].reshape(-1, 3), axis=0)) > 20  # colours, not a flat fill


def test_user_yaml_renders_and_output_is_byte_identical(tmp_path: Path) -> None:
    yaml_text = """
servers: 6
server:
  cpus: [cpu0]
  gpus: [gpu0, gpu1]
  nics: [nic0]
  links:
    - {a: gpu0, b: cpu0, bandwidth: 512Gbps, delay: 0.2us}
    - {a: gpu1, b: gpu0, bandwidth: 900Gbps, delay: 0.1us}
    - {a: nic0, b: cpu0, bandwidth: 512Gbps, delay: 0.2us}
fabric: {kind: leaf_spine, servers_per_leaf: 2, spines: 2}
"""
    path = tmp_path / "nv.yaml"
    path.write_text(yaml_text)
    topo = get_topology(str(path))
    first = render_topology(topo, "svg")
    assert render_topology(get_topology(str(path)), "svg") == first
    assert render_topology(topo, "png") == render_topology(topo, "png")
    out = tmp_path / "nv.svg"
    out.write_bytes(first)
    texts = svg_texts(out)
    assert {g.name for g in topo.gpus} <= set(texts)
    assert {"leaf0", "leaf1", "leaf2", "spine0", "spine1"} <= set(texts)


def test_bad_suffix_and_server(tmp_path: Path) -> None:
    with pytest.raises(MoesimError, match=r"x.pdf: diagram format '.pdf' \(allowed: .svg, .png\)"):
        draw_topology(get_topology("1"), tmp_path / "x.pdf")
    with pytest.raises(MoesimError, match=r"no server 4"):
        render_topology(get_topology("4"), "svg", server=4)
