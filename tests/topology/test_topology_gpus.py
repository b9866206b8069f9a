"""GPU models: the dense tensor-core peaks are the data sheets' sparse figures halved, and the templates take
their GPU-link bandwidth from their GPU's record.

Expected values are typed in from the data sheets cited in ``gpus.py`` (TFLOPS with sparsity for NVIDIA,
dense for AMD), not read back from the records.
"""

from __future__ import annotations

import pytest

from moesim.topology import get_topology
from moesim.topology.gpus import GPU_MODELS
from moesim.topology.templates import SERVER_TEMPLATES

T = 1e12
# name → (BF16, FP8, FP4 dense FLOP/s or None, memory GB, memory TB/s, NVLink GB/s both directions)
SHEETS = {
    "h100": (1979 / 2 * T, 3958 / 2 * T, None, 80, 3.35, 900),
    "h800": (1979 / 2 * T, 3958 / 2 * T, None, 80, 3.35, 400),
    "h20": (148 * T, 296 * T, None, 96, 4.0, 900),
    "h200": (1979 / 2 * T, 3958 / 2 * T, None, 141, 4.8, 900),
    "b200": (36e15 / 8 / 2, 72e15 / 8 / 2, 144e15 / 8 / 2, 1440 / 8, 64 / 8, 1800),
    "gb200": (360e15 / 72 / 2, 720e15 / 72 / 2, 1440e15 / 72 / 2, 13400 / 72, 576 / 72, 1800),  # NVLink: 130 TB/s over 72 GPUs, 1.8 TB/s each
    "mi300x": (1307.4 * T, 2614.9 * T, None, 192, 5.3, 7 * 128),
}


@pytest.mark.parametrize("name", sorted(SHEETS))
def test_records_hold_the_data_sheet_figures(name: str) -> None:
    bf16, fp8, fp4, mem_gb, bw_tb, link_gb = SHEETS[name]
    gpu = GPU_MODELS.get(name)
    assert gpu.peak("bf16") == pytest.approx(bf16, rel=1e-12)
    assert gpu.peak("fp8") == pytest.approx(fp8, rel=1e-12)
    assert gpu.peak("fp4") == (None if fp4 is None else pytest.approx(fp4, rel=1e-12))
    assert gpu.memory_bytes == pytest.approx(mem_gb * 1e9, rel=5e-3)  # 13.4 TB / 72 rounds to 186 GB
    assert gpu.mem_bw_bytes_per_s == pytest.approx(bw_tb * 1e12, rel=1e-12)
    assert gpu.gpu_link_bytes_per_s == pytest.approx(link_gb * 1e9, rel=1e-12)
    assert gpu.source


def test_fp8_tensor_cores_are_twice_bf16_on_every_gpu() -> None:
    """The ratio the workload's precision options rely on (``workload/precision.py``): FP8 = 2 × BF16, and
    FP4 = 2 × FP8 where there is FP4 (to the data sheets' rounding: AMD quotes 1,307.4 and 2,614.9)."""
    for entry in GPU_MODELS:
        gpu = entry.obj
        assert gpu.peak("fp8") / gpu.peak("bf16") == pytest.approx(2, rel=1e-4), entry.name
        if gpu.peak("fp4") is not None:
            assert gpu.peak("fp4") == 2 * gpu.peak("fp8")


@pytest.mark.parametrize("entry", list(SERVER_TEMPLATES), ids=lambda e: e.name)
def test_each_template_gives_every_gpu_its_records_link_bandwidth(entry) -> None:  # noqa: ANN001
    """Per GPU and direction, the GPU's outgoing NVLink / Infinity Fabric links add up to half the
    record's total (both directions)."""
    topo = get_topology(entry.name)
    gpu = GPU_MODELS.get(entry.obj.gpu)
    for g in topo.gpus:
        out = sum(lk.bandwidth_bps for lk in topo.links if lk.src == g.name and lk.kind == "nvlink")
        assert out == pytest.approx(gpu.gpu_link_bytes_per_s * 8 / 2, rel=1e-12)
