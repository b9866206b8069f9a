"""Network parameters (the NS-3 RDMA text-config keys, docs/reference-semantics.md A.1–A.3) and the study's modes.

Every mode is a frozen ``NetworkParams``; a run may override any field by name. The base values are
those of the configuration shipped with ASTRA-sim's NS-3 backend (docs/reference-runs.md, S1).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, TypeVar

from moesim.errors import MoesimError, input_error
from moesim.network.cc import CC_ALGORITHMS, CcAlgorithm, algorithm_for_mode
from moesim.network.cc.base import REFERENCE_CC_MODES, RateParams
from moesim.schema import MAX_COUNT, MAX_RATE_BPS, Param, check_fields, param

GBPS = 1e9
MBPS = 1e6
MAX_PACKET_BYTES = 65536
"""The largest packet payload or header size a parameter accepts (bytes)."""


def _kb_map(pairs: dict[float, float]) -> tuple[tuple[float, float], ...]:
    return tuple(sorted(pairs.items()))


# Shipped ASTRA-sim ECN maps (KB = 1000 B, keyed by port rate in b/s). They have no entry for the
# study's 512 Gbps GPU attachments; ``ecn_unmapped_rate`` says what such a port gets.
KMIN_KB = _kb_map({25 * GBPS: 100, 40 * GBPS: 200, 100 * GBPS: 400, 200 * GBPS: 600, 400 * GBPS: 800,
                   2400 * GBPS: 800})
KMAX_KB = _kb_map({25 * GBPS: 400, 40 * GBPS: 800, 100 * GBPS: 1600, 200 * GBPS: 2400, 400 * GBPS: 3200,
                   2400 * GBPS: 3200})


def cc_only(default: Any, **allowed: Any) -> Any:
    """A field that acts only through flows carrying congestion control (ECN marking and CNPs, INT
    headers, rate and window updates); listed in ``CC_ONLY_FIELDS``."""
    return param(default, tags=("cc_only",), **allowed)


def check_choice(key: str, value: Any, source: str) -> None:
    """A one-line error unless ``value`` is allowed for ``key`` (fields listed in ``CHOICES``)."""
    if key in CHOICES and value not in CHOICES[key]:
        raise MoesimError(f"{source}: field '{key}': {value!r} is not one of {', '.join(CHOICES[key])}")


ECN_MAP = {"low": 0, "high": MAX_RATE_BPS, "note": "[port rate b/s, threshold KB] pairs, one per rate, numbers "
           "in [0, 1e15], KMIN ≤ KMAX"}
"""An ECN map's allowed values (``SwitchParams`` checks rates and KMIN ≤ KMAX)."""


@dataclass(frozen=True)
class TransportParams:
    """The NICs' transport and the packet format (docs/reference-semantics.md A.1): what every flow does,
    with or without congestion control. Read by the backends and the path model."""

    nic_switch_delay_s: float = param(0.7e-6, low=0, high=1)
    packet_payload_bytes: int = param(1000, low=1, high=MAX_PACKET_BYTES)
    l2_chunk_bytes: int = param(4000, low=1, high=MAX_COUNT)
    l2_ack_interval: int = param(1, low=1, high=MAX_COUNT)
    l2_back_to_zero: bool = False
    has_win: bool = True
    global_t: bool = cc_only(False)
    var_win: bool = cc_only(True)
    rate_bound: bool = cc_only(True)
    ack_high_prio: bool = False
    nack_interval_s: float = param(500e-6, low=0, high=1, low_open=True)
    # per-flow policy: flows between GPUs of one server carry no congestion-control state
    intra_server_cc: bool = False
    # header sizes (bytes): data = payload + SeqTs 6 + UDP 8 + IPv4 20 + PPP 2 (+ INT); ACK 48 (+ INT)
    data_header_bytes: int = param(36, low=0, high=MAX_PACKET_BYTES)
    ack_bytes: int = param(48, low=1, high=MAX_PACKET_BYTES)
    int_header_bytes: int = cc_only(42, low=0, high=MAX_PACKET_BYTES)


