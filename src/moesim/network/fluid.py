"""Fluid backend ("fluid"): the flow model plus queues, windows, ECN, PFC and DCQCN/HPCC rate control.

Between flow events the state is integrated with a fixed step (``FLUID_STEP_S``) while anything is
dynamic (a backlog, or a congestion-controlled flow whose rate moves) and in one jump to the next
drain otherwise (with ``fluid_drain_step_s``, a jump of at least that stride). Per step (``fluid_kernel.fluid_step``): each flow offers min(CC rate, window/RTT
with queueing delay); its NIC serves its flows round-robin (max-min on its own port under the offers);
the network delivers the max-min fair allocation under those sending rates; the part sent above the
delivered rate at a bottleneck downstream of the sender's own port builds that port's backlog (an
unsaturated port drains); the backlog sets the ECN marking probability
(KMIN/KMAX/PMAX, RED-like) and the INT records; a backlog at the PFC dynamic threshold is held there
(a PAUSE event). ``fluid_window=bytes`` makes windows bytes in flight and serves each port's queued
flows FIFO (``fluid_kernel``). The CC state machines are those of the packet backend (``moesim.network.cc``).
A flow completes one fixed latency (as in ``flow``) plus its path's queueing delay after it drains.
"""

from __future__ import annotations

import bisect
import heapq
import math
from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np

from moesim.errors import MoesimError
from moesim.network.base import BACKENDS, Capabilities, Flow, NetworkBackend
from moesim.network.cc import CC_ALGORITHMS, algorithm_for_mode
from moesim.network.cc.base import HOP_FIELDS, INT_FIELDS, MAX_SLOTS
from moesim.network.cc.dispatch import cc_id
from moesim.network.diagnostics import DiagnosticsSpec
from moesim.network.fluid_kernel import (
    FluidState,
    exp_draw,
    fluid_peek,
    fluid_run,
    table_append,
    table_compact,
)
from moesim.network.jit import compiled_for
from moesim.network.params import NetworkParams, check_choice
from moesim.network.paths import PathModel
from moesim.topology.model import NodeKind, Topology, ecmp_index, ecmp_seed

FLUID_STEP_S = 1e-6
"""Integration step while the state is dynamic (about one base RTT of the study topologies)."""
FLUID_MAX_STEP_S = 8e-6
"""The step doubles up to this while only HPCC rates that have settled keep the state dynamic."""
HORIZON_STEPS = 32
"""While dynamic, ``next_completion_s`` without a horizon estimates at most this many steps ahead."""
MAX_STEPS_PER_CALL = 100_000
"""Steps one kernel call may take before it hands control back (keeps a look-ahead interruptible)."""
MAX_HOP_RECORDS = 8
MAX_PENDING_CNPS = 128
"""CNPs one flow may have in flight (at most one per µs: 128 µs of feedback delay at full marking)."""
APPEND_MANY_FROM = 8
"""Flows started together from which ``start_flows`` writes their rows as whole-column copies."""
POP_ONE_BY_ONE = 32
"""Completed flows ``advance_to`` pops off the heap one at a time before it sorts the rest instead."""
PFC_ALPHA_SHIFT = 3
"""The packet MMU's dynamic threshold is (free buffer) >> 3 per ingress (docs/network-packet.md)."""


class _Static:
    """Per-link constants: capacity, whether the port is a switch egress (queues, ECN, INT), thresholds."""

    def __init__(self, topology: Topology, params: NetworkParams) -> None:
        kinds = {n.name: n.kind for n in topology.nodes}
        n_in: dict[str, int] = {}
        for link in topology.links:
            n_in[link.dst] = n_in.get(link.dst, 0) + 1
        self.cap = np.array([link.bandwidth_bps / 8.0 for link in topology.links])
        self.switch_egress = np.array([kinds[link.src] != NodeKind.GPU for link in topology.links])
        self.kmin = np.array([params.switch.kmin_bytes(link.bandwidth_bps) for link in topology.links])
        self.kmax = np.array([params.switch.kmax_bytes(link.bandwidth_bps) for link in topology.links])
        # k congested ingress ports each pausing at Th = (B - used) / 8 hold used = B·k/(8 + k) in total
        a = float(1 << PFC_ALPHA_SHIFT)
        self.q_pfc = np.array([params.switch.buffer_bytes * n_in.get(link.src, 1) / (a + n_in.get(link.src, 1))
                               for link in topology.links])


