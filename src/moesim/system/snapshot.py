"""A simulation's state taken as plain values and installed back, moved in time: ``snapshot(sim)`` gives a
``SimState`` (``state.py``), ``restore(sim, state, shift_s)`` installs one. Layer fast-forward
(``fast_forward.py``) is built on these two; the engine knows nothing of them. Derived values (plans, a
collective's phases) are rebuilt by the engine from the nodes; the network backend keeps its own state.
"""

from __future__ import annotations

from collections import defaultdict, deque
from typing import TYPE_CHECKING

from moesim.system.phases import StreamQueues
from moesim.system.runtime import ChunkRun, CollectiveRun
from moesim.system.state import CollectiveState, InFlight, PendingEvent, RankState, SimState

if TYPE_CHECKING:
    from moesim.system.engine import Simulation


def snapshot(sim: Simulation) -> SimState:
    """The whole state of ``sim`` as plain values (``state.py`` says what is derived)."""
    live = list(sim.instances.values())
    position = {id(inst): k for k, inst in enumerate(live)}
    queued = sim.events.items()
    for inst in [a[0] for _, _, _, kind, a in queued if kind.on_collective] + [f[0] for f in sim.flows.values()]:
        if id(inst) not in position:  # every member finished: still referenced, no longer matched
            position[id(inst)] = len(live)
            live.append(inst)
    ranks = tuple(RankState(tuple(st.done), tuple(st.deps_left), tuple(st.ready), st.completed, st.gpu_busy,
                            st.comm_busy, st.gpu_s, st.comm_s, st.wall_s, tuple(st.group_seq.items()),
                            tuple(st.trees.items()), st.comm_share) for st in sim.ranks)
    collectives = tuple(CollectiveState(
        inst.members, inst.seq, inst.ctype, inst.size_bytes, inst.impl, tuple(inst.chunk_bytes),
        tuple(inst.node_of.items()), tuple(inst.issue_time.items()), tuple(inst.next_chunk), tuple(inst.exited),
        inst.finished, inst.flows_started,
        tuple((c, tuple(ch.deps_left), tuple(ch.exit_left), tuple(ch.arrived)) for c, ch in inst.chunks.items()),
        retired=k >= len(sim.instances), pair_bytes=inst.pair_bytes, trees=tuple(inst.trees.items()),
        phased=inst.phases is not None,
        waiting=() if inst.queues is None else tuple((q, tuple(w)) for q, w in inst.queues.waiting.items()),
        running=() if inst.queues is None else tuple(inst.queues.running.items()))
        for k, inst in enumerate(live))
    events = tuple(PendingEvent(t, prio, seq, kind, (position[id(a[0])], *a[1:]) if kind.on_collective else a)
                   for t, prio, seq, kind, a in queued)
    flows = tuple(InFlight(fid, position[id(inst)], c, j) for fid, (inst, c, j) in sim.flows.items())
    return SimState(sim.now, ranks, collectives, events, flows, sim.next_flow_id, sim.events.next_seq)


def restore(sim: Simulation, state: SimState, shift_s: float = 0.0) -> None:
    """Install ``state`` (a snapshot, possibly edited) in ``sim`` with every absolute time moved ``shift_s``
    later; only after a step (``Hooks.step_finished``). The backend is not touched: its flows in flight
    must match ``state.flows``."""
    for st, rs in zip(sim.ranks, state.ranks, strict=True):
        st.done, st.deps_left, st.ready = list(rs.done), list(rs.deps_left), list(rs.ready)
        st.completed, st.gpu_busy, st.comm_busy, st.comm_share = rs.completed, rs.gpu_node, rs.comm_busy, rs.comm_share
        st.gpu_s, st.comm_s, st.wall_s = rs.gpu_s, rs.comm_s, rs.wall_s + shift_s
        st.group_seq = defaultdict(int, rs.group_seq)
        st.trees = defaultdict(int, rs.trees)
    live = []
    for cs in state.collectives:
        inst = CollectiveRun(cs.members, cs.seq, cs.ctype, cs.size_bytes, cs.impl, list(cs.chunk_bytes),
                             next_chunk=list(cs.next_chunk), exited=list(cs.exited),
                             issue_time={m: t + shift_s for m, t in cs.issue_s}, node_of=dict(cs.node_of),
                             finished=cs.finished, flows_started=cs.flows_started, pair_bytes=cs.pair_bytes,
                             trees=dict(cs.trees))
        if cs.phased:
            m, i = cs.node_of[0]
            inst.phases = sim.phases_of(sim.ranks[cs.members[m]].nodes[i], cs.members, list(cs.chunk_bytes))
            inst.queues = StreamQueues(sim.settings.active_chunks, {q: deque(w) for q, w in cs.waiting},
                                       dict(cs.running))
        inst.chunks = {c: ChunkRun(sim.plan_of(inst, c), list(deps), list(exits), list(arrived))
                       for c, deps, exits, arrived in cs.chunks}
        live.append(inst)
    sim.instances = {(inst.members, inst.seq): inst
                     for inst, cs in zip(live, state.collectives, strict=True) if not cs.retired}
    sim.flows = {f.flow_id: (live[f.collective], f.chunk, f.transfer) for f in state.flows}
    items = [
        (e.time_s + shift_s, e.priority, e.seq, e.kind,
         (live[e.args[0]], *e.args[1:]) if e.kind.on_collective else e.args)
        for e in state.events]
    sim.events.replace(items, state.next_event_seq)
    sim.next_flow_id = state.next_flow
    sim.now = state.now_s + shift_s
