"""Per-flow congestion-control state and the registry of algorithms (docs/reference-semantics.md A.1.1–A.1.3).

An algorithm is a pure state machine over one flow's state: a float64 vector (slots named by the
algorithm module; slot 0 is the current sending rate, slot 1 the line rate) plus, for INT-based
algorithms, a per-hop table. Its functions are numba-compiled (``compiled``) and take no network
objects, so the same code runs inside both kernels (``moesim.network.cc.dispatch`` calls them by a
registry id) and, through ``FlowCc``, in unit tests:

* ``init(st, hops, p, line_rate_bps)`` resets the state;
* ``on_ack(st, hops, p, ack) -> flags`` reacts to one ACK/NACK, ``ack`` being its ``AckSignal``: the
  one record every backend builds and every algorithm reads the fields it needs from (a new signal is
  a new field there, filled where ACKs are made, and no algorithm's signature changes);
* ``on_timer(st, p, now_ns, timer_id) -> flags`` fires a timer (ignored when stale);
* ``timer_time(st, timer_id) -> float`` is a timer's armed time in ns (-1: not armed);
* ``next_rate_change(st) -> float``: the armed time of the next timer that will change the rate (-1:
  none), which lets the fluid backend jump over timers that do not.

The last three default to "no timers". What the backends need to know about an algorithm is in its
capability flags (``uses_ecn``, ``uses_cnp``, ``uses_int``, ``uses_rtt``, ``controls_rate``), never in its name or
CC_MODE number. An algorithm also names the slots and per-hop columns that hold absolute times
(``time_slots``, ``hop_time_columns``), so that layer fast-forward can move a flow's state in time.

``flags``: bit ``i`` (i < 8) = timer ``i`` was (re)armed; ``FLAG_RATE_SHIFT`` = the rate changed
through HPCC's ``ChangeRate`` (the pacing deadline moves by the tx-time difference of the last packet);
other rate changes take effect from the next packet. Times are integer ns held in float64 (exact
below 2^53 ns). Adding an algorithm: one module registering a ``CcAlgorithm`` in ``CC_ALGORITHMS``,
imported in ``moesim.network.cc`` (docs/network.md, "Adding a congestion-control algorithm").
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

from moesim.errors import MoesimError
from moesim.network.jit import helper, python_twin
from moesim.registry import Registry
from moesim.schema import param

if TYPE_CHECKING:
    from moesim.network.params import NetworkParams

RATE = 0
"""Slot of the current sending rate (b/s): the reference's ``m_rate``."""
MAX_RATE = 1
"""Slot of the line rate (b/s): ``m_max_rate``."""

MAX_SLOTS = 16
"""Width of the per-flow state vector every algorithm fits in."""
HOP_FIELDS = 6
"""Columns of the per-hop table: time, bytes, qlen of the last INT record, then per-hop u, rate, stage."""
INT_FIELDS = 4
"""Columns of an INT record: time_ns, tx_bytes, qlen_bytes, line_rate_bps."""

FLAG_RATE_SHIFT = 1 << 8

compiled = helper
"""Decorator of the CC functions: uncached, so the kernels compile (and inline) them."""


class AckSignal(NamedTuple):
    """What congestion control learns from one ACK/NACK reaching its sender: the packet backend builds it
    from the ACK packet, the fluid backend from its fluid signals, ``FlowCc.ack`` from keywords.
    Integers are int64 (times in ns); numba passes it by value into the compiled algorithms."""

    now_ns: np.int64
    """Arrival time at the sender."""
    ack_seq: np.int64
    """The cumulative sequence acknowledged (bytes; a NACK's: the receiver's expected sequence)."""
    snd_nxt: np.int64
    """The sender's next sequence to send when the ACK arrives."""
    cnp: bool
    """The CNP flag: the acknowledged data packet was ECN-marked (the ECN echo)."""
    ints: np.ndarray
    """INT hop records ``[time_ns, tx_bytes, qlen_bytes, line_rate_bps]`` (int64, rows ≥ ``nhop``)
    copied from the data packet by the switches it crossed."""
    nhop: np.int64
    """Valid rows of ``ints``."""
    rtt_ns: np.int64
    """RTT sample: arrival time minus the time the acknowledged data packet started transmission at
    the sender (the send timestamp the ACK echoes; the fluid backend: base RTT plus its path's
    queueing delay); -1: no sample."""
    win_bytes: np.int64
    """The flow's base window (its path's bandwidth-delay product)."""
    base_rtt_ns: np.int64
    """The flow's base round-trip time (no queueing)."""


