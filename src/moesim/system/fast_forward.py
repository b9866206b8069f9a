"""Layer fast-forward: detect a state that repeats one layer later and jump over the identical layers ahead.

Built on the simulation's public surface only: hooks say when rank 0 starts a layer and when a step
ends; ``snapshot.snapshot`` gives the state, ``snapshot.restore`` installs the jumped one, and the
backend describes (``flow_state``) and moves (``shift_time``) its flows in flight (its ``FastForward``
protocol). Whoever composes a run attaches it (``attach``). docs/system.md describes the method and its
measured accuracy.
"""

from __future__ import annotations

import bisect
import dataclasses
import math
import statistics
from collections import defaultdict
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from moesim.system.snapshot import restore, snapshot
from moesim.system.state import EventKind, SimState
from moesim.workload.costs import roofline_time_s
from moesim.workload.graph import NodeKind

if TYPE_CHECKING:
    from moesim.system.engine import Simulation

_APPROX_PERIODS = (8, 12)  # layer periods compared before an approximate jump: 12 also sees 3- and 6-cycles
_NOISY_PERIODS = 24  # layer periods averaged before a jump over periods that never settle
_WINDOW_LAYERS = 2  # a snapshot covers each rank's current layer and the next one

FlowState = dict[int, tuple[tuple[float, ...], tuple[float, ...]]]


