"""The data type of each operation class of an MoE layer, as deployments run it (docs/workload.md, "Precision").

Classes: expert GEMMs (the routed experts), dense GEMMs (attention projections, dense FFN, router, shared
experts), the attention core (scores and values), the KV cache, and the EP dispatch and combine payloads.
An unset class keeps the study's model (every GEMM at the run's ``peak_flops``, weights at
``weight_bytes_per_param`` / ``expert_bytes_per_param``, caches and payloads at the model's
``bytes_per_activation``), so existing runs are unchanged. A set class computes at its data type's
dense tensor-core peak, ``peak_flops`` × ``PEAK_RATIO`` (``peak_flops`` is the dense BF16 peak), and
reads its weights and cache at the type's width. FP8 payloads are sent as DeepEP sends its FP8
dispatch: one byte per channel plus one FP32 scale per 128 channels.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

DTYPES = ("bf16", "fp8")
DTYPE_BYTES = {"bf16": 2, "fp8": 1}
"""Bytes per value of each data type."""
PEAK_RATIO = {"bf16": 1, "fp8": 2}
"""Dense tensor-core peak of a data type over the BF16 one: FP8 runs at twice BF16 on every GPU of
``moesim.topology.gpus`` (H100/H800/H20/H200/B200/GB200 and MI300X data sheets; tests/topology)."""
FP8_SCALE_CHANNELS = 128
"""Channels per FP8 scale: DeepEP's FP8 dispatch quantizes each token in blocks of 128 channels
(DeepSeek-V3 technical report §3.3.2, fine-grained 1×128 activation tiles)."""
FP8_SCALE_BYTES = 4
"""One FP32 scale per block, as DeepEP sends them alongside the FP8 payload."""


def payload_bytes(channels: int, dtype: str) -> int:
    """Bytes one token's ``channels``-wide activation takes on the wire in ``dtype``: 2·channels in BF16;
    in FP8 channels + ⌈channels/128⌉·4 (the values, then one FP32 scale per 128 channels)."""
    if dtype == "fp8":
        return channels + -(-channels // FP8_SCALE_CHANNELS) * FP8_SCALE_BYTES
    return channels * DTYPE_BYTES[dtype]


@dataclass(frozen=True)
class Precision:
    """The data type of each operation class; None = the study's model of that class (module docstring).
    ``measured`` carries the compute model with them, as every cost function reads both."""

    expert: str | None = None
    dense: str | None = None
    attention: str | None = None
    kv: str | None = None
    dispatch: str | None = None
    combine: str | None = None
    measured: bool = False
    """How fast a class computes: at its roofline (False, the study's model) or at the measured efficiency
    of its kernels (``efficiency.py``, the ``compute_model=measured`` option)."""

    @staticmethod
    def rate(dtype: str | None) -> int:
        """The class's peak over the run's ``peak_flops``: 1 when unset."""
        return 1 if dtype is None else PEAK_RATIO[dtype]

    @staticmethod
    def weight_bytes(dtype: str | None, default: float) -> Fraction:
        """Bytes per weight of a class: its type's width, or ``default`` (a ``*_bytes_per_param``) when unset."""
        return Fraction(default) if dtype is None else Fraction(DTYPE_BYTES[dtype])

    def kv_bytes(self, default: int) -> int:
        """Bytes per cached value: the KV type's width, or ``default`` (the model's activation width)."""
        return default if self.kv is None else DTYPE_BYTES[self.kv]

    def row_bytes(self, dtype: str | None, channels: int, default_bytes: int) -> int:
        """Bytes per token of a dispatch or combine payload: ``payload_bytes``, or channels × ``default_bytes``
        when the payload's type is unset."""
        return channels * default_bytes if dtype is None else payload_bytes(channels, dtype)


def peak_scale(parts: list[tuple[int | Fraction, int]]) -> Fraction:
    """The peak, over the run's ``peak_flops``, of a node made of (FLOPs, rate) parts run one after the
    other: F / Σ Fᵢ/rᵢ, so its compute time is Σ Fᵢ / (rᵢ · peak). 1 for a node without FLOPs."""
    total = sum((Fraction(f) for f, _ in parts), Fraction(0))
    if total == 0:
        return Fraction(1)
    return total / sum((Fraction(f) / r for f, r in parts), Fraction(0))