@dataclass(frozen=True)
class SwitchParams:
    """Switch buffers, PFC headroom and ECN marking (docs/reference-semantics.md A.2). Read by the
    packet backend's MMU and the fluid backend's marking."""

    buffer_bytes: int = param(32 * 1024 * 1024, low=1, high=MAX_COUNT)
    headroom_factor: float = param(3.0, low=0, high=1000)
    enable_qcn: bool = cc_only(True)
    # [port rate b/s, threshold KB] pairs, one rate each; KMIN ≤ KMAX at every rate of both maps
    kmin_kb: tuple[tuple[float, float], ...] = cc_only(KMIN_KB, **ECN_MAP)
    kmax_kb: tuple[tuple[float, float], ...] = cc_only(KMAX_KB, **ECN_MAP)
    pmax: float = cc_only(0.2, low=0, high=1)
    # a port rate missing from the KMIN/KMAX maps: "scale" the 400 Gbps entry with the rate (docs/study.md
    # §5), or "zero" as the reference code reads it with its assertions compiled out (docs/network.md)
    ecn_unmapped_rate: str = cc_only("scale", choices=("scale", "zero"))

    def __post_init__(self) -> None:
        for name in ("kmin_kb", "kmax_kb"):
            rates = [r for r, _ in getattr(self, name)]
            if not rates:
                raise input_error("network parameters", name, "needs at least one [port rate b/s, threshold KB] pair")
            if len(set(rates)) != len(rates) or not all(r > 0 for r in rates):
                raise input_error("network parameters", name, "needs one positive port rate per entry, got "
                                  f"{getattr(self, name)!r}")
        kmax = dict(self.kmax_kb)
        for rate, kmin in self.kmin_kb:
            if rate in kmax and kmin > kmax[rate]:
                raise input_error("network parameters", "kmin_kb", f"{kmin:g} KB exceeds kmax_kb {kmax[rate]:g} KB "
                                  f"at {rate:g} b/s")

    def kmin_bytes(self, rate_bps: float) -> float:
        return _lookup(self.kmin_kb, rate_bps, "KMIN_MAP", self.ecn_unmapped_rate) * 1000.0

    def kmax_bytes(self, rate_bps: float) -> float:
        return _lookup(self.kmax_kb, rate_bps, "KMAX_MAP", self.ecn_unmapped_rate) * 1000.0


@dataclass(frozen=True)
class FluidOptions:
    """Options of the fluid backend only (docs/network-fluid.md); no other backend reads them."""

    # ECN marks as expected values, or drawn per flow
    fluid_marks: str = cc_only("expected", choices=("expected", "random"))
    # which queues a round trip crosses: the data path's, or also the ACK path's ("round_trip": ACKs
    # wait behind reverse traffic unless ack_high_prio); "auto": round_trip with random marks, data with
    # expected ones
    fluid_rtt: str = param("auto", choices=("auto", "data", "round_trip"))
    # a window as a rate (window / RTT) with max-min sharing of the delivered rates ("rate"), or as
    # bytes in flight with FIFO service of each flow's own backlog ("bytes")
    fluid_window: str = param("rate", choices=("rate", "bytes"))
    # 0: the rates are shared out again at every drain; > 0: at most once per this many seconds, flows
    # draining inside one such stride complete at their own drain times (docs/network-fluid.md, "Strided drains")
    fluid_drain_step_s: float = param(0.0, low=0, high=1e-3)


