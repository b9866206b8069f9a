"""GPU models: dense tensor-core peaks per data type, HBM size and bandwidth, GPU-interconnect bandwidth.

Every figure is the vendor's public data sheet value (``source``). Data sheets quote NVIDIA's tensor-core
peaks with 2:4 structured sparsity; the dense peak is half of it, and that is what is kept here (an MoE
layer's GEMMs are dense). Bandwidths are as the sheet states them: the GPU-interconnect figure is the
total of both directions (a server template halves it per direction). The server templates
(``templates.py``) name their GPU; a run takes its roofline peak and bandwidth from ``peak_flops`` and
``mem_bw_bytes_per_s``, or from a record here with the run option ``gpu`` (``gpu_roofline``,
docs/deployments.md "GPU models").
"""

from __future__ import annotations

from dataclasses import dataclass, field

from moesim.errors import input_error
from moesim.registry import Registry

TERA, PETA = 1e12, 1e15
GB = 1e9


@dataclass(frozen=True)
class GpuModel:
    """One GPU's data-sheet figures. ``peak_flops``: dense tensor-core FLOP/s per data type (``bf16``,
    ``fp8``; ``fp4`` only where the tensor cores have it); ``gpu_link_bytes_per_s``: NVLink / Infinity
    Fabric bandwidth per GPU, both directions together."""

    name: str
    peak_flops: dict[str, float]
    memory_bytes: float
    mem_bw_bytes_per_s: float
    gpu_link_bytes_per_s: float
    source: str = field(compare=False)

    def peak(self, dtype: str) -> float | None:
        """The dense tensor-core peak of ``dtype`` in FLOP/s, or None when the GPU has no such unit."""
        return self.peak_flops.get(dtype)


GPU_MODELS: Registry[GpuModel] = Registry("GPU model")

_H100_SHEET = ("NVIDIA H100 Tensor Core GPU data sheet, H100 SXM column: BF16 1,979 / FP8 3,958 TFLOPS with "
               "sparsity, 80 GB HBM3 at 3.35 TB/s, NVLink 900 GB/s")
_GPUS = (
    GpuModel("h100", {"bf16": 989.5 * TERA, "fp8": 1979 * TERA}, 80 * GB, 3.35e12, 900 * GB,
             _H100_SHEET),
    # the H100 SXM's tensor cores and memory; NVLink cut to 400 GB/s (and FP64 to 1 TFLOPS)
    GpuModel("h800", {"bf16": 989.5 * TERA, "fp8": 1979 * TERA}, 80 * GB, 3.35e12, 400 * GB,
             "NVIDIA H800 Tensor Core GPU data sheet, H800 SXM column: BF16 1,979 / FP8 3,958 TFLOPS with "
             "sparsity, 80 GB HBM3 at 3.35 TB/s, NVLink 400 GB/s"),
    # no public NVIDIA data sheet: the figures NVIDIA gave its partners, as reported (dense: FP16/BF16 148, FP8 296)
    GpuModel("h20", {"bf16": 148 * TERA, "fp8": 296 * TERA}, 96 * GB, 4.0e12, 900 * GB,
             "NVIDIA HGX H20 partner specification as reported by the press (no public data sheet): "
             "BF16 148 / FP8 296 TFLOPS dense, 96 GB HBM3 at 4.0 TB/s, NVLink 900 GB/s"),
    GpuModel("h200", {"bf16": 989.5 * TERA, "fp8": 1979 * TERA}, 141 * GB, 4.8e12, 900 * GB,
             "NVIDIA H200 Tensor Core GPU data sheet, H200 SXM column: BF16 1,979 / FP8 3,958 TFLOPS with "
             "sparsity, 141 GB HBM3e at 4.8 TB/s, NVLink 900 GB/s"),
    # HGX B200 (8 GPUs): FP4 144 / FP8 72 / BF16 36 PFLOPS with sparsity, 1.44 TB, NVLink 5 1.8 TB/s per GPU;
    # DGX B200: 64 TB/s HBM3e in all
    GpuModel("b200", {"bf16": 2.25 * PETA, "fp8": 4.5 * PETA, "fp4": 9 * PETA}, 180 * GB, 8e12, 1800 * GB,
             "NVIDIA HGX B200 specification (per 8 GPUs: FP4 144, FP8 72, BF16 36 PFLOPS with sparsity, "
             "1.44 TB HBM3e; NVLink 5 1.8 TB/s per GPU) and DGX B200 data sheet (64 TB/s HBM3e)"),
    # NVL72 rack (72 GPUs): FP4 1,440 / FP8 720 / BF16 360 PFLOPS with sparsity, 13.4 TB HBM3e at 576 TB/s,
    # NVLink 130 TB/s
    GpuModel("gb200", {"bf16": 2.5 * PETA, "fp8": 5 * PETA, "fp4": 10 * PETA}, 186 * GB, 8e12, 1800 * GB,
             "NVIDIA GB200 NVL72 specification (per 72 GPUs: FP4 1,440, FP8 720, BF16 360 PFLOPS with sparsity, "
             "13.4 TB HBM3e at 576 TB/s, NVLink 130 TB/s)"),
    # dense: BF16 1,307.4 and FP8 2,614.9 TFLOPS; 192 GB HBM3 at 5.3 TB/s; 7 Infinity Fabric links × 128 GB/s
    GpuModel("mi300x", {"bf16": 1307.4 * TERA, "fp8": 2614.9 * TERA}, 192 * GB, 5.3e12, 896 * GB,
             "AMD Instinct MI300X data sheet: BF16 1,307.4 / FP8 2,614.9 TFLOPS dense, 192 GB HBM3 at "
             "5.3 TB/s; platform: 7 Infinity Fabric links of 128 GB/s per GPU"),
)
_DESCRIPTIONS = {"h100": "H100 SXM", "h800": "H800 SXM (H100 with NVLink cut to 400 GB/s)",
                 "h20": "H20 (Hopper, compute cut to 148 BF16 TFLOPS)", "h200": "H200 SXM (H100 with 141 GB HBM3e)",
                 "b200": "B200 in HGX B200 (1000 W)",
                 "gb200": "B200 in GB200 NVL72 (1200 W)", "mi300x": "AMD Instinct MI300X"}

