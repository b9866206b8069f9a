"""Network parameters (the NS-3 RDMA text-config keys, docs/reference-semantics.md A.1–A.3) and the study's modes.

Every mode is a frozen ``NetworkParams``; a run may override any field by name. The base values are
those of the configuration shipped with ASTRA-sim's NS-3 backend (docs/reference-runs.md, S1).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from moesim.errors import MoesimError
from moesim.network.cc import CC_ALGORITHMS, CcAlgorithm, algorithm_for_mode

GBPS = 1e9
MBPS = 1e6


def _kb_map(pairs: dict[float, float]) -> tuple[tuple[float, float], ...]:
    return tuple(sorted(pairs.items()))


# Shipped ASTRA-sim ECN maps (KB = 1000 B, keyed by port rate in b/s). They have no entry for the
# study's 512 Gbps GPU attachments; ``ecn_unmapped_rate`` says what such a port gets.
KMIN_KB = _kb_map({25 * GBPS: 100, 40 * GBPS: 200, 100 * GBPS: 400, 200 * GBPS: 600, 400 * GBPS: 800,
                   2400 * GBPS: 800})
KMAX_KB = _kb_map({25 * GBPS: 400, 40 * GBPS: 800, 100 * GBPS: 1600, 200 * GBPS: 2400, 400 * GBPS: 3200,
                   2400 * GBPS: 3200})


CHOICES: dict[str, tuple[str, ...]] = {
    "fluid_marks": ("expected", "random"),
    "fluid_rtt": ("auto", "data", "round_trip"),
    "fluid_window": ("rate", "bytes"),
    "ecn_unmapped_rate": ("scale", "zero"),
}
"""Fields whose value is one of a few names."""


def check_choice(key: str, value: Any, source: str) -> None:
    """A one-line error unless ``value`` is allowed for ``key`` (fields listed in ``CHOICES``)."""
    if key in CHOICES and value not in CHOICES[key]:
        raise MoesimError(f"{source}: field '{key}': {value!r} is not one of {', '.join(CHOICES[key])}")


@dataclass(frozen=True)
class NetworkParams:
    """All parameters of the RDMA network model; names follow the reference keys, with units."""

    name: str = "custom"
    cc_mode: int = 0
    enable_qcn: bool = True
    nic_switch_delay_s: float = 0.7e-6
    packet_payload_bytes: int = 1000
    l2_chunk_bytes: int = 4000
    l2_ack_interval: int = 1
    l2_back_to_zero: bool = False
    has_win: bool = True
    global_t: bool = False
    var_win: bool = True
    fast_react: bool = True
    u_target: float = 0.95
    mi_thresh: int = 0
    int_multi: int = 1
    multi_rate: bool = False
    sample_feedback: bool = False
    rate_bound: bool = True
    ack_high_prio: bool = False
    buffer_bytes: int = 32 * 1024 * 1024
    headroom_factor: float = 3.0
    alpha_resume_interval_s: float = 1e-6
    rate_decrease_interval_s: float = 4e-6
    clamp_target_rate: bool = False
    rp_timer_s: float = 900e-6
    ewma_gain: float = 0.00390625
    fast_recovery_times: int = 1
    rate_ai_bps: float = 50 * MBPS
    rate_hai_bps: float = 100 * MBPS
    min_rate_bps: float = 100 * MBPS
    rate_on_first_cnp: float = 1.0
    kmin_kb: tuple[tuple[float, float], ...] = KMIN_KB
    kmax_kb: tuple[tuple[float, float], ...] = KMAX_KB
    pmax: float = 0.2
    # a port rate missing from the KMIN/KMAX maps: "scale" the 400 Gbps entry with the rate (docs/study.md
    # §5), or "zero" as the reference code reads it with its assertions compiled out (docs/network.md)
    ecn_unmapped_rate: str = "scale"
    nack_interval_s: float = 500e-6
    # per-flow policy: flows between GPUs of one server carry no congestion-control state
    intra_server_cc: bool = False
    # header sizes (bytes): data = payload + SeqTs 6 + UDP 8 + IPv4 20 + PPP 2 (+ INT); ACK 48 (+ INT)
    data_header_bytes: int = 36
    ack_bytes: int = 48
    int_header_bytes: int = 42
    # fluid backend only: ECN marks as expected values, or drawn per flow (docs/network-fluid.md)
    fluid_marks: str = "expected"
    # fluid backend only: which queues a round trip crosses: the data path's, or also the ACK path's
    # ("round_trip": ACKs wait behind reverse traffic unless ack_high_prio); "auto": round_trip with
    # random marks, data with expected ones (docs/network-fluid.md)
    fluid_rtt: str = "auto"
    # fluid backend only: a window as a rate (window / RTT) with max-min sharing of the delivered rates
    # ("rate"), or as bytes in flight with FIFO service of each flow's own backlog ("bytes")
    # (docs/network-fluid.md)
    fluid_window: str = "rate"
    extra: tuple[tuple[str, Any], ...] = field(default=())

    @property
    def cc_algorithm(self) -> CcAlgorithm:
        """The registered algorithm of ``cc_mode`` (no congestion control for a mode none registers;
        a backend that models CC looks it up strictly with ``algorithm_for_mode``)."""
        return algorithm_for_mode(self.cc_mode, strict=False)

    @property
    def int_bytes(self) -> int:
        """INT header bytes carried by data packets and ACKs (algorithms that read INT records)."""
        return self.int_header_bytes if self.cc_algorithm.uses_int else 0

    @property
    def data_packet_overhead_bytes(self) -> int:
        return self.data_header_bytes + self.int_bytes

    @property
    def ack_packet_bytes(self) -> int:
        """ACK wire bytes: the INT header first fills the ACK's 14 B of padding (48 B → 76 B with HPCC)."""
        return self.ack_bytes + max(0, self.int_bytes - 14)

    @property
    def cc_name(self) -> str:
        return self.cc_algorithm.name

    def kmin_bytes(self, rate_bps: float) -> float:
        return _lookup(self.kmin_kb, rate_bps, "KMIN_MAP", self.ecn_unmapped_rate) * 1000.0

    def kmax_bytes(self, rate_bps: float) -> float:
        return _lookup(self.kmax_kb, rate_bps, "KMAX_MAP", self.ecn_unmapped_rate) * 1000.0

    def with_overrides(self, overrides: dict[str, Any] | None, source: str = "overrides") -> NetworkParams:
        """Return a copy with fields replaced; unknown names are a one-line error listing the allowed ones."""
        if not overrides:
            return self
        names = {f.name for f in dataclasses.fields(self)}
        for key in overrides:
            if key not in names:
                raise MoesimError(f"{source}: field '{key}': unknown network parameter (allowed: {', '.join(sorted(names))})")
            check_choice(key, overrides[key], source)
        return dataclasses.replace(self, **overrides)

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