@dataclass(frozen=True)
class PacketOptions:
    """Options of the packet backend only (docs/network-packet.md); no other backend reads them."""

    # how a NIC keeps its queue pairs: "fast" drops a finished QP from the round-robin at once and
    # schedules a port's transmit-complete event only while it has more to send; "ns3" follows ns-3's
    # QP vector (positional round-robin, lazy compaction, wake-ups over every listed QP, rate changes
    # on the final ACK) and schedules that event per packet. "ns3" reproduces the reference stack's
    # multi-dimension runs to the ns and costs about 2.5x the CPU time at the study's scale
    nic_model: str = param("fast", choices=("fast", "ns3"))
    # the seed of the switches' ECN-marking random stream (RED between KMIN and KMAX): one draw sequence of
    # many a real cluster could give; ensembles vary it (moesim.system.ensemble)
    ecn_seed: int = cc_only(1, low=0, high=2**32 - 1)


@dataclass(frozen=True)
class AnalyticalOptions:
    """Options of the analytical backend only (docs/network.md); no other backend reads them."""

    # "rdma": a flow costs the RDMA path model's latency (propagation both ways, store-and-forward of the
    # last packet and its ACK) plus its wire bytes at the bottleneck; "astra": ASTRA-sim 2.0's
    # congestion-unaware analytical network, the route's link latencies plus payload / bottleneck
    # bandwidth, truncated to whole ns, no headers, no ACKs
    analytical_model: str = param("rdma", choices=("rdma", "astra"))


SECTIONS: dict[str, type] = {
    "transport": TransportParams, "switch": SwitchParams, "rate": RateParams, "fluid": FluidOptions,
    "packet": PacketOptions, "analytical": AnalyticalOptions,
}
"""The fixed sections of ``NetworkParams``, by attribute name."""

DEFAULT_ALGORITHM_PARAMS: tuple[Any, ...] = tuple(
    e.obj.params_type() for e in CC_ALGORITHMS if e.obj.params_type is not None)
"""Each registered algorithm's own parameters (its ``params_type``) at their defaults, in registry order."""
CC_ALGORITHMS.close("the network parameters hold the sections of the algorithms registered when "
                    "moesim.network.cc is imported: import the algorithm's module in moesim/network/cc/__init__.py")

SECTION_TYPES: tuple[type, ...] = (*SECTIONS.values(), *(type(s) for s in DEFAULT_ALGORITHM_PARAMS))
"""Every section's dataclass: the fixed ones, then the algorithms' own."""

OWNER: dict[str, type] = {f.name: cls for cls in SECTION_TYPES for f in dataclasses.fields(cls)}
"""Parameter name → the section that holds it. Names are unique across sections: overrides, exported
configs and stored results use the flat names (the reference's keys, with units)."""
assert len(OWNER) == sum(len(dataclasses.fields(c)) for c in SECTION_TYPES), "duplicate parameter name"
_ATTRIBUTE = {cls: name for name, cls in SECTIONS.items()}
_T = TypeVar("_T")

CHOICES: dict[str, tuple[Any, ...]] = {p.name: p.allowed.choices for cls in SECTION_TYPES
                                       for p in Param.of(cls, "network") if p.allowed.choices}
"""Fields whose value is one of a few names."""

NO_CC_MODES = (12,)
"""CC_MODE values that ASTRA-sim's shipped configurations use for no congestion control."""
CC_MODES = tuple(sorted({*REFERENCE_CC_MODES, *(e.obj.mode for e in CC_ALGORITHMS), *NO_CC_MODES}))
"""The ``cc_mode`` values moesim accepts: the reference's modes, the registered algorithms', and
``NO_CC_MODES`` (any other value would silently mean no congestion control)."""


