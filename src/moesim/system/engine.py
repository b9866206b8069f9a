"""The system layer's event loop: executes every rank's graph on a network backend.

Semantics follow ASTRA-sim 2.0's system layer (docs/system.md): a node runs once its dependencies
completed; per rank at most one GPU compute and one collective are in flight, and ready nodes are
examined in ascending id order; compute time is a roofline; a collective is cut into chunks that run
one after another per rank (``active_chunks`` at a time), each chunk expanded
by its algorithm into point-to-point transfers that become network flows. A collective over several
logical dimensions runs each chunk as phases, one dimension at a time (``phases.py``).

Besides ``run``, a ``Simulation`` offers what tools built on it need: ``hooks`` (callbacks when a node
or flow starts or finishes, and after every step) and its run-time records (``runtime.py``), which
``snapshot.py`` takes as plain values and installs back, moved in time. Layer fast-forward
(``fast_forward.py``) is built on these and attached by whoever composes a run (``run.py``); the engine
knows nothing of either.
"""

from __future__ import annotations

import gc
import math
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from moesim.errors import MoesimError
from moesim.network.base import Flow, NetworkBackend
from moesim.system.collectives import (
    COLLECTIVES,
    Members,
    Plan,
    StepTiming,
    chunk_sizes,
    occupies_sms,
    plan_for,
    resolve,
)
from moesim.system.collectives.base import pair_plan_for
from moesim.system.collectives.direct import pair_chunk
from moesim.system.events import EventQueue
from moesim.system.phases import (
    Phases,
    StreamQueues,
    active_dims,
    build_phases,
    draws_trees,
    refine_dims,
    spans_dimensions,
)
from moesim.system.runtime import ChunkRun, CollectiveRun, RankRun
from moesim.system.settings import SystemSettings
from moesim.system.spec import RankTimes
from moesim.system.state import EventKind, FlowOrigin
from moesim.topology.model import Topology
from moesim.workload.costs import roofline_time_s
from moesim.workload.graph import CollectiveType, Node, NodeKind, Workload

__all__ = ["Hooks", "Simulation", "SystemSettings", "full_collections_paused"]

_new_flow = tuple.__new__
"""``Flow(...)`` without the Python frame of a named tuple's constructor (one flow per transfer)."""
FULL_COLLECTIONS_PAUSED = 1 << 30
"""The oldest generation's threshold while the event loop runs (middle collections before a full one)."""


@dataclass
class Hooks:
    """Callbacks a simulation makes, in registration order; the time is ``Simulation.now``. A node is
    (rank, index in ``workload.graphs[rank].nodes``), a flow the ``Flow`` handed to the backend (and its
    id when it finishes), with the collective, chunk and transfer it carries (``FlowOrigin``)."""

    node_started: list[Callable[[int, int], None]] = field(default_factory=list)
    node_finished: list[Callable[[int, int], None]] = field(default_factory=list)
    flow_started: list[Callable[[Flow, FlowOrigin], None]] = field(default_factory=list)
    flow_finished: list[Callable[[int, FlowOrigin], None]] = field(default_factory=list)
    step_finished: list[Callable[[], None]] = field(default_factory=list)
    """After each step (the events and flow completions of one instant): the only place to ``restore``."""


@contextmanager
def full_collections_paused() -> Iterator[None]:
    """The event loop (and, from ``run.simulate_prepared``, the workload's generation) without the cyclic
    garbage collector's full collections, each of which scans every object alive (millions in a large run:
    a fifth of an EP144 decode step's CPU). The loop makes no reference cycles of its own, and young ones
    are still collected (generations 0 and 1 run as usual).
    Collection frees memory and nothing else, so results do not depend on it."""
    young, middle, old = gc.get_threshold()
    gc.set_threshold(young, middle, FULL_COLLECTIONS_PAUSED)
    try:
        yield
    finally:
        gc.set_threshold(young, middle, old)