def stationary_mean(periods: list[float], tol: float) -> float | None:
    """The mean of ``periods`` if they look stationary: the means of their two halves agree within ``tol``
    (relative) and no period is 5 % off the mean; else None."""
    k = len(periods)
    mean = sum(periods) / k
    first_half, second_half = sum(periods[:k // 2]) / (k // 2), sum(periods[k // 2:]) / (k - k // 2)
    if mean > 0 and abs(first_half - second_half) <= tol * mean and max(abs(p - mean) for p in periods) <= 0.05 * mean:
        return mean
    return None


def noisy_mean(periods: list[float], se_tol: float) -> float | None:
    """The mean of ``periods`` that keep wandering without a trend, once it is known well enough: its
    standard error is within ``se_tol`` (relative), the least-squares slope over the periods is within
    two of its standard errors of zero and the means of the two halves differ by at most two standard
    errors of their difference; else None."""
    k = len(periods)
    mean, sd = statistics.fmean(periods), statistics.stdev(periods)
    if not mean > 0 or sd / math.sqrt(k) > se_tol * mean:
        return None
    first_half, second_half = statistics.fmean(periods[:k // 2]), statistics.fmean(periods[k // 2:])
    if abs(first_half - second_half) > 4 * sd / math.sqrt(k):
        return None
    x_mean = (k - 1) / 2
    sxx = sum((x - x_mean) ** 2 for x in range(k))
    slope = sum((x - x_mean) * (y - mean) for x, y in enumerate(periods)) / sxx
    residual = math.sqrt(sum((y - mean - slope * (x - x_mean)) ** 2 for x, y in enumerate(periods)) / (k - 2))
    return mean if abs(slope) <= 2 * residual / math.sqrt(sxx) else None


@dataclass(frozen=True)
class _Snapshot:
    """A state at the start of one of rank 0's layers, relative to its time and to each rank's layer."""

    key: tuple[Any, ...]  # the discrete part: must be equal
    now: float
    layers: tuple[int, ...]
    times: tuple[float, ...]  # relative to ``now``: must agree within the tolerance
    mags: tuple[float, ...]  # bytes left, rates: must agree within the tolerance
    comm_s: tuple[float, ...]
    trees: tuple[dict[Any, int], ...]  # per rank: Double Binary Tree counters (they advance every layer)
    next_flow: int
    random_draws: int  # the backend's count: an exact period must draw none (its outcomes need not repeat)


@dataclass(frozen=True)
class Jump:
    """One jump, as recorders of a run's timeline need it: at ``time_s`` rank r was in layer ``layers[r]``;
    ``skipped`` layers (``strides[r]`` nodes of rank r) were marked done and the clock moved ``shift_s``."""

    time_s: float
    layers: tuple[int, ...]
    skipped: int
    shift_s: float
    strides: tuple[int, ...]


def _parities(trees: tuple[tuple[Any, int], ...]) -> tuple[tuple[Any, int], ...]:
    """Tree counters as a plan reads them: DBMAX on even, DBMIN on odd."""
    return tuple(sorted(((key, count % 2) for key, count in trees), key=repr))


def _close(a: _Snapshot, b: _Snapshot, period: float, tol: float) -> bool:
    """Times agree within ``tol`` of the period, magnitudes within ``tol`` relative."""
    return (all(abs(x - y) <= 1e-12 + tol * period for x, y in zip(a.times, b.times, strict=True))
            and all(abs(x - y) <= 1e-9 + tol * max(abs(x), abs(y)) for x, y in zip(a.mags, b.mags, strict=True)))


def attach(sim: Simulation) -> LayerFastForward | None:
    """Layer fast-forward on ``sim`` if its settings ask for it (``SystemSettings.fast_forward``); None if not."""
    return LayerFastForward(sim) if sim.settings.fast_forward else None


def mode(ff: LayerFastForward | None) -> str:
    """"off" (not attached), "none" (no jump), "exact" or "approximate" (docs/system.md)."""
    return "off" if ff is None else ff.jump_mode


class LayerFastForward:
    """Watches a simulation and jumps over the layers that its period makes predictable.

    A snapshot is due whenever rank 0 starts a layer; it is taken after that step (with a backend that
    cannot describe its flows in flight, at the first step after it when the network is idle; with one
    that only summarises them, both: the first for the approximate comparison, the second for the exact
    one). Compared are, per rank, the done/pending nodes of a two-layer window, busy GPU and collective;
    every collective in progress with its chunk counters; every pending event; every flow in flight with
    the backend's view of it. If the discrete part of two consecutive snapshots is equal and their times
    and magnitudes agree (exactly, or within the tolerance over several periods), every further
    identical layer costs the same period.
    """

    def __init__(self, sim: Simulation) -> None:
        self.sim = sim
        self.jump_mode = "none"  # then "exact" or "approximate" once it jumped
        self.layers_skipped = 0
        self.jumps: list[Jump] = []
        self.history: dict[tuple[Any, ...], list[_Snapshot]] = {}
        self.nodes = [g.nodes for g in sim.workload.graphs]
        self.index = [{n.id: i for i, n in enumerate(nodes)} for nodes in self.nodes]
        self.layer_first: list[list[int]] = []  # per rank, the index of each layer's first node
        self.layer_sig: list[list[tuple[Any, ...]]] = []  # per rank, what each layer does
        self.first_undone = [0] * len(self.nodes)
        self.recent: list[_Snapshot] = []  # the last snapshots, whatever their key (approximate mode)
        self.layer_starts: list[float] = []  # when rank 0 started its last layers
        self.due = False
        self.summarised = False  # this layer's snapshot for the approximate comparison is taken
        for r, nodes in enumerate(self.nodes):
            layers = [n.layer for n in nodes]
            if not layers or min(layers) < 0 or layers != sorted(layers):
                return  # no layer structure to exploit
            first = [bisect.bisect_left(layers, L) for L in range(layers[-1] + 2)]
            self.layer_first.append(first)
            self.layer_sig.append([tuple(
                (n.kind, n.flops, n.bytes_moved, n.duration_ns, n.collective, n.size_bytes, n.group,
                 n.involved_dims, n.pair_bytes, tuple(self.index[r].get(d, -1) - first[L] for d in n.deps))
                for n in nodes[first[L]:first[L + 1]]) for L in range(len(first) - 1)])
        sim.hooks.node_started.append(self.node_started)
        sim.hooks.step_finished.append(self.observe)

    def node_started(self, r: int, i: int) -> None:
        """Rank 0 entering a layer makes a snapshot due."""
        if r == 0 and i == self.layer_first[0][self.nodes[0][i].layer]:
            self.due = True
            self.summarised = False
            self.layer_starts.append(self.sim.now)
            del self.layer_starts[:-(_NOISY_PERIODS + 1)]

    def observe(self) -> None:
        """After a step in which rank 0 started a layer: snapshot, compare, maybe jump.

        With a backend that only summarises its flows in flight, the layer start's snapshot serves the
        approximate comparison and a second one, at the first idle moment after it, the exact one."""
        if not self.due:
            return
        sim, backend = self.sim, self.sim.backend
        if self.summarised and backend.active_flows:
            return
        flow_state = backend.flow_state(sim.now)
        if flow_state is None:
            return  # the backend cannot describe its flows in flight: wait until the network is idle
        complete = not flow_state or backend.flow_state_is_complete
        self.due = not complete
        state = snapshot(sim)
        snap = self._relative(state, flow_state)
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
                    self._try_jump(state, snap, hist[0], period, 1, "exact")
                    return
        if approximate_done:
            return
        # Not exactly periodic: shared links let the ranks' offsets wander from layer to layer, or the
        # layers settle into a cycle of a few periods. If the last k layer periods are stationary (the
        # means of their two halves agree within the tolerance, and none is 5 % off their mean),
        # extrapolate the current state with the mean period.
        tol, noise = sim.settings.fast_forward_tolerance, sim.settings.fast_forward_noise
        self.recent.append(snap)
        del self.recent[:-(_NOISY_PERIODS + 1)]
        for k in _APPROX_PERIODS if tol > 0 else ():
            window = self.recent[-k - 1:]
            if len(window) < k + 1 or any(a + k != b for a, b in zip(window[0].layers, snap.layers, strict=True)):
                continue
            mean = stationary_mean([b.now - a.now for a, b in zip(window, window[1:], strict=False)], tol)
            if mean is not None:
                self._try_jump(state, snap, window[0], mean, k, "approximate")
                return
        # Periods that never settle (the ranks' offsets wander chaotically, so the ranks need not even be
        # in step at snapshots k layers apart): rank 0's last 24 layer periods, extrapolated with their
        # mean once its standard error is within fast_forward_noise.
        k = _NOISY_PERIODS
        back = self.recent[0]
        starts = self.layer_starts[-k - 1:]
        if (tol > 0 < noise and len(starts) == k + 1 and back.layers[0] + k == snap.layers[0]
                and all(b > a for a, b in zip(back.layers, snap.layers, strict=True))):
            mean = noisy_mean([b - a for a, b in zip(starts, starts[1:], strict=False)], noise)
            if mean is not None:
                self._try_jump(state, snap, back, mean, k, "approximate")

    def _relative(self, state: SimState, flow_state: FlowState) -> _Snapshot | None:
        """``state`` relative to its time and each rank's layer; None if it reaches beyond the window."""
        now = state.now_s
        if len(flow_state) != len(state.flows) or any(c.retired for c in state.collectives):
            return None
        layers: list[int] = []
        base: list[int] = []
        ranks_key: list[tuple[Any, ...]] = []
        times: list[float] = []
        mags: list[float] = []
        for r, rs in enumerate(state.ranks):
            lo = self.first_undone[r]
            while lo < len(rs.done) and rs.done[lo]:
                lo += 1
            self.first_undone[r] = lo
            first = self.layer_first[r]
            if lo == len(rs.done) or self.nodes[r][lo].layer + _WINDOW_LAYERS >= len(first):
                return None
            L = self.nodes[r][lo].layer
            b, hi = first[L], first[L + _WINDOW_LAYERS]
            done = rs.done[b:hi]
            pending = list(rs.ready) + ([rs.gpu_node] if rs.gpu_node is not None else [])
            if b + sum(done) != rs.completed or any(not b <= i < hi for i in pending):
                return None  # something happens beyond the window
            layers.append(L)
            base.append(b)
            ranks_key.append((L - layers[0], done, rs.deps_left[b:hi], tuple(sorted(i - b for i in rs.ready)),
                              -1 if rs.gpu_node is None else rs.gpu_node - b, rs.comm_busy, _parities(rs.trees)))
        # collective instances, identified by their members and the window positions of their nodes
        ident = [(c.members, tuple(sorted((m, i - base[c.members[m]]) for m, i in c.node_of)))
                 for c in state.collectives]
        order = {key: n for n, key in enumerate(sorted(ident))}
        if len(order) != len(ident):
            return None
        inst_id = [order[key] for key in ident]
        inst_key = []
        for k in sorted(range(len(ident)), key=lambda k: inst_id[k]):
            c = state.collectives[k]
            inst_key.append((ident[k], c.next_chunk, c.exited, c.finished, c.flows_started,
                             tuple(sorted(c.chunks)), _parities(c.trees), tuple(sorted(c.waiting)),
                             tuple(sorted(c.running))))
            times.extend(t - now for _, t in sorted(c.issue_s))
        events = []
        for e in state.events:
            if e.kind is EventKind.COMPUTE_DONE:
                desc: tuple[Any, ...] = (e.kind, e.args[0], e.args[1] - base[e.args[0]])
            elif e.kind.on_collective:
                desc = (e.kind, inst_id[e.args[0]], *e.args[1:])
            else:
                return None
            events.append((e.time_s, e.priority, desc))
        # canonical orders (by what an event or flow is, not by when it was created: simultaneous
        # events and flows may be created in a different order from layer to layer)
        events.sort(key=lambda e: (e[2], e[1]))
        events_key = [(prio, desc) for _, prio, desc in events]
        times.extend(t - now for t, _, _ in events)
        flows = []
        for f in state.flows:
            fs = flow_state.get(f.flow_id)
            if fs is None:
                return None
            flows.append(((inst_id[f.collective], f.chunk, f.transfer, len(fs[0]), len(fs[1])), fs))
        flows.sort(key=lambda f: f[0])
        for _, fs in flows:
            times.extend(fs[0])
            mags.extend(fs[1])
        key = (tuple(ranks_key), tuple(inst_key), tuple(events_key), tuple(desc for desc, _ in flows))
        return _Snapshot(key, now, tuple(layers), tuple(times), tuple(mags), tuple(rs.comm_s for rs in state.ranks),
                         tuple(dict(rs.trees) for rs in state.ranks), state.next_flow, self.sim.backend.random_draws)

    def _try_jump(self, state: SimState, snap: _Snapshot, back: _Snapshot, period: float, periods_back: int,
                  mode: str) -> None:
        m = self._skippable(snap.layers, periods_back)
        if m < 1 or not self._jump(state, m, period, snap.layers, back, periods_back):
            return
        self.history.clear()
        self.recent.clear()
        self.layer_starts.clear()
        self.jump_mode = mode if self.jump_mode in ("none", mode) else "approximate"

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

    def _jump(self, state: SimState, m: int, period: float, layers: tuple[int, ...], back: _Snapshot,
              periods_back: int) -> bool:
        """Move every rank, collective, event and flow m layers on and the clock m periods."""
        sim = self.sim
        flows_per_period = (state.next_flow - back.next_flow) // periods_back
        shift = m * period
        settings = sim.settings
        # Double Binary Tree counters advance by what one layer draws (plans read only their parity)
        drawn = []
        for r, rs in enumerate(state.ranks):
            per_period = {}
            for key, count in rs.trees:
                per_period[key], rest = divmod(count - back.trees[r].get(key, 0), layers[r] - back.layers[r])
                if rest:
                    return False
            drawn.append(per_period)
        ranks = []
        stride = []
        per_layer: dict[tuple[int, ...], int] = defaultdict(int)  # collectives per layer on each group
        for r, rs in enumerate(state.ranks):
            first, L, nodes, index = self.layer_first[r], layers[r], self.nodes[r], self.index[r]
            s = first[L + m] - first[L]
            b, hi = first[L], first[L + _WINDOW_LAYERS]
            done, deps_left = list(rs.done), list(rs.deps_left)
            done[b:b + s] = [True] * s
            done[b + s:hi + s] = rs.done[b:hi]
            deps_left[b + s:hi + s] = rs.deps_left[b:hi]
            for k in range(hi + s, len(nodes)):
                deps_left[k] = sum(1 for d in nodes[k].deps if not done[index[d]])
            # per layer: the GPU time and collectives of one (identical) layer; comm time as observed
            gpu_s, group_seq = rs.gpu_s, dict(rs.group_seq)
            for node in nodes[first[L - 1]:first[L]]:
                if node.kind is NodeKind.COMPUTE:
                    gpu_s += m * roofline_time_s(node, settings.peak_flops, settings.mem_bw_bytes_per_s,
                                                 settings.roofline)
                else:
                    group = sim.workload.collective_ranks(r, node)
                    group_seq[group] = group_seq.get(group, 0) + m
                    if r == group[0]:
                        per_layer[group] += 1
            ranks.append(dataclasses.replace(
                rs, done=tuple(done), deps_left=tuple(deps_left), ready=tuple(i + s for i in rs.ready),
                completed=rs.completed + s, gpu_node=None if rs.gpu_node is None else rs.gpu_node + s,
                gpu_s=gpu_s, comm_s=rs.comm_s + m * (rs.comm_s - back.comm_s[r]) / (L - back.layers[r]),
                group_seq=tuple(group_seq.items()), trees=tuple((k, c + m * drawn[r][k]) for k, c in rs.trees)))
            self.first_undone[r] += s
            stride.append(s)
        # collectives in progress move to the nodes and sequence numbers of their new layer
        collectives = tuple(dataclasses.replace(
            c, seq=c.seq + m * per_layer[c.members],
            node_of=tuple((mem, i + stride[c.members[mem]]) for mem, i in c.node_of),
            trees=tuple((k, t + m * drawn[c.members[0]].get(k, 0)) for k, t in c.trees)) for c in state.collectives)
        events = tuple(dataclasses.replace(e, args=(e.args[0], e.args[1] + stride[e.args[0]]))
                       if e.kind is EventKind.COMPUTE_DONE else e for e in state.events)
        restore(sim, dataclasses.replace(state, ranks=tuple(ranks), collectives=collectives, events=events,
                                         next_flow=state.next_flow + m * flows_per_period), shift)
        sim.backend.shift_time(shift)
        self.layers_skipped += m
        self.jumps.append(Jump(state.now_s, layers, m, shift, tuple(stride)))
        return True