@dataclass(frozen=True)
class NetworkParams:
    """All parameters of the RDMA network model: the mode's name and CC_MODE, one section per concern,
    and each CC algorithm's own section. Names follow the reference keys, with units;
    ``with_overrides`` and ``value`` take them flat."""

    name: str = "custom"
    cc_mode: int = param(0, choices=CC_MODES)
    transport: TransportParams = TransportParams()
    switch: SwitchParams = SwitchParams()
    rate: RateParams = RateParams()
    fluid: FluidOptions = FluidOptions()
    packet: PacketOptions = PacketOptions()
    analytical: AnalyticalOptions = AnalyticalOptions()
    algorithms: tuple[Any, ...] = DEFAULT_ALGORITHM_PARAMS
    """The registered algorithms' own parameters (``cc_params`` finds one by its type)."""

    def __post_init__(self) -> None:
        """Every field of every section in its declared range (``moesim.schema``), however it was set."""
        check_fields(self, "network parameters")
        for name in SECTIONS:
            check_fields(getattr(self, name), "network parameters")
        for section in self.algorithms:
            check_fields(section, "network parameters")

    def cc_params(self, cls: type[_T]) -> _T:
        """The section of type ``cls`` among the algorithms' own (a CC module reads its parameters so)."""
        for section in self.algorithms:
            if type(section) is cls:
                return section
        raise MoesimError(f"network parameters: no section {cls.__name__} (is its algorithm registered?)")

    @property
    def cc_algorithm(self) -> CcAlgorithm:
        """The registered algorithm of ``cc_mode`` (no congestion control for a mode none registers;
        a backend that models CC looks it up strictly with ``algorithm_for_mode``)."""
        return algorithm_for_mode(self.cc_mode, strict=False)

    @property
    def int_bytes(self) -> int:
        """INT header bytes carried by data packets and ACKs (algorithms that read INT records)."""
        return self.transport.int_header_bytes if self.cc_algorithm.uses_int else 0

    @property
    def data_packet_overhead_bytes(self) -> int:
        return self.transport.data_header_bytes + self.int_bytes

    @property
    def ack_packet_bytes(self) -> int:
        """ACK wire bytes: the INT header first fills the ACK's 14 B of padding (48 B → 76 B with HPCC)."""
        return self.transport.ack_bytes + max(0, self.int_bytes - 14)

    @property
    def cc_name(self) -> str:
        return self.cc_algorithm.name

    def value(self, name: str) -> Any:
        """One parameter by its flat name."""
        if name in ("name", "cc_mode"):
            return getattr(self, name)
        return getattr(self._section(OWNER[name]), name)

    def _section(self, cls: type) -> Any:
        return getattr(self, _ATTRIBUTE[cls]) if cls in _ATTRIBUTE else self.cc_params(cls)

    def with_overrides(self, overrides: dict[str, Any] | None, source: str = "overrides") -> NetworkParams:
        """Return a copy with parameters replaced by flat name; unknown names are a one-line error
        listing the allowed ones."""
        if not overrides:
            return self
        top: dict[str, Any] = {}
        by_section: dict[type, dict[str, Any]] = {}
        for key, value in overrides.items():
            if key == "name":
                top[key] = value
            elif key in PARAMS:
                value = PARAMS[key].check(value, source)
                if key in OWNER:
                    by_section.setdefault(OWNER[key], {})[key] = value
                else:
                    top[key] = value
            else:
                allowed = ", ".join(sorted(["name", "cc_mode", *OWNER]))
                raise MoesimError(f"{source}: field '{key}': unknown network parameter (allowed: {allowed})")
        algorithms = list(self.algorithms)
        for cls, values in by_section.items():
            section = dataclasses.replace(self._section(cls), **values)
            if cls in _ATTRIBUTE:
                top[_ATTRIBUTE[cls]] = section
            else:
                algorithms = [section if type(s) is cls else s for s in algorithms]
        return dataclasses.replace(self, **top, algorithms=tuple(algorithms))

    def as_dict(self) -> dict[str, Any]:
        """The parameters as one flat dict (the names overrides, exports and stored results use)."""
        out: dict[str, Any] = {"name": self.name, "cc_mode": self.cc_mode}
        for section in (*(getattr(self, name) for name in SECTIONS), *self.algorithms):
            out.update(dataclasses.asdict(section))
        return out


PARAMS: dict[str, Param] = {p.name: p for cls in (NetworkParams, *SECTION_TYPES)
                            for p in Param.of(cls, "network", skip=frozenset({"name", "algorithms"}))}
