"""The system layer's event loop: executes every rank's graph on a network backend.

Semantics follow ASTRA-sim's system layer (REFERENCE_SEMANTICS.md B): a node runs once its
dependencies completed; per rank at most one GPU compute and one collective are in flight, and ready
nodes are examined in ascending id order; compute time is a roofline; a collective is cut into
chunks (B.1) that run one after another per rank (``active_chunks`` at a time), each chunk expanded
by its algorithm into point-to-point transfers that become network flows.

Layer fast-forward: whenever rank 0 starts a layer, the engine records the whole state relative to
the current time and layer (ranks, collectives in progress, pending events, flows in flight). When
the same relative state recurs one layer later and the layers ahead are identical, every further
layer costs the same period, so the engine jumps over them instead of simulating them (docs/system.md).
"""

from __future__ import annotations

import bisect
import math
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from moesim.errors import MoesimError, input_error
from moesim.network.base import Flow, NetworkBackend
from moesim.system.collectives import Plan, StepTiming, chunk_sizes, plan_for
from moesim.system.compute import roofline_time_s
from moesim.system.events import EventQueue
from moesim.system.spec import RankTimes
from moesim.topology.model import Topology
from moesim.workload.graph import CollectiveType, Node, NodeKind, Workload

_IMPL_FIELD = {
    CollectiveType.ALL_REDUCE: "all_reduce",
    CollectiveType.ALL_TO_ALL: "all_to_all",
    CollectiveType.ALL_GATHER: "all_gather",
    CollectiveType.REDUCE_SCATTER: "reduce_scatter",
}


