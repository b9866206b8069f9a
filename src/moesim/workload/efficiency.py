"""Achievable compute: the fraction of its roofline time an operation class reaches, from published kernel
measurements (docs/deployments.md, "Achievable compute"); the ``compute_model=measured`` option.

Each measured kernel gives an efficiency η = (its roofline time on the GPU it was measured on) / (its
measured time), one number whether it was compute- or memory-bound. moesim divides a node's roofline time
by η: its peak and its memory bandwidth are both taken at η (``Work.peak_scale``, ``Work.bw_scale``). The
tables are the sources' own figures; nothing is fitted. Between measured sizes η is interpolated linearly
in log2 of the size and held at the end points outside them; a shape the tables do not hold takes the
nearest measured (N, K) in log2 distance. The fractions are applied to every GPU and data type as they
were measured (H800 FP8 GEMMs, H100 BF16 attention).

* Dense GEMMs by shape (M, N, K) and grouped expert GEMMs by tokens per expert: DeepGEMM's README
  (github.com/deepseek-ai/DeepGEMM, commit 55ab91f, 2025-03-25), FP8 GEMMs with BF16 output on H800 SXM5
  (NVCC 12.8), the shapes of DeepSeek-V3 inference; its roofline: 1979 TFLOPS FP8 dense, 3.35 TB/s, bytes
  = A and B in FP8 + D in BF16 per group (which reproduces the README's GB/s column).
* Prefill attention by keys per query: FlashAttention-3 (Shah et al., arXiv:2407.08608, Fig. 5), forward
  FP16 without causal mask, head dim 128, 16k tokens per batch, H100 SXM5, over its 989.5 TFLOPS dense
  BF16 peak (moesim counts the full T×T scores, so the non-causal figures apply).
* Decode attention: FlashMLA's README (github.com/deepseek-ai/FlashMLA), dense MLA decoding on H800 SXM5:
  up to 3000 GB/s memory-bound (its KV-cache reads) and 660 TFLOPS compute-bound (its score and value
  products). The kernel runs MLA in "MQA mode" over the cached latent (README, support matrix: K heads of
  576 = kv_lora + rope, V of 512 = kv_lora, the up-projections absorbed into the query and output), and its
  TFLOPS count that work: 2·h_q·s_q·s_k·(d_k + d_v) (docs/20250422-new-kernel-deep-dive.md, "A Theoretical
  Analysis of the MLA Algorithm").
"""

from __future__ import annotations

import math
from dataclasses import dataclass

COMPUTE_MODELS = ("roofline", "measured")
"""``roofline``: every node at its roofline (the study's model); ``measured``: at the efficiencies here."""

H800_FP8_PEAK_FLOPS = 1979e12
"""H800 SXM dense FP8 tensor-core peak (``topology/gpus.py``): DeepGEMM's and FlashMLA's GPU."""
H800_MEM_BW_BYTES_PER_S = 3.35e12
H100_BF16_PEAK_FLOPS = 989.5e12
"""H100 SXM dense BF16 peak: FlashAttention-3's GPU; also the H800's BF16 peak (FlashMLA computes in BF16)."""


@dataclass(frozen=True)
class GemmMeasurement:
    """One row of DeepGEMM's tables: ``groups`` GEMMs of ``m`` × ``n`` × ``k`` (M tokens, N outputs, K inputs)
    at ``tflops`` and ``gbps`` as measured."""

    groups: int
    m: int
    n: int
    k: int
    tflops: float
    gbps: float

    @property
    def flops(self) -> int:
        return 2 * self.groups * self.m * self.n * self.k

    @property
    def bytes_moved(self) -> int:
        """A (M×K) and B (N×K) in FP8, D (M×N) in BF16, per group: the README's byte count."""
        return self.groups * (self.m * self.k + self.n * self.k + 2 * self.m * self.n)

    @property
    def efficiency(self) -> float:
        """Roofline time on the H800 over the measured time."""
        measured_s = self.flops / (self.tflops * 1e12)
        return max(self.flops / H800_FP8_PEAK_FLOPS, self.bytes_moved / H800_MEM_BW_BYTES_PER_S) / measured_s


# DeepGEMM README at commit 55ab91f72f76e8a6db0e86282c3169a88d93df1b: groups, M, N, K, TFLOPS, GB/s.
DEEPGEMM_DENSE = tuple(GemmMeasurement(1, *row) for row in (
    (64, 2112, 7168, 206, 1688), (64, 24576, 1536, 289, 2455), (64, 32768, 512, 219, 2143),
    (64, 7168, 16384, 336, 2668), (64, 4096, 7168, 287, 2320), (64, 7168, 2048, 295, 2470),
    (128, 2112, 7168, 352, 1509), (128, 24576, 1536, 535, 2448), (128, 32768, 512, 358, 2103),
    (128, 7168, 16384, 645, 2604), (128, 4096, 7168, 533, 2221), (128, 7168, 2048, 510, 2277),
    (4096, 2112, 7168, 1009, 503), (4096, 24576, 1536, 1125, 893), (4096, 32768, 512, 751, 1569),
    (4096, 7168, 16384, 1426, 361), (4096, 4096, 7168, 1265, 485), (4096, 7168, 2048, 1168, 794),
))
"""Normal GEMMs for dense models."""
DEEPGEMM_GROUPED = tuple(GemmMeasurement(*row) for row in (
    # contiguous layout (prefill: each expert's tokens concatenated)
    (4, 8192, 4096, 7168, 1346, 434), (4, 8192, 7168, 2048, 1214, 752),
    (8, 4096, 4096, 7168, 1346, 516), (8, 4096, 7168, 2048, 1214, 826),
    # masked layout (decode: each expert's tokens padded to a fixed budget)
    (1, 1024, 4096, 7168, 1233, 924), (1, 1024, 7168, 2048, 925, 968),
    (2, 512, 4096, 7168, 1040, 1288), (2, 512, 7168, 2048, 916, 1405),
    (4, 256, 4096, 7168, 932, 2064), (4, 256, 7168, 2048, 815, 2047),
))
"""Grouped GEMMs for MoE models (M per group = tokens per expert). The dense table's M = 64 and 128 rows of
the same (N, K) stand for one expert with that many tokens."""