@compiled
def no_timer(st, p, now, timer_id):
    return 0


@compiled
def no_timer_time(st, timer_id):
    return -1.0


@compiled
def no_rate_change(st):
    return -1.0


@dataclass(frozen=True)
class RateParams:
    """The rate-control keys the reference shares between algorithms (RATE_AI, RATE_HAI, MIN_RATE,
    EWMA_GAIN; docs/reference-semantics.md A.1): DCQCN reads all four, HPCC the first and third, DCTCP
    the last two."""

    rate_ai_bps: float = 50e6
    rate_hai_bps: float = 100e6
    min_rate_bps: float = 100e6
    ewma_gain: float = param(0.00390625, low=0, high=1, low_open=True)


@dataclass(frozen=True)
class CcAlgorithm:
    """One congestion-control algorithm: its reference CC_MODE, capabilities, state layout and compiled
    functions (the originals, which the kernels inline; ``python`` holds cached twins for Python)."""

    name: str
    mode: int
    """The reference's CC_MODE number for it (the ``cc_mode`` network parameter)."""
    slots: dict[str, int]
    pack_params: Callable[[NetworkParams], np.ndarray]
    init: Callable[..., None]
    on_ack: Callable[..., int]
    timers: tuple[str, ...] = ()
    on_timer: Callable[..., int] = no_timer
    timer_time: Callable[..., float] = no_timer_time
    next_rate_change: Callable[..., float] = no_rate_change
    uses_ecn: bool = False
    """It reacts to ECN marks (the CNP flag of ACKs), so random marking draws can change its results."""
    uses_cnp: bool = False
    """It reacts to each CNP on its own, whatever the ACK carrying it (a QCN/DCQCN reaction point), so
    the fluid backend may deliver expected marks as CNP events. An algorithm that reads the CNP flag as
    an ECN echo counted per window of ACKs (DCTCP) has ``uses_ecn`` only."""
    uses_int: bool = False
    """It reads INT records: switches stamp its data packets, which carry the INT header (and so do ACKs)."""
    uses_rtt: bool = False
    """It reads the RTT samples of ACKs (a delay-based algorithm), so the fluid backend feeds it one ACK
    per step whose sample is its path's RTT then."""
    controls_rate: bool = True
    """False for no congestion control: the rate, and so a VAR_WIN window, stays at line rate and
    backends skip the feedback."""
    params_type: type | None = None
    """Its own parameters (a frozen dataclass; ``NetworkParams.cc_params`` returns them); the rate keys
    the reference shares between algorithms are ``RateParams``."""
    param_names: tuple[str, ...] = field(default=())
    time_slots: tuple[int, ...] = ()
    """State slots holding absolute times in ns (negative: not set)."""
    hop_time_columns: tuple[int, ...] = ()
    """Per-hop columns holding absolute times in ns (only differences of them are ever used)."""

    @cached_property
    def python(self) -> SimpleNamespace:
        """``init``, ``on_ack``, ``on_timer``, ``timer_time`` for callers in Python (cached on disk)."""
        return SimpleNamespace(**{name: python_twin(getattr(self, name))
                                  for name in ("init", "on_ack", "on_timer", "timer_time")})

    def shift_time(self, st: np.ndarray, hops: np.ndarray, delta_ns: int) -> None:
        """Move the absolute times of flows' states (``st``: [flows, slots], ``hops``: [flows, hops,
        columns]) ``delta_ns`` later, leaving unset times unset: the state then behaves as it would
        have ``delta_ns`` earlier."""
        for slot in self.time_slots:
            col = st[:, slot]
            col[col >= 0.0] += float(delta_ns)
        for c in self.hop_time_columns:
            hops[:, :, c] += float(delta_ns)

    def used_params(self, params: NetworkParams) -> dict[str, Any]:
        """The parameter values this algorithm reads (recorded with every result)."""
        return {name: params.value(name) for name in self.param_names}


CC_ALGORITHMS: Registry[CcAlgorithm] = Registry("congestion-control algorithm")