for _gpu in _GPUS:
    GPU_MODELS.register(_gpu.name, _DESCRIPTIONS[_gpu.name], _gpu.source)(_gpu)


GPU_FROM_TOPOLOGY = "topology"
"""The ``gpu`` value that takes the GPU model of the run's server template."""
PEAK_RATIO_TOLERANCE = 1e-3
"""How far (relative) a record's FP8 peak may sit from ``PEAK_RATIO`` × its BF16 peak: the data sheets
round each figure on its own (MI300X: 2,614.9 against 2 × 1,307.4 TFLOPS)."""


def gpu_choices() -> list[str]:
    """What the ``gpu`` option accepts: every registered GPU model, or ``topology``."""
    return [*GPU_MODELS.names(), GPU_FROM_TOPOLOGY]


def resolve_gpu(value: str, template_gpu: str | None, source: str) -> GpuModel:
    """The GPU model ``value`` names; ``topology`` takes ``template_gpu`` (the run's server template's),
    which a study topology or a YAML file does not have (a one-line error)."""
    if value == GPU_FROM_TOPOLOGY:
        if template_gpu is None:
            raise input_error(source, "gpu", "gpu=topology needs a server-template topology (e.g. hgx-h800:4); "
                              "name the GPU model instead", GPU_MODELS.names())
        value = template_gpu
    if value not in GPU_MODELS:
        raise input_error(source, "gpu", f"unknown GPU model {value!r}", gpu_choices())
    return GPU_MODELS.get(value)


def gpu_roofline(gpu: GpuModel, source: str) -> dict[str, float]:
    """The run settings a GPU model gives its roofline: ``peak_flops`` its dense BF16 peak (the precision
    model's base) and ``mem_bw_bytes_per_s`` its HBM bandwidth. An FP8 class then computes at
    ``PEAK_RATIO['fp8']`` × the BF16 peak, which is the record's FP8 peak to the data sheet's rounding
    (checked: a record that breaks the ratio is refused)."""
    from moesim.workload.precision import PEAK_RATIO  # here: listings import this module without the workload

    bf16 = gpu.peak("bf16")
    if bf16 is None:
        raise input_error(source, "gpu", f"GPU model {gpu.name} has no BF16 peak")
    for dtype, ratio in PEAK_RATIO.items():
        peak = gpu.peak(dtype)
        if peak is not None and abs(peak / bf16 - ratio) > PEAK_RATIO_TOLERANCE * ratio:
            raise input_error(source, "gpu", f"GPU model {gpu.name}: its {dtype} peak {peak:.4g} FLOP/s is not "
                              f"{ratio} × its BF16 peak {bf16:.4g}, which the precision model assumes")
    return {"peak_flops": bf16, "mem_bw_bytes_per_s": gpu.mem_bw_bytes_per_s}