"""Every network parameter by its flat name (``cc_mode`` and each section's fields), with its type and
allowed values: what ``with_overrides``, ``moesim run --set`` and the ASTRA-sim readers check."""

CC_ONLY_FIELDS = frozenset({
    "cc_mode",
    *(f.name for cls in SECTION_TYPES for f in dataclasses.fields(cls)
      if f.metadata.get("cc_only") or cls is RateParams or cls not in _ATTRIBUTE),
})
"""Fields that only act through flows carrying congestion control: ``cc_mode``, the fields marked
``cc_only`` in their section, the shared rate keys and every algorithm's own section. A run in which no
flow can carry CC (the per-flow policy; e.g. one server) reads none of them, whatever its network mode."""


def without_cc_only(values: dict[str, Any]) -> dict[str, Any]:
    """``values`` (flat names) without the fields of ``CC_ONLY_FIELDS``."""
    out = dict(values)
    for name in CC_ONLY_FIELDS:
        out.pop(name, None)
    return out


def effective_params(params: NetworkParams, sections: Iterable[str], models_cc: bool,
                     cc_flows: bool) -> dict[str, Any]:
    """The parameters a simulation reads, as a flat dict: the ``sections`` its backend reads (without the
    NIC–switch delay, which the topology's links carry), and, when flows can carry congestion control,
    ``cc_mode`` and, for a backend that models CC, the parameters its algorithm reads (``param_names``);
    without such flows no field of ``CC_ONLY_FIELDS``. Runs whose effective parameters (and other inputs)
    coincide are one simulation, so a parameter of one algorithm never changes the key of another's runs."""
    out: dict[str, Any] = {}
    for name in sections:
        out.update(dataclasses.asdict(getattr(params, name)))
    out.pop("nic_switch_delay_s", None)
    if not cc_flows:
        return without_cc_only(out)
    out["cc_mode"] = params.cc_mode
    if models_cc:
        out.update({n: params.value(n) for n in params.cc_algorithm.param_names})
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
    "ib_cc0": _STUDY_BASE.with_overrides(dict(name="ib_cc0", cc_mode=_cc("none"), enable_qcn=False, nic_switch_delay_s=0.7e-6)),
    "ib_hpcc": _STUDY_BASE.with_overrides(dict(name="ib_hpcc", cc_mode=_cc("hpcc"), enable_qcn=False, nic_switch_delay_s=0.7e-6)),
    "roce_hpcc": _STUDY_BASE.with_overrides(dict(name="roce_hpcc", cc_mode=_cc("hpcc"), enable_qcn=True, nic_switch_delay_s=1.0e-6)),
    "roce_dcqcn": _STUDY_BASE.with_overrides(dict(name="roce_dcqcn", cc_mode=_cc("dcqcn"), enable_qcn=True, nic_switch_delay_s=1.0e-6)),
}
"""The study's four network modes (docs/study.md §5): CC_MODE 0/3/3/1, ENABLE_QCN 0/0/1/1."""

# The per-mode presets of the reference runs (docs/reference-runs.md): the shipped file as is (CC_MODE 12
# = no CC), the HPCC authors' DCQCN / HPCC run settings (S1/S3), and ASTRA-sim's congestion-unaware
# analytical network for the analytical backend (S5/S6).
REFERENCE_PRESETS: dict[str, NetworkParams] = {
    "none": _STUDY_BASE.with_overrides(dict(name="none", cc_mode=_cc("none"), enable_qcn=True)),
    "dcqcn": _STUDY_BASE.with_overrides(dict(
        name="dcqcn", cc_mode=_cc("dcqcn"), has_win=False, var_win=False, ack_high_prio=True,
        rp_timer_s=300e-6, rate_ai_bps=80 * MBPS, rate_hai_bps=800 * MBPS,
    )),
    "hpcc": _STUDY_BASE.with_overrides(dict(
        name="hpcc", cc_mode=_cc("hpcc"), has_win=True, var_win=True,
        rate_ai_bps=160 * MBPS, rate_hai_bps=1600 * MBPS,
    )),
    "astra": _STUDY_BASE.with_overrides(dict(name="astra", cc_mode=_cc("none"), enable_qcn=False,
                                             analytical_model="astra")),
}