SCALAR_COLUMNS: dict[type, tuple[str, ...]] = {
    np.float64: ("rem", "acked", "win", "rtt0", "dcoef", "line", "lat", "rates", "offered", "send", "sent",
                 "acked_rt", "rtt_flight", "rtt_seq", "rtt_due", "ack_wait", "rr", "dcap", "drain_at", "done_t"),
    np.int64: ("ids", "hops", "nfwd", "npend", "bn", "qport", "own", "own_bn", "done_ids"),
}
"""Per-flow scalar columns, side by side in one block per dtype (a new flow's row is one copy of its
route's template). The last ones are the kernels' scratch (they allocate nothing) and fluid_run's
drained flows."""
_ARRAYS: dict[str, tuple[tuple[int, ...], type]] = {
    "links": ((0,), np.int64), "coefs": ((0,), np.float64), "first": ((), np.int64), "cc_on": ((), np.bool_),
    "st": ((MAX_SLOTS,), np.float64), "hop": ((MAX_HOP_RECORDS, HOP_FIELDS), np.float64),
    "mark": ((3,), np.float64), "pend": ((MAX_PENDING_CNPS,), np.float64), "ackq": ((-1, 2), np.float64),
    "ackp": ((3,), np.int64), "frozen": ((), np.bool_),
}
"""The other per-flow columns: shape after the row axis (``(0,)`` = as wide as the longest route, ``-1`` =
the ACK ring's length) and dtype."""
_COL = {name: (dtype, j) for dtype, names in SCALAR_COLUMNS.items() for j, name in enumerate(names)}
_COLUMN = {"first_queued": "first", "line_Bps": "line", "hop_tab": "hop", "bottleneck": "bn"}
"""``FluidState`` fields whose flow-table column has another name."""
_FRESH = {"bn": -1, "qport": -1, "rtt_due": -1.0}
"""Fresh flow state that is not zero."""
ACK_RING = 128
"""Window as bytes in flight: (time, bytes) records of a flow's ACKs in flight, one per step."""


class _Route(NamedTuple):
    """A flow's constant columns, shared by every flow of one route class (route, policy, last packet):
    its link and coefficient rows, CC state and per-hop table at start, and its scalar rows (route
    constants and fresh state) as templates."""

    number: int
    links: np.ndarray
    coefs: np.ndarray
    first: int
    cc_on: bool
    lat: float
    st: np.ndarray
    hop: np.ndarray
    rows: dict[type, np.ndarray]
    template: tuple[Any, ...]
    """What ``fluid_kernel.table_append`` copies into a new row (scalar rows, links, coefficients, own port,
    CC switch, CC state, per-hop table)."""


class _Classes(NamedTuple):
    """The route classes of one class key on each route its GPU pair has, as rows computed together
    (``FluidBackend._classes``); row i becomes a ``_Route`` when a flow first takes route i."""

    links: np.ndarray
    coefs: np.ndarray
    first: list[int]
    cc_on: bool
    lat: np.ndarray
    line_bps: list[float]
    f64: np.ndarray
    i64: np.ndarray


class _Ecmp(NamedTuple):
    """A class key whose GPU pair has several equal-cost routes: the pair's ECMP hash seed, the route class on
    each of its routes (``None`` until a flow takes it) and their rows."""

    seed: int
    routes: list[_Route | None]
    classes: _Classes


