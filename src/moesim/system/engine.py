"""The system layer's event loop: executes every rank's graph on a network backend.

Semantics follow ASTRA-sim's system layer (REFERENCE_SEMANTICS.md B): a node runs once its
dependencies completed; per rank at most one GPU compute and one collective are in flight, and ready
nodes are examined in ascending id order; compute time is a roofline; a collective is cut into
chunks (B.1) that run one after another per rank (``active_chunks`` at a time), each chunk expanded
by its algorithm into point-to-point transfers that become network flows.

Layer fast-forward: whenever the network is idle and every rank is inside a compute node, the
engine records the ranks' relative state (position within their layer, time to finish). When the
same relative state recurs one layer later and the layers ahead are identical, every further layer
costs the same period, so the engine jumps over them exactly instead of simulating them.
"""

from __future__ import annotations

import bisect
import math
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from moesim.errors import MoesimError
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
        for r in range(len(self.ranks)):
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
                else:
                    still.append(i)
            elif not st.comm_busy:
                st.comm_busy = True
                if self.timeline is not None:
                    self._started[(r, i)] = self.now
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


_APPROX_PERIODS = 4  # periods that must agree before an approximate jump


class _FastForward:
    """Detects a repeating per-layer state while the network is idle and jumps over identical layers."""

    def __init__(self, sim: Simulation) -> None:
        self.sim = sim
        self.history: dict[tuple[Any, ...], list[tuple[Any, ...]]] = {}
        self.layer_first: list[list[int]] = []
        self.layer_sig: list[list[tuple[Any, ...]]] = []
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

    def observe(self) -> None:
        """At a quiet point (no flow in flight, no transfer or exit pending, every rank inside one compute
        node or waiting in a collective that has sent nothing yet), record the relative state."""
        sim = self.sim
        if not self.enabled or sim.flows or sim.backend.active_flows:
            return
        if any(inst.flows_started for inst in sim.instances.values()):
            return
        if any(item[3] != sim._compute_done for item in sim.events.items()):
            return
        offsets, layers, rels = [], [], []
        for r, st in enumerate(sim.ranks):
            if st.ready:
                return
            if st.gpu_busy is not None and not st.comm_busy and st.completed == st.gpu_busy:
                i, kind, rel = st.gpu_busy, "compute", st.gpu_end - sim.now
            elif st.comm_busy and st.gpu_busy is None and r in sim.current:
                _, inst, m = sim.current[r]
                i, kind, rel = inst.node_of[m], "waiting", inst.issue_time[m] - sim.now
                if st.completed != i:
                    return
            else:
                return
            L = st.nodes[i].layer
            offsets.append((kind, i - self.layer_first[r][L]))
            layers.append(L)
            rels.append(rel)
        key = (tuple(offsets), tuple(L - layers[0] for L in layers))
        snap = (sim.now, tuple(layers), tuple(rels), [(st.gpu_s, st.comm_s, st.wall_s) for st in sim.ranks],
                [dict(st.group_seq) for st in sim.ranks])
        hist = self.history.setdefault(key, [])
        hist.append(snap)
        if len(hist) < 2:
            return
        (t0, layers0, rels0, stats0, counters0), (t1, layers1, rels1, *_) = hist[-2], hist[-1]
        if any(a != b + 1 for a, b in zip(layers1, layers0, strict=True)):
            del hist[:-1]
            return
        period = t1 - t0
        if period > 0 and all(abs(a - b) <= 1e-12 + 1e-9 * period for a, b in zip(rels1, rels0, strict=True)):
            self._try_jump(layers, period, stats0, counters0, 1, "exact")
            return
        # Not exactly periodic (shared links make the ranks' offsets wander slightly from layer to
        # layer). If the last few periods agree within the tolerance, extrapolate with their mean.
        tol, k = sim.settings.fast_forward_tolerance, _APPROX_PERIODS
        if tol <= 0 or len(hist) < k + 1:
            return
        window = hist[-(k + 1):]
        if any(b[1][0] != a[1][0] + 1 for a, b in zip(window, window[1:], strict=False)):
            return
        periods = [b[0] - a[0] for a, b in zip(window, window[1:], strict=False)]
        mean = sum(periods) / k
        if mean <= 0 or max(abs(p - mean) for p in periods) > tol * mean:
            return
        if any(abs(a - b) > tol * mean for a, b in zip(window[-1][2], window[-2][2], strict=True)):
            return
        self._try_jump(layers, mean, window[0][3], window[0][4], k, "approximate")

    def _try_jump(self, layers: list[int], period: float, stats0: list[tuple[float, float, float]],
                  counters0: list[dict[tuple[int, ...], int]], periods_back: int, mode: str) -> None:
        m = self._skippable(layers)
        if m < 1:
            return
        self._jump(m, period, layers, stats0, counters0, periods_back)
        self.history.clear()
        sim = self.sim
        sim.fast_forward_mode = mode if sim.fast_forward_mode in ("none", mode) else "approximate"

    def _skippable(self, layers: list[int]) -> int:
        """Largest m such that layers L..L+m of every rank equal layer L-1 (the period just observed)."""
        m = None
        for r, L in enumerate(layers):
            sigs = self.layer_sig[r]
            k = 0
            while L + k < len(sigs) and sigs[L + k] == sigs[L - 1]:
                k += 1
            # the frontier must land inside an identical layer: k - 1 full layers can be skipped
            m = k - 1 if m is None else min(m, k - 1)
        return m or 0

    def _jump(self, m: int, period: float, layers: list[int], stats0: list[tuple[float, float, float]],
              counters0: list[dict[tuple[int, ...], int]], periods_back: int) -> None:
        sim = self.sim
        shift = m * period
        moved: dict[tuple[int, int], tuple[int, int]] = {}
        for r, st in enumerate(sim.ranks):
            L = layers[r]
            stride = self.layer_first[r][L + m] - self.layer_first[r][L]
            waiting = st.gpu_busy is None
            i = sim.current[r][1].node_of[sim.current[r][2]] if waiting else st.gpu_busy
            assert i is not None
            new_i = i + stride
            for k in range(i, new_i):
                st.done[k] = True
            st.completed = new_i
            for k in range(new_i, len(st.nodes)):
                st.deps_left[k] = sum(1 for d in st.nodes[k].deps if not st.done[st.index[d]])
            if waiting:
                _, inst, mem = sim.current[r]
                inst.node_of[mem] = new_i
                inst.issue_time[mem] += shift
            else:
                st.gpu_busy = new_i
                st.gpu_end += shift
                moved[(r, i)] = (r, new_i)
            g0, c0, w0 = stats0[r]
            st.gpu_s += m * (st.gpu_s - g0) / periods_back
            st.comm_s += m * (st.comm_s - c0) / periods_back
            st.wall_s += m * period
            for grp, n in list(st.group_seq.items()):
                st.group_seq[grp] = n + m * (n - counters0[r].get(grp, 0)) // periods_back
        # collectives some ranks already entered move to the sequence number of their new layer
        rekeyed: dict[tuple[tuple[int, ...], int], _Instance] = {}
        for (members, seq), inst in sim.instances.items():
            r0 = members[0]
            per = (sim.ranks[r0].group_seq[members] - counters0[r0].get(members, 0)) // (periods_back + m)
            new_key = (members, seq + m * per)
            rekeyed[new_key] = inst
            for r in members:
                if r in sim.current and sim.current[r][1] is inst:
                    sim.current[r] = (new_key, inst, sim.current[r][2])
        sim.instances = rekeyed
        items = []
        for time_s, prio, seq, action, args in sim.events.items():
            if action == sim._compute_done and args in moved:
                items.append((time_s + shift, prio, seq, action, moved[args]))
            else:
                items.append((time_s + shift, prio, seq, action, args))
        sim.events.replace(items)
        sim.fast_forwarded_layers += m


def simulate(workload: Workload, topology: Topology, backend: NetworkBackend,
             settings: SystemSettings | None = None, placement: tuple[int, ...] | None = None) -> list[RankTimes]:
    """Execute ``workload`` and return per-rank wall/GPU/comm times (ASTRA-sim's report, B.7)."""
    return Simulation(workload, topology, backend, settings or SystemSettings(), placement).run()