def network_mode(name: str) -> NetworkParams:
    """Look up a study network mode or a reference preset by name."""
    if name in NETWORK_MODES:
        return NETWORK_MODES[name]
    if name in REFERENCE_PRESETS:
        return REFERENCE_PRESETS[name]
    allowed = list(NETWORK_MODES) + list(REFERENCE_PRESETS)
    raise MoesimError(f"unknown network mode '{name}' (allowed: {', '.join(allowed)})")


# ASTRA-sim's NS-3 text config (docs/reference-semantics.md A.3) → NetworkParams: key → (field, reader).
def _flag(text: str) -> bool:
    if text not in ("0", "1"):
        raise ValueError("expected 0 or 1")
    return text == "1"


def _us(text: str) -> float:
    return float(text) * 1e-6


def _ns3_rate(text: str) -> float:
    m = re.fullmatch(r"([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)(Gb/s|Mb/s|Kb/s|b/s|Gbps|Mbps|Kbps|bps)", text)
    if m is None:
        raise ValueError("expected a rate such as 50Mb/s")
    return float(m.group(1)) * {"G": GBPS, "M": MBPS, "K": 1e3, "b": 1.0}[m.group(2)[0]]


NS3_CONFIG_KEYS: dict[str, tuple[str, Any]] = {
    "CC_MODE": ("cc_mode", int), "ENABLE_QCN": ("enable_qcn", _flag),
    "PACKET_PAYLOAD_SIZE": ("packet_payload_bytes", int), "L2_CHUNK_SIZE": ("l2_chunk_bytes", int),
    "L2_ACK_INTERVAL": ("l2_ack_interval", int), "L2_BACK_TO_ZERO": ("l2_back_to_zero", _flag),
    "HAS_WIN": ("has_win", _flag), "GLOBAL_T": ("global_t", _flag), "VAR_WIN": ("var_win", _flag),
    "RATE_BOUND": ("rate_bound", _flag), "ACK_HIGH_PRIO": ("ack_high_prio", _flag),
    "ALPHA_RESUME_INTERVAL": ("alpha_resume_interval_s", _us), "RATE_DECREASE_INTERVAL": ("rate_decrease_interval_s", _us),
    "CLAMP_TARGET_RATE": ("clamp_target_rate", _flag), "RP_TIMER": ("rp_timer_s", _us),
    "EWMA_GAIN": ("ewma_gain", float), "FAST_RECOVERY_TIMES": ("fast_recovery_times", int),
    "RATE_AI": ("rate_ai_bps", _ns3_rate), "RATE_HAI": ("rate_hai_bps", _ns3_rate), "MIN_RATE": ("min_rate_bps", _ns3_rate),
    "FAST_REACT": ("fast_react", _flag), "U_TARGET": ("u_target", float), "MI_THRESH": ("mi_thresh", int),
    "INT_MULTI": ("int_multi", int), "MULTI_RATE": ("multi_rate", _flag), "SAMPLE_FEEDBACK": ("sample_feedback", _flag),
    "BUFFER_SIZE": ("buffer_bytes", lambda t: int(t) * 1024 * 1024),
}
"""Keys that set a NetworkParams field, with the reader of their value (times in µs, rates as NS-3 writes them)."""

NS3_FIXED_KEYS: dict[str, tuple[str, ...]] = {
    "USE_DYNAMIC_PFC_THRESHOLD": ("1",), "ERROR_RATE_PER_LINK": ("0", "0.0", "0.000"), "LINK_DOWN": ("0 0 0",),
    "NIC_TOTAL_PAUSE_TIME": ("0",), "ENABLE_TRACE": ("0", "1"), "DCTCP_RATE_AI": ("1000Mb/s",),
    "PINT_LOG_BASE": ("1.05",), "PINT_PROB": ("1", "1.0"),
}
"""Keys moesim accepts only with the values it models (link errors, link failures and the PCIe pause are not
modelled; ENABLE_TRACE only writes the binary trace)."""

