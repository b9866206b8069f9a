"""KV-cache transfers of a disaggregated deployment, as flows of a network backend on the whole cluster.

When a request's prefill ends (DistServe, Zhong et al., OSDI 2024; Splitwise, Patel et al., ISCA 2024),
its KV cache moves from the prefill replica to a decode replica. The workload model keeps every
sequence's KV shard on every rank (attention runs on all ranks, docs/workload.md), so each rank d of the
decode replica receives ``prompt tokens × layers × its per-token KV bytes`` in one flow from rank
``d mod N_p`` of the prefill replica (same TP index when both sides have the same TP). All transfers in
flight share one backend instance over the real cluster, so they contend with each other on NICs and
fabric links; they do not see the replicas' own collectives, whose costs come from the step grid.
A request's transfer ends when its last flow completes. The transfers run on the ``flow`` backend
(max-min fair sharing) unless asked otherwise: ``fluid`` adds congestion control and queues at about ten
times the replay's cost.

On the ``flow`` backend a request's flows usually fall into lanes (``reference_lane``): rank k of every
prefill replica sends to rank k of every decode replica through its own NIC, so the flows of lane k share
links only with each other, and every lane is a copy of lane 0 (links of equal bandwidth and delay in the
same places). Every request puts one flow of one size into each lane at one instant, so max-min sharing
gives every lane the same rates, bit for bit (the progressive filling does the same arithmetic in the
same order on each), and a transfer ends when its lane-0 flow ends: only lane 0 is simulated. Where the
flows do not split so (ECMP routes, shared NICs, replicas of other sizes), every flow is simulated.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from moesim.errors import MoesimError, input_error
from moesim.network import BACKENDS
from moesim.network.base import Flow
from moesim.network.params import network_mode
from moesim.network.paths import FlowPath, PathModel
from moesim.system.run import split_overrides
from moesim.topology.catalog import get_topology

KV_BACKEND = "flow"
"""The backend of KV transfers by default (fast, and contention-aware)."""
PLAIN_BACKENDS = ("flow",)
"""Backends whose rates depend on the flows' links, bandwidths and delays alone (no per-flow randomness, no
state beyond the flows), so that isomorphic lanes of flows keep identical rates (``reference_lane``), and
whose next event depends on the flows alone (not on the horizon), so it holds until a flow starts or ends."""

Ends = list[tuple[int, int, bool]]
"""A transfer's flows: (source GPU, destination GPU, under congestion control) each."""


def reference_lane(paths: PathModel, transfers: Sequence[Ends]) -> list[int] | None:
    """Per transfer kind, the index of its flow in lane 0, when the kinds' flows split into lanes, else None.

    The flows of all kinds (each kind's flows start together with one size) split into lanes when the
    components of flows joined by a shared link (data or ACK) number as many as a kind has flows, each
    holding one flow of every kind, each flow with a single route, and every lane maps onto lane 0 link by
    link (one-to-one, equal bandwidth and delay, same data and ACK hops, same congestion-control flag).
    Then the flow backend gives every lane lane 0's rates and completion times."""
    width = len(transfers[0]) if transfers else 0
    if width < 2 or any(len(t) != width for t in transfers):
        return None
    topo = paths.topology
    if any(len(topo.routes(src, dst)) != 1 for t in transfers for src, dst, _ in t):
        return None
    size = paths.params.transport.packet_payload_bytes
    described = [[paths.describe(Flow(0, src, dst, size, cc)) for src, dst, cc in t] for t in transfers]
    parent = list(range(len(transfers) * width))

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    first: dict[int, int] = {}
    for i, path in enumerate(p for t in described for p in t):
        for link in path.links.tolist():
            j = first.setdefault(link, i)
            parent[root(i)] = root(j)
    lane = [[root(t * width + k) for k in range(width)] for t in range(len(transfers))]
    if any(len(set(row)) != width or set(row) != set(lane[0]) for row in lane):
        return None
    ref = lane[0][0]
    index = [row.index(ref) for row in lane]
    for other in lane[0][1:]:
        to: dict[int, int] = {}
        back: dict[int, int] = {}
        for row, t, k in zip(lane, described, index, strict=True):
            if not _same_place(t[k], t[row.index(other)], paths, to, back):
                return None
    return index


def _same_place(a: FlowPath, b: FlowPath, paths: PathModel, to: dict[int, int], back: dict[int, int]) -> bool:
    """Whether path ``b`` is path ``a``'s image under the link map ``to`` (one-to-one, inverse ``back``),
    extended as needed, with equal hop counts, coefficients, bandwidths and delays."""
    if (len(a.fwd), len(a.rev), a.data_coef, a.ack_coef) != (len(b.fwd), len(b.rev), b.data_coef, b.ack_coef):
        return False
    for la, lb in zip(a.links.tolist(), b.links.tolist(), strict=True):
        if to.setdefault(la, lb) != lb or back.setdefault(lb, la) != la:
            return False
        if paths.bw_Bps[la] != paths.bw_Bps[lb] or paths.delay_s[la] != paths.delay_s[lb]:
            return False
    return True