REFERENCE_CC_MODES = {0: "none", 1: "DCQCN", 3: "HPCC", 7: "TIMELY", 8: "DCTCP", 10: "HPCC-PINT"}
"""The CC_MODE values the reference handles (docs/reference-semantics.md A.1.3); any other value, such
as ASTRA-sim's shipped 12, means no congestion control."""


def algorithm_for_mode(cc_mode: int, strict: bool = True) -> CcAlgorithm:
    """The registered algorithm of a reference CC_MODE; a mode the reference does not handle means no
    congestion control (A.1.3). A mode the reference runs but no module registers is an error when
    ``strict`` (a backend that models CC), else also no congestion control (a backend blind to CC)."""
    for entry in CC_ALGORITHMS:
        if entry.obj.mode == cc_mode:
            return entry.obj
    if strict and cc_mode in REFERENCE_CC_MODES:
        known = sorted(e.obj.mode for e in CC_ALGORITHMS)
        raise MoesimError(
            f"network parameters: field 'cc_mode': {cc_mode} ({REFERENCE_CC_MODES[cc_mode]}) is not implemented "
            f"(allowed: {', '.join(map(str, known))}, or any other value for no congestion control)")
    return CC_ALGORITHMS.get("none")


def ns(seconds: float) -> float:
    """Seconds → integer ns (round to nearest, as ns-3 ``MicroSeconds(double)`` does)."""
    return float(round(seconds * 1e9))


class FlowCc:
    """One flow's congestion-control state driven without a network: feed ACKs, let timers fire.

    Timers fire in (time, arming order), which is the order the packet kernel's event queue gives.
    """

    def __init__(self, algorithm: CcAlgorithm | str, params: NetworkParams, line_rate_bps: float,
                 max_hops: int = 8) -> None:
        self.algorithm = CC_ALGORITHMS.get(algorithm) if isinstance(algorithm, str) else algorithm
        self.p = self.algorithm.pack_params(params)
        self.st = np.zeros(MAX_SLOTS)
        self.hops = np.zeros((max_hops, HOP_FIELDS))
        self._fn = self.algorithm.python
        self._fn.init(self.st, self.hops, self.p, float(line_rate_bps))
        self.now_ns = 0
        self._armed: dict[int, int] = {}
        self._arm_seq = 0

    def __getitem__(self, slot: str) -> float:
        return float(self.st[self.algorithm.slots[slot]])

    @property
    def rate_bps(self) -> float:
        return float(self.st[RATE])

    def _note(self, flags: int) -> None:
        for tid in range(len(self.algorithm.timers)):
            if flags & (1 << tid):
                self._armed[tid] = self._arm_seq
                self._arm_seq += 1

    def advance(self, now_ns: int) -> None:
        """Fire every armed timer due at or before ``now_ns``, in time then arming order."""
        while True:
            due = []
            for tid, seq in self._armed.items():
                t = self._fn.timer_time(self.st, tid)
                if 0 <= t <= now_ns:
                    due.append((t, seq, tid))
            if not due:
                break
            t, _, tid = min(due)
            del self._armed[tid]
            self.now_ns = int(t)
            self._note(self._fn.on_timer(self.st, self.p, np.int64(t), tid))
        self.now_ns = now_ns

    def ack(self, now_ns: int, *, ack_seq: int = 0, snd_nxt: int = 0, cnp: bool = False,
            ints: np.ndarray | None = None, rtt_ns: int = -1, win_bytes: int = 0, base_rtt_ns: int = 0) -> int:
        """Deliver one ACK at ``now_ns`` (timers due before it fire first); the keywords are the
        ``AckSignal`` fields (``ints``: its INT records, one row per hop). Returns the flags."""
        self.advance(now_ns)
        rec = np.zeros((1, INT_FIELDS), dtype=np.int64) if ints is None else np.asarray(ints, dtype=np.int64)
        ack = AckSignal(now_ns=np.int64(now_ns), ack_seq=np.int64(ack_seq), snd_nxt=np.int64(snd_nxt),
                        cnp=bool(cnp), ints=rec, nhop=np.int64(0 if ints is None else rec.shape[0]),
                        rtt_ns=np.int64(rtt_ns), win_bytes=np.int64(win_bytes), base_rtt_ns=np.int64(base_rtt_ns))
        flags = self._fn.on_ack(self.st, self.hops, self.p, ack)
        self._note(flags)
        return int(flags)