class FlowTable:
    """Flows in preallocated columns, one row per flow in start order (live, or retired by the kernel
    once drained until the next compaction); kernels get the whole columns and work on rows [0, n)."""

    def __init__(self, ring: int = 1) -> None:
        self.n = 0
        self.width = 1
        self.blocks: dict[type, np.ndarray] = {dtype: np.zeros((64, len(names)), dtype=dtype)
                                               for dtype, names in SCALAR_COLUMNS.items()}
        self.arrays: dict[str, np.ndarray] = {
            k: np.zeros((64, *({0: self.width, -1: ring}.get(d, d) for d in shape)), dtype=dtype)
            for k, (shape, dtype) in _ARRAYS.items()}
        self._registry: dict[str, np.ndarray] = {  # per route number, its templates (``register``)
            "f64": np.zeros((64, len(SCALAR_COLUMNS[np.float64]))),
            "i64": np.zeros((64, len(SCALAR_COLUMNS[np.int64])), dtype=np.int64),
            "links": np.zeros((64, 1), dtype=np.int64), "coefs": np.zeros((64, 1)),
            "first": np.zeros(64, dtype=np.int64), "cc_on": np.zeros(64, dtype=np.bool_),
            "width": np.zeros(64, dtype=np.int64), "st": np.zeros((64, MAX_SLOTS)),
            "hop": np.zeros((64, MAX_HOP_RECORDS, HOP_FIELDS))}
        self.version = -1  # bumped whenever a column is reallocated (arrays handed out before are stale)
        self._append_version = -2
        self._append_args: tuple[Any, ...] = ()
        self._views()

    def _views(self) -> None:
        """Every column by name (a scalar column is a view of its block), after a reallocation."""
        self.cols = dict(self.arrays)
        for name, (dtype, j) in _COL.items():
            self.cols[name] = self.blocks[dtype][:, j]
        self.version += 1

    def append(self, flow_id: int, size_bytes: float, route: _Route, mark: tuple[float, int, int]) -> None:
        """Add a flow on ``route`` with ``size_bytes`` left to send, fresh dynamic state and ECN-mark state
        ``mark`` (see ``fluid_kernel.fluid_step``); the row is written by ``fluid_kernel.table_append``."""
        arrays, width = self.arrays, len(route.links)
        if width > self.width:  # a longer route: widen the padded route columns
            for k in ("links", "coefs"):
                arrays[k] = np.pad(arrays[k], ((0, 0), (0, width - self.width)))
            self.width = width
            self._views()
        if self.n == len(arrays["cc_on"]):
            groups: tuple[dict[Any, np.ndarray], ...] = (arrays, self.blocks)
            for group in groups:
                for k, v in group.items():
                    group[k] = np.concatenate([v, np.zeros_like(v)])
            self._views()
        if self._append_version != self.version:
            self._append_args = (_COL["ids"][1], _COL["rem"][1], self.blocks[np.float64], self.blocks[np.int64],
                                 *(arrays[k] for k in ("links", "coefs", "first", "cc_on", "st", "hop", "mark",
                                                       "ackp")))
            self._append_version = self.version
        kernel = _KERNELS.get("append")
        if kernel is None:
            kernel = _KERNELS["append"] = compiled_for(table_append, self.n, flow_id, size_bytes, *self._append_args,
                                                       *route.template, 0.0, 0.0, 0.0)
        kernel(self.n, flow_id, size_bytes, *self._append_args, *route.template, float(mark[0]), float(mark[1]),
               float(mark[2]))
        self.n += 1

    def register(self, routes: list[_Route]) -> None:
        """Keep each route's templates as row ``route.number`` of the route registry ``append_many`` copies
        from (the rows of routes of one width written together)."""
        reg = self._registry
        width = max(len(route.links) for route in routes)
        if width > reg["links"].shape[1]:
            for k in ("links", "coefs"):
                reg[k] = np.pad(reg[k], ((0, 0), (0, width - reg[k].shape[1])))
        top = max(route.number for route in routes)
        while top >= len(reg["width"]):
            for k, v in reg.items():
                reg[k] = np.concatenate([v, np.zeros_like(v)])
        nums = np.array([route.number for route in routes], dtype=np.int64)
        reg["f64"][nums] = [route.rows[np.float64] for route in routes]
        reg["i64"][nums] = [route.rows[np.int64] for route in routes]
        reg["first"][nums] = [route.first for route in routes]
        reg["cc_on"][nums] = [route.cc_on for route in routes]
        reg["st"][nums] = [route.st for route in routes]
        reg["hop"][nums] = [route.hop for route in routes]
        widths = [len(route.links) for route in routes]
        reg["width"][nums] = widths
        for w in set(widths):
            same = [route for route, rw in zip(routes, widths, strict=True) if rw == w]
            at = np.array([route.number for route in same], dtype=np.int64)
            reg["links"][at, :w] = [route.links for route in same]
            reg["coefs"][at, :w] = [route.coefs for route in same]

    def append_many(self, flow_ids: Sequence[int], sizes: Sequence[float], numbers: Sequence[int],
                    marks: list[tuple[float, int, int]] | None) -> None:
        """``append`` of each flow in order (ids, bytes to send, registered route numbers, ECN-mark states or
        ``None`` for the fresh state of expected marks, all zero),
        as whole-column copies from the route registry: the same rows, down to the link entries past a
        route's end, which keep what the table held there."""
        reg, arrays, blocks = self._registry, self.arrays, self.blocks
        k, n = len(flow_ids), self.n
        nums = np.array(numbers, dtype=np.int64)
        widths = reg["width"][nums]
        width = int(widths.max())
        if width > self.width:
            for key in ("links", "coefs"):
                arrays[key] = np.pad(arrays[key], ((0, 0), (0, width - self.width)))
            self.width = width
            self._views()
        if n + k > len(arrays["cc_on"]):
            while n + k > len(arrays["cc_on"]):
                groups: tuple[dict[Any, np.ndarray], ...] = (arrays, self.blocks)
                for group in groups:
                    for key, v in group.items():
                        group[key] = np.concatenate([v, np.zeros_like(v)])
            self._views()
        rows = slice(n, n + k)
        f64, i64 = blocks[np.float64], blocks[np.int64]
        f64[rows] = reg["f64"][nums]
        f64[rows, _COL["rem"][1]] = sizes
        i64[rows] = reg["i64"][nums]
        i64[rows, _COL["ids"][1]] = flow_ids
        inside = np.arange(width) < widths[:, None]  # each row's own route, no further
        np.copyto(arrays["links"][rows, :width], reg["links"][nums, :width], where=inside)
        np.copyto(arrays["coefs"][rows, :width], reg["coefs"][nums, :width], where=inside)
        for key in ("first", "cc_on", "st", "hop"):
            arrays[key][rows] = reg[key][nums]
        arrays["mark"][rows] = 0.0 if marks is None else marks
        arrays["ackp"][rows] = 0
        self.n = n + k

    def keep(self, mask: np.ndarray) -> None:
        """Keep the rows where ``mask`` (over rows [0, n)) is true, in order."""
        rows = np.flatnonzero(mask)
        m = len(rows)
        for group in (self.arrays, self.blocks):
            for v in group.values():
                v[:m] = v[rows]
        self.n = m

    def compact(self) -> None:
        """Keep the live rows (bytes left to send is finite), in order (``fluid_kernel.table_compact``)."""
        a = self.arrays
        args = (self.n, self.cols["rem"], self.blocks[np.float64], self.blocks[np.int64],
                *(a[k] for k in ("links", "coefs", "first", "cc_on", "st", "hop", "mark", "pend", "ackq", "ackp",
                                 "frozen")))
        if _KERNELS.get("compact") is None:
            _KERNELS["compact"] = compiled_for(table_compact, *args)
        self.n = _KERNELS["compact"](*args)


