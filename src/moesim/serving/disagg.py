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
"""

from __future__ import annotations

from typing import Any

from moesim.errors import input_error
from moesim.network import BACKENDS
from moesim.network.base import Flow
from moesim.network.params import network_mode
from moesim.system.run import split_overrides
from moesim.topology.catalog import get_topology

KV_BACKEND = "flow"
"""The backend of KV transfers by default (fast, and contention-aware)."""


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
        self.backend = BACKENDS.get(backend)(self.topology, self.params)
        self.owner: dict[int, int] = {}
        self.left: dict[int, int] = {}
        self.next_flow = 0
        self.pairs: dict[tuple[tuple[int, ...], tuple[int, ...]], list[tuple[int, int, bool]]] = {}
        """(source GPUs, destination GPUs) → each flow's (source, destination, under congestion control)."""

    @property
    def active(self) -> bool:
        return self.backend.active_flows > 0

    def start(self, request: int, now_s: float, src_gpus: tuple[int, ...], dst_gpus: tuple[int, ...],
              bytes_per_gpu: int) -> None:
        """Start request ``request``'s transfer at ``now_s``: one flow into every GPU of ``dst_gpus``."""
        pairs = self.pairs.get((src_gpus, dst_gpus))
        if pairs is None:
            intra_cc = self.params.transport.intra_server_cc
            ends = [(src_gpus[d % len(src_gpus)], dst) for d, dst in enumerate(dst_gpus)]
            pairs = self.pairs[src_gpus, dst_gpus] = [
                (src, dst, intra_cc or not self.topology.same_server(src, dst)) for src, dst in ends]
        start_flow, owner, flow_id = self.backend.start_flow, self.owner, self.next_flow
        for src, dst, cc in pairs:
            owner[flow_id] = request
            start_flow(Flow(flow_id, src, dst, bytes_per_gpu, cc), now_s)
            flow_id += 1
        self.next_flow = flow_id
        self.left[request] = len(pairs)

    def next_event_s(self, horizon_s: float) -> float:
        """The backend's next event; ``horizon_s`` is the earliest time another transfer may start."""
        return self.backend.next_completion_s(horizon_s)

    def advance(self, t_s: float) -> list[int]:
        """Move to ``t_s``; the requests whose transfer has ended by then, in completion order."""
        landed = []
        for flow_id in self.backend.advance_to(t_s):
            r = self.owner.pop(flow_id)
            self.left[r] -= 1
            if self.left[r] == 0:
                del self.left[r]
                landed.append(r)
        return landed