FLASH_ATTENTION_3 = ((512, 467), (1024, 565), (2048, 625), (4096, 638), (8192, 646), (16384, 648))
"""(sequence length, TFLOPS): FlashAttention-3, Fig. 5, forward without causal mask, head dim 128, H100 SXM5."""
FLASH_MLA_DECODE_TFLOPS = 660
FLASH_MLA_DECODE_GBPS = 3000
"""FlashMLA dense decoding on H800 SXM5 (CUDA 12.8): compute-bound TFLOPS, memory-bound GB/s."""

DECODE_ATTENTION_COMPUTE = FLASH_MLA_DECODE_TFLOPS * 1e12 / H100_BF16_PEAK_FLOPS
"""Decode attention's score and value products: 660 of the H800's 989.5 BF16 TFLOPS."""
DECODE_ATTENTION_MEMORY = FLASH_MLA_DECODE_GBPS * 1e9 / H800_MEM_BW_BYTES_PER_S
"""Decode attention's KV-cache reads: 3000 of the H800's 3350 GB/s."""


def decode_attention_core_efficiency(counted_width: int, kernel_width: int) -> float:
    """The decode attention core's efficiency over the FLOPs moesim counts, 2·q·C·heads·``counted_width``
    (qk_dim + v_dim per head), when the kernel executes 2·q·C·heads·``kernel_width``: FlashMLA reaches 660
    TFLOPS on its own count, d_k + d_v = (kv_lora + rope) + kv_lora = 1088 for DeepSeek-V3 against the
    counted 192 + 128 = 320, so the counted FLOPs run at 660 × 320 / 1088 TFLOPS. ``kernel_width`` =
    ``counted_width`` (GQA) leaves FlashMLA's fraction as it is."""
    return DECODE_ATTENTION_COMPUTE * counted_width / kernel_width


def _curves(rows: tuple[GemmMeasurement, ...]) -> dict[tuple[int, int], tuple[tuple[int, float], ...]]:
    """(N, K) → the (M, efficiency) points measured for it, by M."""
    out: dict[tuple[int, int], list[tuple[int, float]]] = {}
    for r in rows:
        out.setdefault((r.n, r.k), []).append((r.m, r.efficiency))
    return {nk: tuple(sorted(points)) for nk, points in sorted(out.items())}


DENSE_CURVES = _curves(DEEPGEMM_DENSE)
GROUPED_CURVES = _curves(DEEPGEMM_GROUPED + tuple(r for r in DEEPGEMM_DENSE if r.m <= 128
                                                  if (r.n, r.k) in {(g.n, g.k) for g in DEEPGEMM_GROUPED}))


def interpolate(points: tuple[tuple[int, float], ...], size: float) -> float:
    """``points`` (size, value) sorted by size, read at ``size``: linear in log2(size) between two points,
    the end point's value beyond them."""
    if size <= points[0][0]:
        return points[0][1]
    if size >= points[-1][0]:
        return points[-1][1]
    for (x0, y0), (x1, y1) in zip(points, points[1:], strict=False):
        if size <= x1:
            t = (math.log2(size) - math.log2(x0)) / (math.log2(x1) - math.log2(x0))
            return y0 + t * (y1 - y0)
    raise AssertionError("unreachable: size is within the points")


def _nearest(curves: dict[tuple[int, int], tuple[tuple[int, float], ...]], n: int, k: int) -> tuple[tuple[int, float], ...]:
    """The curve of the measured (N, K) nearest to (n, k): least |log2(n/N)| + |log2(k/K)|, ties to the
    smaller (N, K)."""
    key = min(curves, key=lambda nk: (abs(math.log2(n / nk[0])) + abs(math.log2(k / nk[1])), nk))
    return curves[key]


def gemm_efficiency(m: float, n: int, k: int) -> float:
    """A dense GEMM of M = ``m`` tokens, N = ``n`` outputs, K = ``k`` inputs (DeepGEMM's normal GEMMs)."""
    return interpolate(_nearest(DENSE_CURVES, max(n, 1), max(k, 1)), max(m, 1))


def grouped_gemm_efficiency(tokens_per_expert: float, n: int, k: int) -> float:
    """One of an MoE layer's expert GEMMs, N = ``n``, K = ``k``, at ``tokens_per_expert`` rows per expert
    (DeepGEMM's grouped GEMMs; below 64 rows the 64-row figure: the kernel pads to its block and is
    bound by the weight reads)."""
    return interpolate(_nearest(GROUPED_CURVES, max(n, 1), max(k, 1)), max(tokens_per_expert, 1))


def prefill_attention_efficiency(keys: int) -> float:
    """The attention core (scores and values) of a prefill whose queries attend to ``keys`` tokens."""
    return interpolate(tuple((s, t * 1e12 / H100_BF16_PEAK_FLOPS) for s, t in FLASH_ATTENTION_3), max(keys, 1))