CC_ONLY_FIELDS = frozenset({
    "cc_mode", "enable_qcn", "global_t", "var_win", "fast_react", "u_target", "mi_thresh", "int_multi",
    "multi_rate", "sample_feedback", "rate_bound", "alpha_resume_interval_s", "rate_decrease_interval_s",
    "clamp_target_rate", "rp_timer_s", "ewma_gain", "fast_recovery_times", "rate_ai_bps", "rate_hai_bps",
    "min_rate_bps", "rate_on_first_cnp", "kmin_kb", "kmax_kb", "pmax", "ecn_unmapped_rate", "int_header_bytes",
    "fluid_marks",
})
"""Fields that only act through flows carrying congestion control: ECN marking and CNPs, INT headers,
rate and window updates. A run in which no flow can carry CC (the per-flow policy; e.g. one server)
reads none of them, whatever its network mode."""


def effective_params(params: NetworkParams, cc_flows: bool) -> dict[str, Any]:
    """The parameters a simulation reads, as a dict: without the mode's name and the NIC–switch delay
    (the topology's links carry it), and without ``CC_ONLY_FIELDS`` when no flow can carry CC. Runs
    whose effective parameters (and other inputs) coincide are one simulation."""
    out = {k: v for k, v in params.as_dict().items() if k not in ("name", "nic_switch_delay_s")}
    if not cc_flows:
        for k in CC_ONLY_FIELDS:
            out.pop(k)
    return out


def _lookup(table: tuple[tuple[float, float], ...], rate_bps: float, key: str, unmapped: str) -> float:
    for rate, value in table:
        if abs(rate - rate_bps) < 1e-6 * rate:
            return value
    if unmapped == "zero":  # std::map::operator[] of a missing key, the assertion compiled out
        return 0.0
    for rate, value in table:
        if rate == 400 * GBPS:
            return value * rate_bps / rate
    raise MoesimError(f"{key}: no entry for {rate_bps / GBPS:g} Gbps")


_STUDY_BASE = NetworkParams()


def _cc(name: str) -> int:
    """The CC_MODE of a registered algorithm."""
    return CC_ALGORITHMS.get(name).mode


NETWORK_MODES: dict[str, NetworkParams] = {
    "ib_cc0": dataclasses.replace(_STUDY_BASE, name="ib_cc0", cc_mode=_cc("none"), enable_qcn=False, nic_switch_delay_s=0.7e-6),
    "ib_hpcc": dataclasses.replace(_STUDY_BASE, name="ib_hpcc", cc_mode=_cc("hpcc"), enable_qcn=False, nic_switch_delay_s=0.7e-6),
    "roce_hpcc": dataclasses.replace(_STUDY_BASE, name="roce_hpcc", cc_mode=_cc("hpcc"), enable_qcn=True, nic_switch_delay_s=1.0e-6),
    "roce_dcqcn": dataclasses.replace(_STUDY_BASE, name="roce_dcqcn", cc_mode=_cc("dcqcn"), enable_qcn=True, nic_switch_delay_s=1.0e-6),
}
"""The study's four network modes (docs/study.md §5): CC_MODE 0/3/3/1, ENABLE_QCN 0/0/1/1."""

# The per-mode presets of the reference runs (docs/reference-runs.md, S1/S3): the shipped file as is
# (CC_MODE 12 = no CC), and the HPCC authors' DCQCN / HPCC run settings.
REFERENCE_PRESETS: dict[str, NetworkParams] = {
    "none": dataclasses.replace(_STUDY_BASE, name="none", cc_mode=_cc("none"), enable_qcn=True),
    "dcqcn": dataclasses.replace(
        _STUDY_BASE, name="dcqcn", cc_mode=_cc("dcqcn"), has_win=False, var_win=False, ack_high_prio=True,
        rp_timer_s=300e-6, rate_ai_bps=80 * MBPS, rate_hai_bps=800 * MBPS,
    ),
    "hpcc": dataclasses.replace(
        _STUDY_BASE, name="hpcc", cc_mode=_cc("hpcc"), has_win=True, var_win=True,
        rate_ai_bps=160 * MBPS, rate_hai_bps=1600 * MBPS,
    ),
}


def network_mode(name: str) -> NetworkParams:
    """Look up a study network mode or a reference preset by name."""
    if name in NETWORK_MODES:
        return NETWORK_MODES[name]
    if name in REFERENCE_PRESETS:
        return REFERENCE_PRESETS[name]
    allowed = list(NETWORK_MODES) + list(REFERENCE_PRESETS)
    raise MoesimError(f"unknown network mode '{name}' (allowed: {', '.join(allowed)})")