class Simulation:
    """Executes a workload on a topology through a network backend: build one, register ``hooks`` and
    call :meth:`run` (``run.simulate`` does so with layer fast-forward when the settings ask for it)."""

    group_transfer_starts = True
    """Transfers a stream's start releases together start as one event (same results as one event each)."""

    def __init__(self, workload: Workload, topology: Topology, backend: NetworkBackend,
                 settings: SystemSettings, placement: tuple[int, ...] | None = None) -> None:
        if placement is None:
            placement = tuple(range(workload.num_ranks))
        if workload.num_ranks > topology.num_gpus:
            raise MoesimError(
                f"workload {workload.name}: {workload.num_ranks} ranks do not fit topology {topology.name} "
                f"with {topology.num_gpus} GPUs"
            )
        if settings.logical_dims:
            workload = refine_dims(workload, settings.logical_dims)
        self.workload = workload
        self.topology = topology
        self.backend = backend
        self.settings = settings
        self.placement = placement
        self.timing = StepTiming(settings.endpoint_delay_s, settings.mem_bw_bytes_per_s, settings.astra_receives)
        self.total_nodes = math.prod(workload.logical_dims) if workload.logical_dims else workload.num_ranks
        self.events: EventQueue[EventKind] = EventQueue()
        self._handlers = (self._dispatch, self._compute_done, self._stream_exit, self._start_transfer,
                          self._start_transfers)  # by EventKind
        self.ranks = [RankRun(g.nodes) for g in workload.graphs]
        self.instances: dict[tuple[tuple[int, ...], int], CollectiveRun] = {}
        self.flows: dict[int, tuple[CollectiveRun, int, int]] = {}
        self.next_flow_id = 0
        """The id the next flow gets."""
        self._plans: dict[tuple[Any, ...], Plan] = {}
        self._cc_pairs: dict[tuple[int, int], bool] = {}  # per (source, destination) GPU: whether CC applies
        self.now = 0.0
        self.events_handled = 0
        """Engine events handled so far: queued events popped plus flow completions (the run's work count)."""
        self.hooks = Hooks()
        self.multi_dimensional = spans_dimensions(workload)
        """Whether a collective runs as phases over several logical dimensions."""

    # ----------------------------------------------------------------- main loop
    def run(self) -> list[RankTimes]:
        with full_collections_paused():
            return self._run()

    def _run(self) -> list[RankTimes]:
        for r, start_s in enumerate(self.start_times_s()):
            if start_s > 0.0:
                self.events.schedule(start_s, EventKind.RANK_START, r)
            else:
                self._dispatch(r)
        events, backend, handlers, on_flows_done = self.events, self.backend, self._handlers, self._on_flows_done
        step_finished = self.hooks.step_finished
        while True:  # one step: the flow completions of one instant, then the events due then
            te = events.next_time()
            tn = backend.next_completion_s(te)
            if te == math.inf and tn == math.inf:
                break
            self.now = tn if tn <= te else te
            done = backend.advance_to(self.now)
            if done:
                on_flows_done(done)
            handled = len(done)
            if tn > te:
                while events.next_time() == te:
                    _, kind, args = events.pop()
                    handlers[kind](*args)
                    handled += 1
            self.events_handled += handled
            for hook in step_finished:
                hook()
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
                    st.gpu_s += dur
                    if st.comm_busy and st.comm_share:
                        dur /= 1.0 - st.comm_share
                    self.events.schedule(self.now + dur, EventKind.COMPUTE_DONE, r, i)
                    for hook in self.hooks.node_started:
                        hook(r, i)
                else:
                    still.append(i)
            elif not st.comm_busy:
                st.comm_busy = True
                st.comm_share = self._sm_share(r, node)
                if st.comm_share and st.gpu_busy is not None:
                    self._stretch_compute(r, 1.0 / (1.0 - st.comm_share))
                for hook in self.hooks.node_started:
                    hook(r, i)
                self._issue_collective(r, i)
            else:
                still.append(i)
        st.ready = still

    def _sm_share(self, r: int, node: Node) -> float:
        """The GPU share collective ``node`` takes from rank r's compute while in flight: ``comm_sms``, or 0
        when its algorithm is registered SM-free (DeepEP's low-latency kernels, ``collectives.low_latency``)."""
        if not self.settings.comm_sms or node.collective is None:
            return 0.0
        subgroup = node.group != 0 and len(self.workload.collective_ranks(r, node)) < self.total_nodes
        impl = self.settings.implementation(node.collective, node.involved_dims, subgroup)
        return self.settings.comm_sms if occupies_sms(impl) else 0.0

    def _stretch_compute(self, r: int, factor: float) -> None:
        """The GPU share left to rank r's compute in flight changed (``comm_sms``): what remains of it takes
        ``factor`` times as long. ``gpu_s`` keeps the roofline time; the stretch shows in the wall time."""
        target = (r, self.ranks[r].gpu_busy)
        items = self.events.items()
        for k, (t, prio, seq, kind, args) in enumerate(items):
            if kind is EventKind.COMPUTE_DONE and args == target:
                items[k] = (self.now + (t - self.now) * factor, prio, seq, kind, args)
                self.events.replace(items, self.events.next_seq)
                return

    def _compute_done(self, r: int, i: int) -> None:
        self.ranks[r].gpu_busy = None
        self._node_done(r, i)

    def _node_done(self, r: int, i: int) -> None:
        st = self.ranks[r]
        st.done[i] = True
        st.completed += 1
        st.wall_s = max(st.wall_s, self.now)
        for k in st.dependants[i]:
            st.deps_left[k] -= 1
            if st.deps_left[k] == 0:
                st.ready.append(k)
        for hook in self.hooks.node_finished:
            hook(r, i)
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
        inst = self.instances.get((members, seq))
        if inst is None:
            inst = self._new_instance(r, node, members, seq)
            self.instances[(members, seq)] = inst
        elif inst.ctype is not node.collective or inst.pair_bytes != node.pair_bytes or (
                not node.pair_bytes and inst.size_bytes != node.size_bytes):
            raise MoesimError(
                f"rank {r} node {node.id}: collective #{seq} on ranks {list(members)} is {node.collective.name} of "
                f"{node.size_bytes} B here but {inst.ctype.name} of {inst.size_bytes} B on another rank"
            )
        m = members.index(r)
        inst.issue_time[m] = self.now
        inst.node_of[m] = i
        for key, count in self._trees_drawn(inst, node).items():
            st.trees[key] += count
        if len(members) == 1 or not inst.chunk_bytes:
            self._member_finished(inst, m)
            return
        if inst.queues is not None:
            assert inst.phases is not None
            first = inst.phases.phases[0].dim
            for c in range(len(inst.chunk_bytes)):
                inst.queues.enqueue(m, first, c, 0)
            self._admit(inst, m, first)
            return
        for _ in range(min(self.settings.active_chunks, len(inst.chunk_bytes))):
            self._start_stream(inst, m)

    def _active_dims(self, node: Node) -> list[int]:
        """The logical dimensions (of more than one rank) a global-group collective spans."""
        return active_dims(self.workload.logical_dims, node.involved_dims)

    def _new_instance(self, r: int, node: Node, members: tuple[int, ...], seq: int) -> CollectiveRun:
        assert node.collective is not None
        ctype, settings = node.collective, self.settings
        sizes = chunk_sizes(ctype, node.size_bytes, settings.dataset_splits, self.total_nodes)
        dims = self._active_dims(node) if node.group == 0 else []
        if node.pair_bytes:  # per-pair sizes: the members' totals differ, the chunk count does not
            if len(dims) > 1:
                raise MoesimError(f"rank {r} node {node.id}: a skewed all-to-all over {len(dims)} logical dimensions "
                                  "is not supported (it runs over one dimension)")
            sizes = [0] * settings.dataset_splits
        if len(dims) > 1:
            phases = self.phases_of(node, members, sizes)
            return CollectiveRun(members, seq, ctype, node.size_bytes, phases.phases[0].impl, sizes,
                             next_chunk=[0] * len(members), exited=[0] * len(members), phases=phases,
                             queues=StreamQueues(settings.active_chunks),
                             trees={d: self.ranks[r].trees[d] for d in dims})
        subgroup = node.group != 0 and len(members) < self.total_nodes
        impl = settings.implementation(ctype, node.involved_dims, subgroup)
        inst = CollectiveRun(members, seq, ctype, node.size_bytes, impl, sizes,
                         next_chunk=[0] * len(members), exited=[0] * len(members), pair_bytes=node.pair_bytes)
        key = self._flat_key(inst, node)
        inst.trees = {key: self.ranks[r].trees[key]}
        return inst

    def phases_of(self, node: Node, members: tuple[int, ...], sizes: list[int]) -> Phases:
        """The phases of a global-group collective over several dimensions (a function of its node)."""
        assert node.collective is not None
        impls = {t: self.settings.implementations(t) for t in CollectiveType}
        return Phases(build_phases(node.collective, members, self.workload.logical_dims, self._active_dims(node), impls,
                                   self.settings.collective_optimization, sizes[0] if sizes else 0), len(members))

    def _flat_key(self, inst: CollectiveRun, node: Node) -> Any:
        """The dimension whose tree counter a one-phase collective draws on (a sub-group: its own)."""
        if node.group != 0:
            return inst.members
        return (self._active_dims(node) or [0])[0]

    def _trees_drawn(self, inst: CollectiveRun, node: Node) -> dict[Any, int]:
        """How many trees each dimension's counter advances for this collective (one per chunk and DBT phase)."""
        chunks = len(inst.chunk_bytes)
        if inst.phases is None:
            return {self._flat_key(inst, node): chunks} if draws_trees(inst.impl) else {}
        return {d: chunks * t for d, t in inst.phases.trees_per_chunk().items()}

    def _member(self, inst: CollectiveRun, k: int, pos: int) -> int:
        """The member at plan position ``pos`` of chunk key ``k``."""
        return pos if inst.phases is None else inst.phases.member(k, pos)

    def plan_of(self, inst: CollectiveRun, k: int) -> Plan:
        """The plan of chunk key ``k`` of ``inst`` (cached; a function of the collective, so ``snapshot.restore``
        rebuilds it)."""
        if inst.phases is not None:
            ph = inst.phases.phases[inst.phases.decode(k)[1]]
            tree = inst.phases.tree_index(k, inst.trees)
            impl, ctype, n, size = ph.impl, ph.ctype, ph.n, ph.size_bytes
            pairs: tuple[int, ...] = ()
        else:
            tree = next(iter(inst.trees.values()), 0) + k
            impl, ctype, n, size = inst.impl, inst.ctype, len(inst.members), inst.chunk_bytes[k]
            pairs = pair_chunk(inst.pair_bytes, len(inst.chunk_bytes), k) if inst.pair_bytes else ()
        key: tuple[Any, ...] = (impl, ctype, n, size, tree % 2, pairs)
        placed = COLLECTIVES.get(resolve(impl)[0]).placed if inst.phases is None else None
        if placed is not None:  # an algorithm that routes by server: the plan depends on where the members sit
            servers = tuple(self.topology.gpus[self.placement[m]].server for m in inst.members)
            key += (servers,)
        plan = self._plans.get(key)
        if plan is None:
            members = Members(servers, self.settings.expert_routing) if placed is not None else None
            if pairs:
                plan = pair_plan_for(impl, n, pairs, self.timing, members)
            elif placed is not None and members is not None:
                plan = placed(ctype, n, size, self.timing, members)
            else:
                plan = plan_for(impl, ctype, n, size, self.timing, tree)
            self._plans[key] = plan
        return plan

    def _chunk(self, inst: CollectiveRun, c: int) -> ChunkRun:
        ch = inst.chunks.get(c)
        if ch is None:
            plan = self.plan_of(inst, c)
            slots = plan.pair_slots if self.settings.astra_receives else None
            ch = ChunkRun(plan, [len(t.after) + (len(t.after_sent) or 1) for t in plan.transfers],
                        [len(a) + (len(plan.exit_sent(m)) or 1) for m, a in enumerate(plan.exit_after)],
                        [0] * len(slots[1]) if slots else [])
            inst.chunks[c] = ch
        return ch

    def _start_stream(self, inst: CollectiveRun, m: int) -> None:
        c = inst.next_chunk[m]
        inst.next_chunk[m] += 1
        self._run_stream(inst, c, m)

    def _run_stream(self, inst: CollectiveRun, k: int, pos: int) -> None:
        """The member at ``pos`` starts its part of chunk key ``k``."""
        ch = self._chunk(inst, k)
        starts = ch.plan.on_start[pos]
        if len(starts) > 1 and self.group_transfer_starts:
            self._release_together(inst, k, ch, starts)
        else:
            for j in starts:
                self._release_transfer(inst, k, ch, j)
        if not ch.plan.exit_sent(pos):
            self._release_exit(inst, k, ch, pos)

    def _admit(self, inst: CollectiveRun, m: int, dim: int) -> None:
        """Start the phases member ``m``'s queue of dimension ``dim`` admits."""
        assert inst.queues is not None and inst.phases is not None
        for c, p in inst.queues.admit(m, dim):
            g, pos = inst.phases.phases[p].where[m]
            self._run_stream(inst, inst.phases.key(c, p, g), pos)

    def _release_transfer(self, inst: CollectiveRun, c: int, ch: ChunkRun, j: int) -> None:
        left = ch.deps_left[j] - 1
        ch.deps_left[j] = left
        if left == 0:
            self.events.schedule(self.now + ch.plan.transfers[j].delay_s, EventKind.TRANSFER_START, inst, c, j)

    def _release_together(self, inst: CollectiveRun, c: int, ch: ChunkRun, starts: list[int]) -> None:
        """Release ``starts`` as ``_release_transfer`` one by one would; when all of them become due at once
        (same delay), as one event that starts them in the same order (their single events would have
        followed each other in the queue: consecutive sequence numbers, one time and priority)."""
        transfers, deps_left = ch.plan.transfers, ch.deps_left
        delay = transfers[starts[0]].delay_s
        if any(deps_left[j] != 1 or transfers[j].delay_s != delay for j in starts):
            for j in starts:
                self._release_transfer(inst, c, ch, j)
            return
        for j in starts:
            deps_left[j] = 0
        self.events.schedule(self.now + delay, EventKind.TRANSFERS_START, inst, c, tuple(starts))

    def _start_transfers(self, inst: CollectiveRun, c: int, js: tuple[int, ...]) -> None:
        """The transfers of one ``TRANSFERS_START`` event, in order, handed to the backend at once (what their
        engine bookkeeping schedules is due no earlier, so nothing else reaches the backend between them);
        each counts as one handled event."""
        self.backend.start_flows(self._transfer_flows(inst, c, js), self.now)
        self.events_handled += len(js) - 1

    def _release_exit(self, inst: CollectiveRun, c: int, ch: ChunkRun, m: int) -> None:
        ch.exit_left[m] -= 1
        if ch.exit_left[m] == 0:
            self.events.schedule(self.now + ch.plan.exit_delay_s[m], EventKind.STREAM_EXIT, inst, c, m)

    def _start_transfer(self, inst: CollectiveRun, c: int, j: int) -> None:
        (flow,) = self._transfer_flows(inst, c, (j,))
        self.backend.start_flow(flow, self.now)

    def _transfer_flows(self, inst: CollectiveRun, c: int, js: tuple[int, ...]) -> list[Flow]:
        """Transfers ``js`` of chunk ``c`` as new flows, in order, with everything their start does in the
        engine (ids, the flow hooks, the transfers and exits waiting for their issue); the caller starts them."""
        ch = inst.chunks[c]
        plan = ch.plan
        transfers, sent_dependants, sent_exit_waiters = plan.transfers, plan.sent_dependants, plan.sent_exit_waiters
        placement, members, phases, flows, cc_pairs = self.placement, inst.members, inst.phases, self.flows, self._cc_pairs
        hooks = self.hooks.flow_started
        out = []
        for j in js:
            t = transfers[j]
            if phases is None:
                src, dst = placement[members[t.src]], placement[members[t.dst]]
            else:
                src, dst = placement[members[phases.member(c, t.src)]], placement[members[phases.member(c, t.dst)]]
            fid = self.next_flow_id
            self.next_flow_id = fid + 1
            flows[fid] = (inst, c, j)
            inst.flows_started += 1
            cc = cc_pairs.get((src, dst))
            if cc is None:
                cc = cc_pairs[(src, dst)] = self.settings.intra_server_cc or not self.topology.same_server(src, dst)
            flow = _new_flow(Flow, (fid, src, dst, t.size_bytes, cc))
            if hooks:
                origin = self._origin(inst, c, j)
                for hook in hooks:
                    hook(flow, origin)
            for k in sent_dependants[j]:
                self._release_transfer(inst, c, ch, k)
            for m in sent_exit_waiters[j]:
                self._release_exit(inst, c, ch, m)
            out.append(flow)
        return out

    def _origin(self, inst: CollectiveRun, k: int, j: int) -> FlowOrigin:
        """What transfer ``j`` of chunk key ``k`` belongs to, for the flow hooks."""
        t = inst.chunks[k].plan.transfers[j]
        chunk, phase = (k, 0) if inst.phases is None else inst.phases.decode(k)[:2]
        src, dst = self._member(inst, k, t.src), self._member(inst, k, t.dst)
        return FlowOrigin(inst.members, inst.seq, chunk, phase, j, inst.members[src], inst.members[dst],
                          inst.node_of.get(src), inst.node_of.get(dst))

    def _on_flows_done(self, fids: list[int]) -> None:
        """The flows ``fids`` completed, in order: release what waits for their arrival."""
        flows, hooks = self.flows, self.hooks.flow_finished
        release_transfer, release_exit = self._release_transfer, self._release_exit
        for fid in fids:
            inst, c, j = flows.pop(fid)
            if hooks:
                origin = self._origin(inst, c, j)
                for hook in hooks:
                    hook(fid, origin)
            ch = inst.chunks[c]
            plan = ch.plan
            if ch.arrived:  # ASTRA-sim's receives: the k-th arrival on a pair counts as its k-th transfer
                slots = plan.pair_slots
                assert slots is not None
                pair = slots[0][j]
                j = slots[1][pair][ch.arrived[pair]]
                ch.arrived[pair] += 1
            for k in plan.dependants[j]:
                release_transfer(inst, c, ch, k)
            for m in plan.exit_waiters[j]:
                release_exit(inst, c, ch, m)

    def _stream_exit(self, inst: CollectiveRun, c: int, m: int) -> None:
        if inst.queues is not None:
            self._phase_exit(inst, c, m)
            return
        inst.exited[m] += 1
        if inst.next_chunk[m] < len(inst.chunk_bytes):
            self._start_stream(inst, m)
        elif inst.exited[m] == len(inst.chunk_bytes):
            self._member_finished(inst, m)

    def _phase_exit(self, inst: CollectiveRun, k: int, pos: int) -> None:
        """A member ends a phase: it leaves that dimension's queue and joins the next phase's."""
        assert inst.queues is not None and inst.phases is not None
        c, p, _ = inst.phases.decode(k)
        m, dim = inst.phases.member(k, pos), inst.phases.phases[p].dim
        inst.queues.leave(m, dim)
        if p + 1 < len(inst.phases.phases):
            nxt = inst.phases.phases[p + 1].dim
            inst.queues.enqueue(m, nxt, c, p + 1)
            self._admit(inst, m, dim)  # as ASTRA-sim: the queue left behind starts its next stream first
            self._admit(inst, m, nxt)
            return
        inst.exited[m] += 1
        self._admit(inst, m, dim)
        if inst.exited[m] == len(inst.chunk_bytes):
            self._member_finished(inst, m)

    def _member_finished(self, inst: CollectiveRun, m: int) -> None:
        r = inst.members[m]
        st = self.ranks[r]
        st.comm_busy = False
        if st.comm_share and st.gpu_busy is not None:
            self._stretch_compute(r, 1.0 - st.comm_share)
        st.comm_s += self.now - inst.issue_time[m]
        inst.finished += 1
        if inst.finished == len(inst.members):
            del self.instances[(inst.members, inst.seq)]
        self._node_done(r, inst.node_of[m])