NS3_FILE_KEYS = ("TOPOLOGY_FILE", "FLOW_FILE", "TRACE_FILE", "TRACE_OUTPUT_FILE", "FCT_OUTPUT_FILE",
                 "PFC_OUTPUT_FILE", "QLEN_MON_FILE", "QLEN_MON_START", "QLEN_MON_END", "SIMULATOR_STOP_TIME")
"""Input and output file names and monitor windows: they do not change a result (TOPOLOGY_FILE is read by the caller)."""


def _ns3_map(text: str) -> tuple[tuple[float, float], ...]:
    parts = text.split()
    n = int(parts[0])
    if len(parts) != 1 + 2 * n:
        raise ValueError(f"expected {n} rate-value pairs after the count")
    return tuple(sorted((float(parts[1 + 2 * i]), float(parts[2 + 2 * i])) for i in range(n)))


def _ns3_checked(field: str, key: str, text: str, value: Any, where: str) -> Any:
    """``value`` (read from ``text``) if the parameter ``field`` allows it, else a one-line error naming the
    file's ``key``, its text and what the parameter allows in moesim's units."""
    try:
        return PARAMS[field].check(value, where, strict=True)
    except MoesimError:
        raise MoesimError(f"{where}: field '{key}': {text!r} is not allowed ({field}: {PARAMS[field].describe()})") \
            from None


def params_from_ns3_config(text: str, source: str, base: NetworkParams | None = None) -> tuple[NetworkParams, dict[str, str]]:
    """Read ASTRA-sim's NS-3 network config text (``KEY value`` per line) into NetworkParams over ``base``
    (default: the shipped configuration); returns them and the file keys (``TOPOLOGY_FILE`` …) as written.
    An unknown key or a value moesim does not model is a one-line error naming the key and the allowed values."""
    overrides: dict[str, Any] = {}
    files: dict[str, str] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        key, _, value = line.strip().partition(" ")
        value = value.strip()
        where = f"{source}: line {number}"
        try:
            if key in NS3_CONFIG_KEYS:
                field, read = NS3_CONFIG_KEYS[key]
                overrides[field] = _ns3_checked(field, key, value, read(value), where)
            elif key in ("KMIN_MAP", "KMAX_MAP"):
                field = "kmin_kb" if key == "KMIN_MAP" else "kmax_kb"
                overrides[field] = _ns3_checked(field, key, value, _ns3_map(value), where)
            elif key == "PMAX_MAP":
                pmax = {p for _, p in _ns3_map(value)}
                if len(pmax) != 1:
                    raise MoesimError(f"{where}: field 'PMAX_MAP': one PMAX for every rate is modelled, got {value!r}")
                overrides["pmax"] = _ns3_checked("pmax", key, value, pmax.pop(), where)
            elif key in NS3_FIXED_KEYS:
                if " ".join(value.split()) not in NS3_FIXED_KEYS[key]:
                    raise input_error(where, key, f"{value!r} is not modelled", NS3_FIXED_KEYS[key])
            elif key in NS3_FILE_KEYS:
                files[key] = value
            else:
                allowed = sorted([*NS3_CONFIG_KEYS, "KMIN_MAP", "KMAX_MAP", "PMAX_MAP", *NS3_FIXED_KEYS, *NS3_FILE_KEYS])
                raise input_error(where, key, "unknown or unsupported NS-3 config key", allowed)
        except (ValueError, IndexError) as exc:
            raise MoesimError(f"{where}: field '{key}': cannot read {value!r} ({exc})") from None
    params = (base or NetworkParams()).with_overrides(overrides, source)
    return dataclasses.replace(params, name="ns3-config"), files