@dataclass(frozen=True)
class SystemSettings:
    """System-layer settings (ASTRA-sim system JSON, B.1) with the study's defaults (STUDY.md 6).

    Implementations are per logical dimension, as in ASTRA-sim's ``*-implementation`` lists.
    """

    peak_flops: float = 1.0e15
    mem_bw_bytes_per_s: float = 1.6e12
    roofline: bool = True
    dataset_splits: int = 4
    active_chunks: int = 1
    endpoint_delay_s: float = 10e-9
    scheduling_policy: str = "LIFO"
    all_reduce: tuple[str, ...] = ("ring", "ring")
    all_to_all: tuple[str, ...] = ("direct", "direct")
    all_gather: tuple[str, ...] = ("ring", "ring")
    reduce_scatter: tuple[str, ...] = ("ring", "ring")
    intra_server_cc: bool = False
    fast_forward: bool = True
    fast_forward_tolerance: float = 2e-3
    # rank r starts at a uniform draw in [0, start_jitter_s) from jitter_seed: rerun with a few seeds
    # to see how far a result moves when nothing but the ranks' start times does (docs/system.md)
    start_jitter_s: float = 0.0
    jitter_seed: int = 0

    def __post_init__(self) -> None:
        if self.scheduling_policy not in ("LIFO", "FIFO"):
            raise input_error("system settings", "scheduling_policy", f"got {self.scheduling_policy!r}", ("LIFO", "FIFO"))
        for name in ("dataset_splits", "active_chunks"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise input_error("system settings", name, f"must be a positive integer, got {value!r}")
        for name in ("peak_flops", "mem_bw_bytes_per_s"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
                raise input_error("system settings", name, f"must be a positive number, got {value!r}")
        if isinstance(self.jitter_seed, bool) or not isinstance(self.jitter_seed, int) or self.jitter_seed < 0:
            raise input_error("system settings", "jitter_seed", f"must be an integer >= 0, got {self.jitter_seed!r}")
        for name in ("endpoint_delay_s", "fast_forward_tolerance", "start_jitter_s"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float) or not value >= 0:
                raise input_error("system settings", name, f"must be a number >= 0, got {value!r}")

    def implementation(self, ctype: CollectiveType, dims: tuple[bool, ...], subgroup: bool) -> str:
        """Per-dimension implementation; a communicator sub-group uses a 1-D ring unless exactly one
        implementation is configured (C.4)."""
        impls: tuple[str, ...] = getattr(self, _IMPL_FIELD[ctype])
        if subgroup:
            return impls[0] if len(impls) == 1 else "ring"
        involved = [d for d, on in enumerate(dims) if on] or [0]
        return impls[min(involved[0], len(impls) - 1)]


@dataclass
class _Chunk:
    """Run-time state of one chunk of one collective instance."""

    plan: Plan
    deps_left: list[int]
    exit_left: list[int]


@dataclass
class _Instance:
    """One collective executed by a group of ranks (matched by group and per-group sequence number)."""

    members: tuple[int, ...]
    ctype: CollectiveType
    size_bytes: int
    impl: str
    chunk_bytes: list[int]
    chunks: dict[int, _Chunk] = field(default_factory=dict)
    next_chunk: list[int] = field(default_factory=list)
    exited: list[int] = field(default_factory=list)
    issue_time: dict[int, float] = field(default_factory=dict)
    node_of: dict[int, int] = field(default_factory=dict)
    finished: int = 0
    flows_started: int = 0


@dataclass
class _PlanIndex:
    """Per-plan lookup tables: transfers by source, dependants of each transfer, exits waiting on it."""

    plan: Plan
    by_src: list[list[int]]
    dependants: list[list[int]]
    exit_waiters: list[list[int]]


class _Rank:
    """Execution state of one rank's graph."""

    def __init__(self, nodes: tuple[Node, ...]) -> None:
        self.nodes = nodes
        self.index = {n.id: i for i, n in enumerate(nodes)}
        self.deps_left = [len(n.deps) for n in nodes]
        self.dependants: list[list[int]] = [[] for _ in nodes]
        for i, n in enumerate(nodes):
            for d in n.deps:
                if d not in self.index:
                    raise MoesimError(f"node {n.id} depends on node {d}, which does not exist in the same rank")
                self.dependants[self.index[d]].append(i)
        self.ready: list[int] = [i for i, c in enumerate(self.deps_left) if c == 0]
        self.done = [False] * len(nodes)
        self.completed = 0
        self.gpu_busy: int | None = None  # index of the compute node in flight
        self.gpu_end = 0.0
        self.comm_busy = False
        self.gpu_s = 0.0
        self.comm_s = 0.0
        self.wall_s = 0.0
        self.group_seq: dict[tuple[int, ...], int] = defaultdict(int)


class Simulation:
    """Executes a workload on a topology through a network backend. Use :func:`simulate`."""

    def __init__(self, workload: Workload, topology: Topology, backend: NetworkBackend,
                 settings: SystemSettings, placement: tuple[int, ...] | None = None,
                 record_timeline: bool = False) -> None:
        if placement is None:
            placement = tuple(range(workload.num_ranks))
        if workload.num_ranks > topology.num_gpus:
            raise MoesimError(
                f"workload {workload.name}: {workload.num_ranks} ranks do not fit topology {topology.name} "
                f"with {topology.num_gpus} GPUs"
            )
        self.workload = workload
        self.topology = topology
        self.backend = backend
        self.settings = settings
        self.placement = placement
        self.timing = StepTiming(settings.endpoint_delay_s, settings.mem_bw_bytes_per_s)
        self.total_nodes = math.prod(workload.logical_dims) if workload.logical_dims else workload.num_ranks
        self.events = EventQueue()
        self.ranks = [_Rank(g.nodes) for g in workload.graphs]
        self.instances: dict[tuple[tuple[int, ...], int], _Instance] = {}
        self.current: dict[int, tuple[tuple[tuple[int, ...], int], _Instance, int]] = {}  # rank → its collective
        self.flows: dict[int, tuple[_Instance, int, int]] = {}
        self._next_flow = 0
        self._plans: dict[tuple[Any, ...], _PlanIndex] = {}
        self.now = 0.0
        self.fast_forwarded_layers = 0
        self.fast_forward_mode = "off" if not settings.fast_forward else "none"
        self._ff = _FastForward(self) if settings.fast_forward and not record_timeline else None
        # (rank, node id, node name, start s, end s) per node, when requested
        self.timeline: list[tuple[int, int, str, float, float]] | None = [] if record_timeline else None
        self._started: dict[tuple[int, int], float] = {}

    # ----------------------------------------------------------------- main loop
    def run(self) -> list[RankTimes]:
        for r, start_s in enumerate(self.start_times_s()):
            if start_s > 0.0:
                self.events.schedule(start_s, self._dispatch, r)
            else:
                self._dispatch(r)
        while True:
            te = self.events.next_time()
            tn = self.backend.next_completion_s(te)
            if te == math.inf and tn == math.inf:
                break
            if tn <= te:
                self.now = tn
                for fid in self.backend.advance_to(tn):
                    self._on_flow_done(fid)
            else:
                self.now = te
                for fid in self.backend.advance_to(te):
                    self._on_flow_done(fid)
                while self.events.next_time() == te:
                    _, action, args = self.events.pop()
                    action(*args)
            if self._ff is not None:
                self._ff.observe()
        unfinished = [r for r, st in enumerate(self.ranks) if st.completed < len(st.nodes)]
        if unfinished:
            r = unfinished[0]
            st = self.ranks[r]
            stuck = [st.nodes[i].id for i in range(len(st.nodes)) if not st.done[i]][:5]
            raise MoesimError(
                f"simulation stalled: rank {r} cannot finish nodes {stuck} (a collective whose peers never "
                "issue it, or a dependency cycle)"
            )
        return [RankTimes(st.wall_s, st.gpu_s, st.comm_s) for st in self.ranks]

    def start_times_s(self) -> list[float]:
        """When each rank starts: 0, or a seeded uniform draw in [0, start_jitter_s)."""
        n, jitter = len(self.ranks), self.settings.start_jitter_s
        if jitter <= 0.0:
            return [0.0] * n
        return (np.random.default_rng(self.settings.jitter_seed).random(n) * jitter).tolist()

    # ----------------------------------------------------------------- graph execution
    def _dispatch(self, r: int) -> None:
        st = self.ranks[r]
        still: list[int] = []
        for i in sorted(st.ready):
            node = st.nodes[i]
            if node.kind is NodeKind.COMPUTE:
                if st.gpu_busy is None:
                    dur = roofline_time_s(node, self.settings.peak_flops, self.settings.mem_bw_bytes_per_s,
                                          self.settings.roofline)
                    st.gpu_busy = i
                    st.gpu_end = self.now + dur
                    if self.timeline is not None:
                        self._started[(r, i)] = self.now
                    st.gpu_s += dur
                    self.events.schedule(st.gpu_end, self._compute_done, r, i)
                    if self._ff is not None:
                        self._ff.node_started(r, i)
                else:
                    still.append(i)
            elif not st.comm_busy:
                st.comm_busy = True
                if self.timeline is not None:
                    self._started[(r, i)] = self.now
                if self._ff is not None:
                    self._ff.node_started(r, i)
                self._issue_collective(r, i)
            else:
                still.append(i)
        st.ready = still

    def _compute_done(self, r: int, i: int) -> None:
        self.ranks[r].gpu_busy = None
        self._node_done(r, i)

    def _node_done(self, r: int, i: int) -> None:
        st = self.ranks[r]
        if self.timeline is not None:
            node = st.nodes[i]
            self.timeline.append((r, node.id, node.name, self._started.pop((r, i), self.now), self.now))
        st.done[i] = True
        st.completed += 1
        st.wall_s = max(st.wall_s, self.now)
        for k in st.dependants[i]:
            st.deps_left[k] -= 1
            if st.deps_left[k] == 0:
                st.ready.append(k)
        self._dispatch(r)

    # ----------------------------------------------------------------- collectives
    def _issue_collective(self, r: int, i: int) -> None:
        st = self.ranks[r]
        node = st.nodes[i]
        if node.collective is None:
            raise MoesimError(f"rank {r} node {node.id}: collective node without a collective type")
        members = self.workload.collective_ranks(r, node)
        seq = st.group_seq[members]
        st.group_seq[members] = seq + 1
        key = (members, seq)
        inst = self.instances.get(key)
        if inst is None:
            subgroup = node.group != 0 and len(members) < self.total_nodes
            impl = self.settings.implementation(node.collective, node.involved_dims, subgroup)
            sizes = chunk_sizes(node.collective, node.size_bytes, self.settings.dataset_splits, self.total_nodes)
            inst = _Instance(members, node.collective, node.size_bytes, impl, sizes,
                             next_chunk=[0] * len(members), exited=[0] * len(members))
            self.instances[key] = inst
        elif inst.ctype is not node.collective or inst.size_bytes != node.size_bytes:
            raise MoesimError(
                f"rank {r} node {node.id}: collective #{seq} on ranks {list(members)} is {node.collective.name} of "
                f"{node.size_bytes} B here but {inst.ctype.name} of {inst.size_bytes} B on another rank"
            )
        m = members.index(r)
        inst.issue_time[m] = self.now
        inst.node_of[m] = i
        self.current[r] = (key, inst, m)
        if len(members) == 1 or not inst.chunk_bytes:
            self._member_finished(key, inst, m)
            return
        for _ in range(min(self.settings.active_chunks, len(inst.chunk_bytes))):
            self._start_stream(key, inst, m)

    def _plan(self, inst: _Instance, c: int) -> _PlanIndex:
        key = (inst.impl, inst.ctype, len(inst.members), inst.chunk_bytes[c], c % 2)
        idx = self._plans.get(key)
        if idx is None:
            plan = plan_for(inst.impl, inst.ctype, len(inst.members), inst.chunk_bytes[c], self.timing, c)
            by_src: list[list[int]] = [[] for _ in range(plan.n)]
            dependants: list[list[int]] = [[] for _ in plan.transfers]
            waiters: list[list[int]] = [[] for _ in plan.transfers]
            for j, t in enumerate(plan.transfers):
                by_src[t.src].append(j)
                for a in t.after:
                    dependants[a].append(j)
            for m, after in enumerate(plan.exit_after):
                for a in after:
                    waiters[a].append(m)
            idx = _PlanIndex(plan, by_src, dependants, waiters)
            self._plans[key] = idx
        return idx

    def _chunk(self, inst: _Instance, c: int) -> _Chunk:
        ch = inst.chunks.get(c)
        if ch is None:
            plan = self._plan(inst, c).plan
            ch = _Chunk(plan, [len(t.after) + 1 for t in plan.transfers], [len(a) + 1 for a in plan.exit_after])
            inst.chunks[c] = ch
        return ch

    def _start_stream(self, key: tuple[tuple[int, ...], int], inst: _Instance, m: int) -> None:
        c = inst.next_chunk[m]
        inst.next_chunk[m] += 1
        ch = self._chunk(inst, c)
        pidx = self._plan(inst, c)
        for j in pidx.by_src[m]:
            self._release_transfer(key, inst, c, ch, j)
        self._release_exit(key, inst, c, ch, m)

    def _release_transfer(self, key: tuple[tuple[int, ...], int], inst: _Instance, c: int, ch: _Chunk, j: int) -> None:
        ch.deps_left[j] -= 1
        if ch.deps_left[j] == 0:
            self.events.schedule(self.now + ch.plan.transfers[j].delay_s, self._start_transfer, inst, c, j)

    def _release_exit(self, key: tuple[tuple[int, ...], int], inst: _Instance, c: int, ch: _Chunk, m: int) -> None:
        ch.exit_left[m] -= 1
        if ch.exit_left[m] == 0:
            self.events.schedule(self.now + ch.plan.exit_delay_s[m], self._stream_exit, key, inst, c, m)

    def _start_transfer(self, inst: _Instance, c: int, j: int) -> None:
        t = inst.chunks[c].plan.transfers[j]
        src, dst = self.placement[inst.members[t.src]], self.placement[inst.members[t.dst]]
        fid = self._next_flow
        self._next_flow += 1
        self.flows[fid] = (inst, c, j)
        inst.flows_started += 1
        cc = self.settings.intra_server_cc or not self.topology.same_server(src, dst)
        self.backend.start_flow(Flow(fid, src, dst, t.size_bytes, cc), self.now)

    def _on_flow_done(self, fid: int) -> None:
        inst, c, j = self.flows.pop(fid)
        key = (inst.members, -1)  # key only identifies the instance for bookkeeping below
        ch = inst.chunks[c]
        pidx = self._plan(inst, c)
        for k in pidx.dependants[j]:
            self._release_transfer(key, inst, c, ch, k)
        for m in pidx.exit_waiters[j]:
            self._release_exit(key, inst, c, ch, m)

    def _stream_exit(self, key: tuple[tuple[int, ...], int], inst: _Instance, c: int, m: int) -> None:
        inst.exited[m] += 1
        if inst.next_chunk[m] < len(inst.chunk_bytes):
            self._start_stream(key, inst, m)
        elif inst.exited[m] == len(inst.chunk_bytes):
            self._member_finished(key, inst, m)

    def _member_finished(self, key: tuple[tuple[int, ...], int], inst: _Instance, m: int) -> None:
        r = inst.members[m]
        st = self.ranks[r]
        st.comm_busy = False
        del self.current[r]
        st.comm_s += self.now - inst.issue_time[m]
        inst.finished += 1
        if inst.finished == len(inst.members):
            for k, v in list(self.instances.items()):
                if v is inst:
                    del self.instances[k]
                    break
        self._node_done(r, inst.node_of[m])


_APPROX_PERIODS = (8, 12)  # layer periods compared before an approximate jump: 12 also sees 3- and 6-cycles
_WINDOW_LAYERS = 2  # a snapshot covers each rank's current layer and the next one


def stationary_mean(periods: list[float], tol: float) -> float | None:
    """The mean of ``periods`` if they look stationary: the means of their two halves agree within ``tol``
    (relative) and no period is 5 % off the mean; else None."""
    k = len(periods)
    mean = sum(periods) / k
    first_half, second_half = sum(periods[:k // 2]) / (k // 2), sum(periods[k // 2:]) / (k - k // 2)
    if mean > 0 and abs(first_half - second_half) <= tol * mean and max(abs(p - mean) for p in periods) <= 0.05 * mean:
        return mean
    return None


class _FastForward:
    """Detects a state that repeats one layer later and jumps over the identical layers ahead.

    A snapshot is taken whenever rank 0 starts a layer (with a backend that cannot describe its flows
    in flight, at the first moment after that when the network is idle; with one that only summarises
    them, both: the first for the approximate comparison, the second for the exact one). It
    describes, relative to the current time and to each rank's current layer, everything that
    determines the future: per rank the done/pending nodes of a two-layer window, busy GPU and
    collective; every collective instance in progress with its chunk counters; every pending engine
    event; every flow in flight with the backend's view of it (bytes left, rate). If the discrete part of two consecutive snapshots is
    equal and their times and magnitudes agree (exactly, or within the tolerance over several
    periods), every further identical layer costs the same period.
    """

    def __init__(self, sim: Simulation) -> None:
        self.sim = sim
        self.history: dict[tuple[Any, ...], list[_Snapshot]] = {}
        self.layer_first: list[list[int]] = []
        self.layer_sig: list[list[tuple[Any, ...]]] = []
        self.first_undone = [0] * len(sim.ranks)
        self.recent: list[_Snapshot] = []  # the last snapshots, whatever their key (approximate mode)
        self.due = False
        self.summarised = False  # this layer's snapshot for the approximate comparison is taken
        self.enabled = True
        for st in sim.ranks:
            layers = [n.layer for n in st.nodes]
            if not layers or min(layers) < 0 or layers != sorted(layers):
                self.enabled = False
                return
            n_layers = layers[-1] + 1
            first = [bisect.bisect_left(layers, L) for L in range(n_layers + 1)]
            sigs = []
            for L in range(n_layers):
                lo = first[L]
                sigs.append(tuple(
                    (n.kind, n.flops, n.bytes_moved, n.duration_ns, n.collective, n.size_bytes, n.group,
                     n.involved_dims, tuple(st.index.get(d, -1) - lo for d in n.deps))
                    for n in st.nodes[lo:first[L + 1]]
                ))
            self.layer_first.append(first)
            self.layer_sig.append(sigs)

    def node_started(self, r: int, i: int) -> None:
        """Called by the engine for every node it starts: rank 0 entering a layer makes a snapshot due."""
        if r == 0 and self.enabled and i == self.layer_first[0][self.sim.ranks[0].nodes[i].layer]:
            self.due = True
            self.summarised = False

    def observe(self) -> None:
        """After an event batch in which rank 0 started a layer: snapshot, compare, maybe jump.

        With a backend that only summarises its flows in flight, the layer start's snapshot serves the
        approximate comparison and a second one, at the first idle moment after it, the exact one."""
        if not self.due:
            return
        backend = self.sim.backend
        if self.summarised and backend.active_flows:
            return
        flow_state = backend.flow_state(self.sim.now)
        if flow_state is None:
            return  # the backend cannot describe its flows in flight: wait until the network is idle
        complete = not flow_state or backend.flow_state_is_complete
        self.due = not complete
        snap = self._snapshot(flow_state)
        approximate_done, self.summarised = self.summarised, True
        if snap is None:
            return
        if complete:
            hist = self.history.setdefault(snap.key, [])
            hist.append(snap)
            del hist[:-2]
            if len(hist) == 2 and all(a == b + 1 for a, b in zip(hist[1].layers, hist[0].layers, strict=True)):
                period = snap.now - hist[0].now
                if period > 0 and snap.random_draws == hist[0].random_draws and _close(snap, hist[0], period, 1e-9):
                    self._try_jump(snap, hist[0], period, 1, "exact")
                    return
        if approximate_done:
            return
        # Not exactly periodic: shared links let the ranks' offsets wander from layer to layer, or the
        # layers settle into a cycle of a few periods. If the last k layer periods are stationary (the
        # means of their two halves agree within the tolerance, and none is 5 % off their mean),
        # extrapolate the current state with the mean period.
        tol = self.sim.settings.fast_forward_tolerance
        self.recent.append(snap)
        del self.recent[:-(max(_APPROX_PERIODS) + 1)]
        for k in _APPROX_PERIODS if tol > 0 else ():
            window = self.recent[-k - 1:]
            if len(window) < k + 1 or any(a + k != b for a, b in zip(window[0].layers, snap.layers, strict=True)):
                continue
            mean = stationary_mean([b.now - a.now for a, b in zip(window, window[1:], strict=False)], tol)
            if mean is not None:
                self._try_jump(snap, window[0], mean, k, "approximate")
                return

    def _snapshot(self, flow_state: dict[int, tuple[tuple[float, ...], tuple[float, ...]]]) -> _Snapshot | None:
        sim, now = self.sim, self.sim.now
        if len(flow_state) != len(sim.flows):
            return None
        layers: list[int] = []
        base: list[int] = []
        ranks_key: list[tuple[Any, ...]] = []
        times: list[float] = []
        mags: list[float] = []
        for r, st in enumerate(sim.ranks):
            lo = self.first_undone[r]
            while lo < len(st.nodes) and st.done[lo]:
                lo += 1
            self.first_undone[r] = lo
            first = self.layer_first[r]
            if lo == len(st.nodes) or st.nodes[lo].layer + _WINDOW_LAYERS >= len(first):
                return None
            L = st.nodes[lo].layer
            b, hi = first[L], first[L + _WINDOW_LAYERS]
            done = tuple(st.done[b:hi])
            pending = [i for i in st.ready] + ([st.gpu_busy] if st.gpu_busy is not None else [])
            if b + sum(done) != st.completed or any(not b <= i < hi for i in pending):
                return None  # something happens beyond the window
            layers.append(L)
            base.append(b)
            ranks_key.append((L - layers[0], done, tuple(st.deps_left[b:hi]), tuple(sorted(i - b for i in st.ready)),
                              -1 if st.gpu_busy is None else st.gpu_busy - b, st.comm_busy))
            if st.gpu_busy is not None:
                times.append(st.gpu_end - now)
        # collective instances, identified by their members and the window positions of their nodes
        ident = {}
        for inst in sim.instances.values():
            ident[id(inst)] = (inst.members, tuple(sorted(
                (m, i - base[inst.members[m]]) for m, i in inst.node_of.items())))
        order = {key: n for n, key in enumerate(sorted(ident.values()))}
        if len(order) != len(ident):
            return None
        inst_id = {k: order[v] for k, v in ident.items()}
        inst_key = []
        for inst in sorted(sim.instances.values(), key=lambda x: inst_id[id(x)]):
            inst_key.append((ident[id(inst)], tuple(inst.next_chunk), tuple(inst.exited), inst.finished,
                             inst.flows_started, tuple((c, tuple(ch.deps_left), tuple(ch.exit_left))
                                                       for c, ch in sorted(inst.chunks.items()))))
            times.extend(inst.issue_time[m] - now for m in sorted(inst.issue_time))
        events = []
        for t, prio, _, action, args in sim.events.items():
            if action == sim._compute_done:
                desc: tuple[Any, ...] = ("compute", args[0], args[1] - base[args[0]])
            elif action == sim._start_transfer and id(args[0]) in inst_id:
                desc = ("transfer", inst_id[id(args[0])], args[1], args[2])
            elif action == sim._stream_exit and id(args[1]) in inst_id:
                desc = ("exit", inst_id[id(args[1])], args[2], args[3])
            else:
                return None
            events.append((t, prio, desc))
        # canonical orders (by what an event or flow is, not by when it was created: simultaneous
        # events and flows may be created in a different order from layer to layer)
        events.sort(key=lambda e: (e[2], e[1]))
        events_key = [(prio, desc) for _, prio, desc in events]
        times.extend(t - now for t, _, _ in events)
        flows = []
        for fid, (inst, c, j) in sim.flows.items():
            state = flow_state.get(fid)
            if state is None or id(inst) not in inst_id:
                return None
            flows.append(((inst_id[id(inst)], c, j, len(state[0]), len(state[1])), state))
        flows.sort(key=lambda f: f[0])
        flows_key = [desc for desc, _ in flows]
        for _, state in flows:
            times.extend(state[0])
            mags.extend(state[1])
        key = (tuple(ranks_key), tuple(inst_key), tuple(events_key), tuple(flows_key))
        return _Snapshot(key, now, tuple(layers), tuple(times), tuple(mags), tuple(st.comm_s for st in sim.ranks),
                         sim._next_flow, sim.backend.random_draws)

    def _try_jump(self, snap: _Snapshot, back: _Snapshot, period: float, periods_back: int, mode: str) -> None:
        m = self._skippable(snap.layers, periods_back)
        if m < 1 or not self._jump(m, period, snap.layers, back, periods_back):
            return
        self.history.clear()
        self.recent.clear()
        sim = self.sim
        sim.fast_forward_mode = mode if sim.fast_forward_mode in ("none", mode) else "approximate"

    def _skippable(self, layers: tuple[int, ...], periods_back: int) -> int:
        """Largest m such that layers L-periods_back .. L+m+1 of every rank are identical (the observed
        periods, the skipped layers and the window the snapshot lands in)."""
        m = None
        for r, L in enumerate(layers):
            sigs = self.layer_sig[r]
            if L - periods_back < 0 or any(sigs[L - j] != sigs[L - 1] for j in range(2, periods_back + 1)):
                return 0
            k = 0
            while L + k < len(sigs) and sigs[L + k] == sigs[L - 1]:
                k += 1
            m = k - _WINDOW_LAYERS if m is None else min(m, k - _WINDOW_LAYERS)
        return max(m or 0, 0)

    def _jump(self, m: int, period: float, layers: tuple[int, ...], back: _Snapshot, periods_back: int) -> bool:
        sim = self.sim
        flows_per_period, rest = divmod(sim._next_flow - back.next_flow, periods_back)
        if rest and periods_back == 1:
            return False
        shift = m * period
        stride = []
        per_layer: dict[tuple[int, ...], int] = defaultdict(int)  # collectives per layer on each group
        for r, st in enumerate(sim.ranks):
            first, L = self.layer_first[r], layers[r]
            s = first[L + m] - first[L]
            b, hi = first[L], first[L + _WINDOW_LAYERS]
            done, deps_left = st.done[b:hi], st.deps_left[b:hi]
            st.done[b:b + s] = [True] * s
            st.done[b + s:hi + s] = done
            st.deps_left[b + s:hi + s] = deps_left
            for k in range(hi + s, len(st.nodes)):
                st.deps_left[k] = sum(1 for d in st.nodes[k].deps if not st.done[st.index[d]])
            st.completed += s
            st.ready = [i + s for i in st.ready]
            if st.gpu_busy is not None:
                st.gpu_busy += s
                st.gpu_end += shift
            # per layer: the GPU time and collectives of one (identical) layer; comm time as observed
            for node in st.nodes[first[L - 1]:first[L]]:
                if node.kind is NodeKind.COMPUTE:
                    st.gpu_s += m * roofline_time_s(node, sim.settings.peak_flops, sim.settings.mem_bw_bytes_per_s,
                                                    sim.settings.roofline)
                else:
                    group = sim.workload.collective_ranks(r, node)
                    st.group_seq[group] += m
                    if r == group[0]:
                        per_layer[group] += 1
            st.comm_s += m * (st.comm_s - back.comm_s[r]) / periods_back
            st.wall_s += shift
            self.first_undone[r] += s
            stride.append(s)
        # collectives in progress move to the nodes and sequence numbers of their new layer
        rekeyed: dict[tuple[tuple[int, ...], int], _Instance] = {}
        for (members, seq), inst in sim.instances.items():
            for mem in inst.node_of:
                inst.node_of[mem] += stride[members[mem]]
                inst.issue_time[mem] += shift
            new_key = (members, seq + m * per_layer[members])
            rekeyed[new_key] = inst
            for r in members:
                if r in sim.current and sim.current[r][1] is inst:
                    sim.current[r] = (new_key, inst, sim.current[r][2])
        sim.instances = rekeyed
        items = []
        for time_s, prio, seq, action, args in sim.events.items():
            if action == sim._compute_done:
                args = (args[0], args[1] + stride[args[0]])
            items.append((time_s + shift, prio, seq, action, args))
        sim.events.replace(items)
        sim.backend.shift_time(shift)
        sim.now += shift
        sim._next_flow += m * flows_per_period
        sim.fast_forwarded_layers += m
        return True


@dataclass(frozen=True)
class _Snapshot:
    """The relative state at the start of one of rank 0's layers (see ``_FastForward``)."""

    key: tuple[Any, ...]
    now: float
    layers: tuple[int, ...]
    times: tuple[float, ...]
    mags: tuple[float, ...]
    comm_s: tuple[float, ...]
    next_flow: int
    random_draws: int  # the backend's count: an exact period must draw none (its outcomes need not repeat)


def _close(a: _Snapshot, b: _Snapshot, period: float, tol: float) -> bool:
    """Times agree within ``tol`` of the period, magnitudes within ``tol`` relative."""
    return (all(abs(x - y) <= 1e-12 + tol * period for x, y in zip(a.times, b.times, strict=True))
            and all(abs(x - y) <= 1e-9 + tol * max(abs(x), abs(y)) for x, y in zip(a.mags, b.mags, strict=True)))


def simulate(workload: Workload, topology: Topology, backend: NetworkBackend,
             settings: SystemSettings | None = None, placement: tuple[int, ...] | None = None) -> list[RankTimes]:
    """Execute ``workload`` and return per-rank wall/GPU/comm times (ASTRA-sim's report, B.7)."""
    return Simulation(workload, topology, backend, settings or SystemSettings(), placement).run()
