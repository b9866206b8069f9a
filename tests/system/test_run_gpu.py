"""The ``gpu`` run option: the roofline takes a GPU model's data-sheet BF16 peak and HBM bandwidth (its FP8
peak is twice the BF16 one, which FP8 classes compute at), named or taken from the server template.

Expected figures are typed in from the data sheets (docs/deployments.md, "GPU models").
"""

from __future__ import annotations

import pytest

from moesim.errors import MoesimError
from moesim.experiments.inputs import input_hash
from moesim.system.run import prepare
from moesim.system.spec import RunSpec
from moesim.topology.gpus import GpuModel, gpu_roofline


def _spec(topology: str = "hgx-h800:1", **overrides: object) -> RunSpec:
    return RunSpec("qwen3-30b-a3b", topology, "TP1EP8", overrides=tuple(sorted(overrides.items())))


@pytest.mark.parametrize(("gpu", "topology", "peak", "bandwidth"), [
    ("h800", "hgx-h800:1", 1979e12 / 2, 3.35e12),        # named
    ("topology", "hgx-h20:1", 148e12, 4.0e12),            # the template's H20
    ("topology", "hgx-b200:1", 36e15 / 16, 64e12 / 8),    # HGX B200: 36 PFLOPS sparse over 8 GPUs; DGX 64 TB/s
    ("mi300x", "hgx-h100:1", 1307.4e12, 5.3e12),          # named, on another template
])
def test_gpu_sets_the_roofline(gpu: str, topology: str, peak: float, bandwidth: float) -> None:
    settings = prepare(_spec(topology, gpu=gpu)).settings
    assert settings.peak_flops == pytest.approx(peak, rel=1e-12)
    assert settings.mem_bw_bytes_per_s == pytest.approx(bandwidth, rel=1e-12)


def test_gpu_is_the_same_simulation_as_its_figures_set_by_hand() -> None:
    by_name = _spec(gpu="h800", phase="decode", batch=16)
    by_hand = _spec(peak_flops=989.5e12, mem_bw_bytes_per_s=3.35e12, phase="decode", batch=16)
    assert input_hash(by_name) == input_hash(by_hand)
    assert input_hash(by_name) != input_hash(_spec(phase="decode", batch=16))  # the study's 1 PFLOP/s, 1.6 TB/s
    assert by_name.key() != by_hand.key()  # its own run id: the spec names the GPU


def test_unset_gpu_keeps_the_study_roofline() -> None:
    settings = prepare(_spec()).settings
    assert (settings.peak_flops, settings.mem_bw_bytes_per_s) == (1.0e15, 1.6e12)


@pytest.mark.parametrize(("topology", "overrides", "message"), [
    ("1", {"gpu": "topology"}, "needs a server-template topology"),
    ("hgx-h800:1", {"gpu": "h800", "peak_flops": 1e15}, "field 'peak_flops': gpu=h800 sets it"),
    ("hgx-h800:1", {"gpu": "h900"}, "field 'gpu': 'h900' is not allowed"),
])
def test_bad_gpu_is_one_line(topology: str, overrides: dict, message: str) -> None:
    strategy = "TP4EP8" if topology == "1" else "TP1EP8"
    spec = RunSpec("qwen3-30b-a3b", topology, strategy, overrides=tuple(sorted(overrides.items())))
    with pytest.raises(MoesimError, match=message) as err:
        prepare(spec)
    assert "\n" not in str(err.value)


def test_a_record_whose_fp8_peak_is_not_twice_bf16_is_refused() -> None:
    odd = GpuModel("odd", {"bf16": 1e15, "fp8": 3e15}, 80e9, 3e12, 900e9, "made up")
    with pytest.raises(MoesimError, match="fp8 peak"):
        gpu_roofline(odd, "test")
    mi300x_like = GpuModel("m", {"bf16": 1307.4e12, "fp8": 2614.9e12}, 192e9, 5.3e12, 896e9, "data sheet rounding")
    assert gpu_roofline(mi300x_like, "test")["peak_flops"] == 1307.4e12


@pytest.mark.parametrize("name", ["gpu", "all_to_all_algorithm"])
def test_a_collective_benchmark_refuses_run_parameters_in_one_line(name: str) -> None:
    from moesim.system.microbench import CollectiveSpec, prepare_collective

    value = "h800" if name == "gpu" else "direct"
    with pytest.raises(MoesimError, match=f"field '{name}': a run parameter") as err:
        prepare_collective(CollectiveSpec("all_to_all", "hgx-h800:1", overrides=((name, value),)))
    assert "\n" not in str(err.value)