def check_kv_backend(name: str) -> None:
    """A KV-transfer backend must be a network backend, even when no deployment transfers (colocated)."""
    if name not in BACKENDS.names():
        raise input_error("--kv-backend", "backend", f"unknown backend {name!r}", BACKENDS.names())


class KvTransfers:
    """One backend carrying every KV transfer of a replay."""

    def __init__(self, topology: str, network: str, backend: str = KV_BACKEND,
                 overrides: tuple[tuple[str, Any], ...] = ()) -> None:
        _, _, net, links = split_overrides(dict(overrides), "serving")
        self.params = network_mode(network).with_overrides(net)
        topo = get_topology(topology, nic_switch_delay_s=self.params.transport.nic_switch_delay_s)
        self.topology = topo.with_link_bandwidths(links) if links else topo
        self.plain = backend in PLAIN_BACKENDS
        self.backend = BACKENDS.get(backend)(self.topology, self.params)
        self.owner: dict[int, int] = {}
        self.left: dict[int, int] = {}
        self.next_flow = 0
        self.pairs: dict[tuple[tuple[int, ...], tuple[int, ...]], Ends] = {}
        """(source GPUs, destination GPUs) → the flows started per request (all, or lane 0's)."""
        self.lanes = 1
        """Flows a request's transfer stands for per flow started (its lanes; 1: every flow simulated)."""
        self.known_next_s: float | None = None
        """The backend's next event, known until a flow starts or ends (a ``PLAIN_BACKENDS`` backend): what
        ``next_event_s`` returns while it is set."""

    def _ends(self, src_gpus: tuple[int, ...], dst_gpus: tuple[int, ...]) -> Ends:
        """One flow into every GPU of ``dst_gpus``, from ``src_gpus``' GPU of the same index modulo its size."""
        intra_cc = self.params.transport.intra_server_cc
        ends = [(src_gpus[d % len(src_gpus)], dst) for d, dst in enumerate(dst_gpus)]
        return [(src, dst, intra_cc or not self.topology.same_server(src, dst)) for src, dst in ends]

    def prepare(self, pairs: Iterable[tuple[tuple[int, ...], tuple[int, ...]]]) -> None:
        """Declare every (source GPUs, destination GPUs) a transfer may take, before the first starts: when
        their flows split into lanes (``reference_lane``, on a ``PLAIN_BACKENDS`` backend), only lane 0 runs."""
        keys = list(dict.fromkeys(pairs))
        ends = [self._ends(*key) for key in keys]
        lane = reference_lane(PathModel(self.topology, self.params), ends) if self.plain else None
        if lane is None:
            self.pairs = dict(zip(keys, ends, strict=True))
            return
        self.pairs = {key: [e[k]] for key, e, k in zip(keys, ends, lane, strict=True)}
        self.lanes = len(ends[0])

    @property
    def active(self) -> bool:
        """Whether some transfer is under way (a request has flows the backend has not reported ended)."""
        return bool(self.left)

    def start(self, request: int, now_s: float, src_gpus: tuple[int, ...], dst_gpus: tuple[int, ...],
              bytes_per_gpu: int) -> None:
        """Start request ``request``'s transfer at ``now_s``: one flow into every GPU of ``dst_gpus``."""
        pairs = self.pairs.get((src_gpus, dst_gpus))
        if pairs is None:
            if self.lanes > 1:
                raise MoesimError(f"KV transfer {src_gpus} → {dst_gpus}: not among the pairs prepared")
            pairs = self.pairs[src_gpus, dst_gpus] = self._ends(src_gpus, dst_gpus)
        start_flow, owner, flow_id = self.backend.start_flow, self.owner, self.next_flow
        for src, dst, cc in pairs:
            owner[flow_id] = request
            start_flow(Flow(flow_id, src, dst, bytes_per_gpu, cc), now_s)
            flow_id += 1
        self.next_flow = flow_id
        self.left[request] = len(pairs)
        self.known_next_s = None

    def next_event_s(self, horizon_s: float) -> float:
        """The backend's next event; ``horizon_s`` is the earliest time another transfer may start."""
        if self.known_next_s is not None:
            return self.known_next_s
        t = self.backend.next_completion_s(horizon_s)
        if self.plain:
            self.known_next_s = t
        return t

    def advance(self, t_s: float) -> list[int]:
        """Move to ``t_s``; the requests whose transfer has ended by then, in completion order. Before the
        backend's next event known, nothing ends and the backend is left where it is (its flows' bytes are
        brought to the time of the next start or event)."""
        if self.known_next_s is not None and t_s < self.known_next_s:
            return []
        self.known_next_s = None
        landed = []
        for flow_id in self.backend.advance_to(t_s):
            r = self.owner.pop(flow_id)
            self.left[r] -= 1
            if self.left[r] == 0:
                del self.left[r]
                landed.append(r)
        return landed