_KERNELS: dict[str, Any] = {}
"""The flow table's kernels compiled for its column types (the same for every table), on first use."""


@BACKENDS.register(
    "fluid", "Fluid network: max-min sharing under CC/window offers, port backlogs, ECN, PFC, DCQCN/HPCC",
    "fluid models of RDMA CC (Zhu et al. CoNEXT 2016); the packet backend's CC state machines; docs/network-fluid.md",
)
class FluidBackend(NetworkBackend):
    """Congestion-aware fluid network; active flows live in flat arrays, one row per flow."""

    capabilities = Capabilities(congestion_control=True, sections=("transport", "switch", "fluid"))

    def __init__(self, topology: Topology, params: NetworkParams, diagnostics: DiagnosticsSpec | None = None) -> None:
        super().__init__(topology, params)
        self._paths = PathModel(topology, params)
        self._static = _Static(topology, params)
        self.cc = algorithm_for_mode(params.cc_mode)
        if self.cc.controls_rate and not (self.cc.uses_cnp or self.cc.uses_int or self.cc.uses_rtt):
            raise MoesimError(
                f"network parameters: field 'cc_mode': {params.cc_mode} ({self.cc.name}) has no fluid model: the "
                "fluid backend feeds CC as CNP events, INT records or RTT samples (docs/network-fluid.md); "
                "use the packet backend")
        self._cc = cc_id(self.cc)
        self._ccp = self.cc.pack_params(params)
        check_choice("fluid_marks", params.fluid.fluid_marks, "network parameters")
        check_choice("fluid_rtt", params.fluid.fluid_rtt, "network parameters")
        self._random_marks = params.fluid.fluid_marks == "random"
        rtt = params.fluid.fluid_rtt if params.fluid.fluid_rtt != "auto" else ("round_trip" if self._random_marks else "data")
        self._ack_queues = rtt == "round_trip" and not params.transport.ack_high_prio
        check_choice("fluid_window", params.fluid.fluid_window, "network parameters")
        self._win_bytes = params.fluid.fluid_window == "bytes"
        self._drain_step_s = float(params.fluid.fluid_drain_step_s)
        n_links = len(topology.links)
        self._q = np.zeros(n_links)
        self._tx = np.zeros(n_links)
        self._counters = np.zeros(3, dtype=np.int64)
        self._lws = np.zeros((9, n_links))  # the kernels' scratch per link
        self._lbws = np.zeros((2, n_links), dtype=np.bool_)
        self._ints = np.zeros((MAX_HOP_RECORDS, INT_FIELDS), dtype=np.int64)
        self._t = 0.0
        # live flows and retired (drained) rows not yet compacted away
        self._cols = FlowTable(ACK_RING if self._win_bytes else 1)
        self._live = 0
        self._state: FluidState | None = None  # the kernels' state over the flow table's columns
        self._state_version = -1
        self._run_kernel: Any = None  # fluid_run and fluid_peek compiled for the state's column types
        self._peek_kernel: Any = None
        self._fresh = False  # rates valid for the current flow set and state
        self._done: list[tuple[float, int, int]] = []
        self._seq = 0
        self._routes: list[_Route] = []  # route classes, by _Route.number
        self._unregistered: list[_Route] = []  # not yet in the flow table's route registry
        self._payload = params.transport.packet_payload_bytes
        self._pairs: dict[tuple[int, int, bool, float], _Route | _Ecmp] = {}  # by _route's class key
        self._route_bytes = np.zeros(64)  # bytes started per route class, by _Route.number
        self.steps = 0
        self._cc_init: dict[tuple[bool, float], tuple[np.ndarray, np.ndarray]] = {}
        self._rows: dict[tuple[object, ...], tuple[np.ndarray, np.ndarray, list[float]]] = {}  # by PathSet.key
        links = topology.links
        payload = params.transport.packet_payload_bytes
        # the packet backend's per-link base RTT terms (build.py): 2·delay + one payload's serialisation, in ns
        self._rtt_ns = np.array([2 * int(round(link.delay_s * 1e9)) + math.floor(payload * 8e9 / link.bandwidth_bps)
                                 for link in links], dtype=np.int64)
        self._bps = np.array([link.bandwidth_bps for link in links])

    # ------------------------------------------------------------------ flow table

    @property
    def flow_table(self) -> FlowTable:
        """The flows' columns (read by tests and diagnostics; the kernels own the values)."""
        return self._cols

    @property
    def path_model(self) -> PathModel:
        """The route, latency and coefficient model of every flow."""
        return self._paths
    def _route(self, flow: Flow) -> _Route:
        """The constant columns of ``flow``, built once per route class: (source, destination, CC, last
        packet's payload) where the GPU pair has a single route, and that and the flow's ECMP route
        (``Topology.route``: the pair's hash seed kept, the flow id hashed on from it) where it has several."""
        size = flow.size_bytes
        key = (flow.src_gpu, flow.dst_gpu, flow.cc, size if size < self._payload else self._payload)
        hit = self._pairs.get(key)
        if hit is None:
            hit = self._pairs[key] = self._new_pair(flow)
        if isinstance(hit, _Route):
            return hit
        i = ecmp_index(hit.seed, flow.flow_id, len(hit.routes))
        return hit.routes[i] or self._new_route(flow, hit, i)

    def _routes_of(self, flows: list[Flow]) -> list[_Route]:
        """``_route`` of each flow, in order (one loop, no call per flow)."""
        pairs, payload, out = self._pairs, self._payload, []
        for flow in flows:
            _, src, dst, size, cc = flow
            hit = pairs.get((src, dst, cc, size if size < payload else payload))
            if hit is None:
                hit = self._route(flow)
            elif not isinstance(hit, _Route):
                i = ecmp_index(hit.seed, flow.flow_id, len(hit.routes))
                hit = hit.routes[i] or self._new_route(flow, hit, i)
            out.append(hit)
        return out

    def _new_pair(self, flow: Flow) -> _Route | _Ecmp:
        """A class key's entry: its route class where the GPU pair has one route, else its ECMP choices."""
        options = self.topology.routes(flow.src_gpu, flow.dst_gpu)
        classes = self._classes(flow, options)
        if len(options) == 1:
            return self._build_route(classes, 0)
        return _Ecmp(ecmp_seed(flow.src_gpu, flow.dst_gpu), [None] * len(options), classes)

    def _new_route(self, flow: Flow, pair: _Ecmp, i: int) -> _Route:
        """The route class of ``flow`` on its pair's ECMP route ``i``, built and kept on the pair."""
        route = pair.routes[i] = self._build_route(pair.classes, i)
        return route

    def _classes(self, flow: Flow, options: list[tuple[int, ...]]) -> _Classes:
        """The constant rows of ``flow``'s class key on each of the routes ``options`` (``PathModel.on_routes``),
        and the packet backend's window and base RTT of each: rtt = 2Σdelay + Σ⌊payload·8e9/bw⌋ ns,
        bdp = rtt·min bw/8 (build.py)."""
        paths = self._paths.on_routes(flow, options)
        fwd = paths.fwd
        rows = self._rows.get(paths.key)  # the rows are functions of the paths' key (PathSet.key)
        if rows is None:
            dc = paths.data_coef
            rtt_ns = self._rtt_ns[fwd].sum(axis=1)  # integers: exact in any order
            bw = self._bps[fwd].min(axis=1)
            win = np.trunc(rtt_ns * bw / 1e9 / 8) if self.params.transport.has_win else np.zeros(len(fwd))
            line_bps = self._bps[fwd[:, 0]]
            k = len(fwd)
            f64 = np.zeros((k, len(SCALAR_COLUMNS[np.float64])))
            i64 = np.zeros((k, len(SCALAR_COLUMNS[np.int64])), dtype=np.int64)
            for name, value in {"hops": paths.links.shape[1], "nfwd": fwd.shape[1], "win": win, "rtt0": rtt_ns * 1e-9,
                                "dcoef": dc, "line": line_bps / 8.0 / dc, "lat": paths.latency_s, **_FRESH}.items():
                dtype, j = _COL[name]
                (f64 if dtype is np.float64 else i64)[:, j] = value
            rows = self._rows[paths.key] = (f64, i64, line_bps.tolist())
        f64, i64, line = rows
        return _Classes(paths.links, paths.coefs, fwd[:, 0].tolist(), bool(flow.cc) and self.cc.controls_rate,
                        paths.latency_s, line, f64, i64)

    def _start_state(self, cc_on: bool, line_bps: float) -> tuple[np.ndarray, np.ndarray]:
        """A new flow's CC state and per-hop table (the CC algorithm's ``init`` at its line rate), kept per
        policy and rate (every route class reads them, none writes them)."""
        key = (cc_on, line_bps)
        hit = self._cc_init.get(key)
        if hit is None:
            st, hop = np.zeros(MAX_SLOTS), np.zeros((MAX_HOP_RECORDS, HOP_FIELDS))
            algorithm = self.cc if cc_on else CC_ALGORITHMS.get("none")
            algorithm.python.init(st, hop, self._ccp if cc_on else np.zeros(1), line_bps)
            hit = self._cc_init[key] = (st, hop)
        return hit

    def _build_route(self, classes: _Classes, i: int) -> _Route:
        """Route ``i`` of a class key as a route class: the next number, registered with the flow table."""
        rows: dict[type, np.ndarray] = {np.float64: classes.f64[i], np.int64: classes.i64[i]}
        links, first, cc_on = classes.links[i], classes.first[i], classes.cc_on
        st, hop = self._start_state(cc_on, classes.line_bps[i])
        template = (rows[np.float64], rows[np.int64], links, classes.coefs, first, cc_on, st, hop)
        route = _Route(len(self._routes), links, classes.coefs, first, cc_on, classes.lat[i], st, hop, rows, template)
        self._routes.append(route)
        self._unregistered.append(route)
        if route.number == len(self._route_bytes):
            self._route_bytes = np.concatenate([self._route_bytes, np.zeros_like(self._route_bytes)])
        return route

    # ------------------------------------------------------------------ integration
    def _kernel_state(self) -> FluidState:
        """What ``fluid_kernel`` functions take after time and row count: whole table columns, rebuilt only
        when the table reallocates them."""
        c = self._cols
        if self._state is None or self._state_version != c.version:
            s, p, col = self._static, self.params, c.cols
            self._state_version = c.version
            columns = {f: col[_COLUMN.get(f, f)] for f in FluidState._fields if _COLUMN.get(f, f) in col}
            self._state = FluidState(
                **columns, cc=self._cc, qcn=bool(p.switch.enable_qcn), has_win=bool(p.transport.has_win),
                var_win=bool(p.transport.var_win), payload=float(p.transport.packet_payload_bytes),
                random_marks=self._random_marks, ack_queues=self._ack_queues, win_bytes=self._win_bytes,
                drain_step_s=self._drain_step_s,
                ccp=self._ccp, cap=s.cap, q=self._q, q_pfc=s.q_pfc, tx_bytes=self._tx, kmin=s.kmin, kmax=s.kmax,
                pmax=float(p.switch.pmax), switch_egress=s.switch_egress, counters=self._counters, lws=self._lws,
                lbws=self._lbws, ints=self._ints,
            )
            ids, lat, done_ids, done_t = (col[k] for k in ("ids", "lat", "done_ids", "done_t"))
            self._run_kernel = compiled_for(fluid_run, 0.0, 0.0, False, 0, 0, FLUID_STEP_S, FLUID_MAX_STEP_S,
                                            MAX_STEPS_PER_CALL, False, ids, lat, done_ids, done_t, self._state)
            self._peek_kernel = compiled_for(fluid_peek, False, 0.0, 0, FLUID_STEP_S, self._state)
        return self._state

    def _push_done(self, t: float, flow_id: int) -> None:
        heapq.heappush(self._done, (t, self._seq, flow_id))
        self._seq += 1

    def _push_many(self, times: list[float], flow_ids: list[int]) -> None:
        """``_push_done`` of each, in order: appended and the heap rebuilt when they are many (the heap
        pops by (time, sequence number), so its layout does not matter)."""
        seq, done = self._seq, self._done
        if 4 * len(times) < len(done):
            for t, flow_id in zip(times, flow_ids, strict=True):
                self._push_done(t, flow_id)
            return
        done.extend(zip(times, range(seq, seq + len(times)), flow_ids, strict=True))
        heapq.heapify(done)
        self._seq = seq + len(times)

    def _run_to(self, t_s: float, until_completion: bool = False) -> None:
        """Integrate to ``t_s`` (or only to the first completion of a flow that drains on the way)."""
        if self._t >= t_s:
            return
        if self._live:
            c = self._cols
            state = self._kernel_state()
            self._t, steps, self._fresh, self._live, n_done = self._run_kernel(
                self._t, t_s, self._fresh, self._live, c.n, FLUID_STEP_S, FLUID_MAX_STEP_S, MAX_STEPS_PER_CALL,
                until_completion, c.cols["ids"], c.cols["lat"], c.cols["done_ids"], c.cols["done_t"], state)
            self.steps += steps
            if n_done:
                self._push_many(c.cols["done_t"][:n_done].tolist(), c.cols["done_ids"][:n_done].tolist())
            if 2 * self._live < c.n:  # retired rows outnumber live ones: compact
                c.compact()
            if until_completion:
                return
            if self._live and self._t < t_s:
                return self._run_to(t_s)
        if not self._live and self._t < t_s:
            if np.any(self._q > 0.0):  # drain backlogs of departed flows
                self._q[:] = np.maximum(self._q - self._static.cap * (t_s - self._t), 0.0)
            self._t = t_s

    # ------------------------------------------------------------------ NetworkBackend
    @property
    def active_flows(self) -> int:
        return self._live + len(self._done)

    def _mark(self, flow: Flow) -> tuple[float, int, int]:
        """A new flow's ECN-mark state (``fluid_kernel.fluid_step``): with random marks, a flow's mark stream
        is keyed by what it carries, not by its id: every layer repeats its draws, so periodic layers can
        stay periodic for the fast-forward."""
        if not self._random_marks:
            return (0.0, 0, 0)
        key = ((flow.src_gpu * 1_000_003 + flow.dst_gpu) * 1_000_033 + int(flow.size_bytes)) % (1 << 52)
        return (exp_draw(key, 0), key, 0)

    def start_flow(self, flow: Flow, now_s: float) -> None:
        if self._t < now_s:
            self._run_to(now_s)
        route = self._route(flow)
        self._route_bytes[route.number] += flow.size_bytes
        if flow.size_bytes <= 0:
            self._push_done(now_s + route.lat, flow.flow_id)
            return
        self._cols.append(flow.flow_id, float(flow.size_bytes), route, self._mark(flow))
        self._live += 1
        self._fresh = False

    def start_flows(self, flows: list[Flow], now_s: float) -> None:
        """As ``start_flow`` on each in order, their rows written together (``FlowTable.append_many``) when
        they are more than a few (below that one kernel call per row is faster)."""
        if len(flows) < APPEND_MANY_FROM:
            for flow in flows:
                self.start_flow(flow, now_s)
            return
        if self._t < now_s:
            self._run_to(now_s)
        routes = self._routes_of(flows)
        if self._unregistered:  # the classes new since the last batch, into the registry its rows copy from
            self._cols.register(self._unregistered)
            self._unregistered = []
        ids, _, _, sizes, _ = zip(*flows, strict=True)
        numbers = [route.number for route in routes]
        np.add.at(self._route_bytes, numbers, sizes)
        if min(sizes) <= 0:  # flows with nothing to send complete one latency later, without a row
            for flow, route in zip(flows, routes, strict=True):
                if flow.size_bytes <= 0:
                    self._push_done(now_s + route.lat, flow.flow_id)
            keep = [i for i, size in enumerate(sizes) if size > 0]
            flows = [flows[i] for i in keep]
            ids, sizes = tuple(ids[i] for i in keep), tuple(sizes[i] for i in keep)
            numbers = [numbers[i] for i in keep]
        if ids:
            marks = [self._mark(flow) for flow in flows] if self._random_marks else None
            self._cols.append_many(ids, sizes, numbers, marks)
            self._live += len(ids)
            self._fresh = False

    def next_completion_s(self, horizon_s: float | None = None) -> float:
        if horizon_s is not None:
            return self._look_ahead(horizon_s)
        t = math.inf
        if self._live:
            if not self._fresh:
                self.steps += 1  # the zero-length step that sets the rates of a changed flow set
            state = self._kernel_state()
            drain_dt, dynamic = self._peek_kernel(self._fresh, self._t, self._cols.n, FLUID_STEP_S, state)
            self._fresh = True
            t = self._t + (min(drain_dt, HORIZON_STEPS * FLUID_STEP_S) if dynamic else drain_dt)
        if self._done:
            t = min(t, self._done[0][0])
        return max(t, self._t) if self._done or self._live else math.inf

    def _look_ahead(self, horizon_s: float) -> float:
        """Nothing starts before the horizon or the next completion, so integrate up to the earlier of
        them: the answer is exact (``math.inf``: nothing completes by the horizon). With strided drains
        (``fluid_drain_step_s``) the integration may pass pending completions by up to one stride: a flow
        started in answer to one then starts where the integration is."""
        due = self._done[0][0] if self._done else math.inf
        if self._live and due > self._t:
            stop = max(due, self._t + self._drain_step_s) if self._drain_step_s > 0.0 else due
            self._run_to(min(horizon_s, stop), until_completion=True)
        if self._done and (self._done[0][0] <= self._t or not self._live):
            return self._done[0][0]
        if not self._live:
            return math.inf
        return math.inf if self._t >= horizon_s else self._t  # else: the step budget ran out; go on later

    def advance_to(self, t_s: float) -> list[int]:
        """The flows done by ``t_s`` in (time, start) order: popped one by one while few, else the heap's list
        sorted (a sorted list is a heap) and its due head cut off at once."""
        if self._t < t_s:
            self._run_to(t_s)
        done = self._done
        out: list[int] = []
        while done and done[0][0] <= t_s:
            if len(out) == POP_ONE_BY_ONE:
                done.sort()
                k = bisect.bisect_right(done, (t_s, math.inf))
                out.extend(entry[2] for entry in done[:k])
                del done[:k]
                break
            out.append(heapq.heappop(done)[2])
        return out

    @property
    def route_classes(self) -> int:
        """Route classes made so far (flows of one class share their route's table rows)."""
        return len(self._routes)

    @property
    def link_bytes(self) -> np.ndarray:
        """Wire bytes (headers and ACKs included) started on each link."""
        out = np.zeros(len(self.topology.links))
        for route in self._routes:
            out[route.links] += self._route_bytes[route.number] * route.coefs
        return out

    def diagnostics(self) -> dict[str, object]:
        return {"link_bytes": self.link_bytes, "pause_events": int(self._counters[0]),
                "cnps": int(self._counters[1]), "int_updates": int(self._counters[2]), "steps": self.steps,
                "queue_bytes": self._q.copy()}
