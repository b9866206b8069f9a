"""Disaggregation: KV caches move from prefill to decode replicas as flows of a network backend."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from moesim.errors import MoesimError
from moesim.models.catalog import get_model
from moesim.network.base import Flow
from moesim.network.flow import FlowBackend
from moesim.network.params import network_mode
from moesim.network.paths import PathModel
from moesim.serving import Deployment, Requests, SchedulerConfig, StepCache, serve
from moesim.serving.deployment import sub_topology
from moesim.serving.disagg import KvTransfers, reference_lane
from moesim.topology.catalog import get_topology

PROMPT = 1000


def disaggregated(model: str) -> Deployment:
    """star:4: a TP1EP2 prefill replica on hosts 0–1, a TP1EP2 decode replica on hosts 2–3."""
    return Deployment(model, "star:4", "TP1EP2", backend="flow", disaggregate=(2, 2))


def together(n: int, output: int = 4) -> Requests:
    """``n`` requests arriving at once, each a 1000-token prompt and ``output`` output tokens."""
    return Requests(np.zeros(n), np.full(n, PROMPT, dtype=np.int64), np.full(n, output, dtype=np.int64),
                    np.arange(n, dtype=np.int64), "test")


def kv_bytes_per_gpu(model: str) -> int:
    """KV cache of the prompt on one decode GPU (docs/workload.md): GQA caches K and V of its KV heads,
    2 · ⌈kv_heads / TP⌉ · head_dim · 2 bytes per token and layer (TP 1 here)."""
    m = get_model(model)
    return PROMPT * m.num_layers * 2 * m.attention.num_kv_heads * m.attention.head_dim * 2


def alone_s(model: str, concurrent: int = 1) -> float:
    """A flow from host 0 to host 2 carrying the KV bytes, sharing its links with ``concurrent`` − 1 equal
    flows: wire bytes (payload plus headers) over its share of the bottleneck, plus the path's fixed latency
    (propagation both ways and store-and-forward of the last packet and its ACK: moesim.network.paths)."""
    topo, params = get_topology("star:4"), network_mode("ib_cc0")
    size = kv_bytes_per_gpu(model)
    path = PathModel(topo, params).describe(Flow(0, 0, 2, size))
    bottleneck_bps = min(topo.links[i].bandwidth_bps for i in path.fwd)
    return concurrent * size * path.data_coef / (bottleneck_bps / 8) + path.latency_s


def test_the_kv_transfer_of_one_request_alone_is_bytes_over_the_bottleneck_plus_latency(tiny_model, cache_dir):
    config = SchedulerConfig(token_budget=4096, max_seqs=16, policy="prefill-first")
    res = serve(disaggregated(tiny_model), together(1), config, cache=StepCache(cache_dir), check_points=0)
    assert res.table.column("kv_transfer_s")[0].as_py() == pytest.approx(alone_s(tiny_model), rel=1e-9)
    assert res.table.column("decode_replica")[0].as_py() == 1  # the replica on hosts 2–3


def test_kv_transfers_that_start_together_share_the_links(tiny_model, cache_dir):
    """Four prefills in one step hand over together: each of the two paths carries four equal flows, so under
    max-min sharing each transfer takes four times the alone bandwidth term, plus the same latency."""
    config = SchedulerConfig(token_budget=4096, max_seqs=16, policy="prefill-first")
    res = serve(disaggregated(tiny_model), together(4), config, cache=StepCache(cache_dir), check_points=0)
    transfer = res.table.column("kv_transfer_s").to_numpy()
    assert np.allclose(transfer, alone_s(tiny_model, concurrent=4), rtol=1e-9)
    assert transfer.min() > 3 * alone_s(tiny_model)


def test_a_transfer_waits_until_the_decode_replica_has_room(tiny_model, cache_dir):
    """With room for one request per replica, the second request's KV cache leaves the prefill replica only
    when the first request has finished decoding and freed the decode replica's cache."""
    config = SchedulerConfig(token_budget=4096, max_seqs=16, kv_tokens=PROMPT + 200)
    res = serve(disaggregated(tiny_model), together(2, output=200), config, cache=StepCache(cache_dir),
                check_points=0)
    t = {c: res.table.column(c).to_numpy() for c in ("first_token_s", "kv_sent_s", "finish_s")}
    assert t["kv_sent_s"][0] == t["first_token_s"][0]
    assert t["first_token_s"][1] < t["finish_s"][0]  # its prefill was done while the first one decoded
    assert t["kv_sent_s"][1] == t["finish_s"][0]


def test_a_replica_runs_on_a_cluster_of_its_own_size():
    assert sub_topology("hgx-h100:4", 2) == "hgx-h100:2"
    assert sub_topology("mi300x:8:ls3", 4) == "mi300x:4:ls3"
    assert sub_topology("star:8", 2) == "star:2"
    d = Deployment("deepseek-v4-flash", "hgx-h100:4", "TP4EP4", disaggregate=(2, 2), prefill_strategy="TP8EP2")
    reps = d.replicas()
    assert [(r.role, r.kind.topology, r.gpus[0], len(r.gpus)) for r in reps] == [
        ("prefill", "hgx-h100:2", 0, 16), ("decode", "hgx-h100:2", 16, 16)]


PREFILL_GPUS, DECODE_GPUS = tuple(range(16)), tuple(range(16, 32))
"""On hgx-h100:4, a 16-GPU prefill replica on servers 0–1 and a 16-GPU decode replica on servers 2–3."""


def landings(transfers: KvTransfers, starts: list[tuple[float, int]]) -> list[tuple[int, float]]:
    """Start request i's transfer of ``size`` bytes per GPU at its time, advance through every backend event:
    (request, time its transfer ended) in landing order."""
    out: list[tuple[int, float]] = []
    for r, (t, size) in enumerate(starts):
        while transfers.active and (t_net := transfers.next_event_s(t)) <= t:
            out += [(q, t_net) for q in transfers.advance(t_net)]
        transfers.start(r, t, PREFILL_GPUS, DECODE_GPUS, size)
    while transfers.active:
        t_net = transfers.next_event_s(math.inf)
        out += [(q, t_net) for q in transfers.advance(t_net)]
    return out


def landings_per_flow(starts: list[tuple[float, int]]) -> list[tuple[int, float]]:
    """The same on the flow backend driven directly: request i's 16 flows (prefill GPU k → decode GPU k, under
    congestion control as they cross servers); a request lands with its last flow."""
    topo, params = get_topology("hgx-h100:4"), network_mode("ib_cc0")
    backend = FlowBackend(topo, params)
    left = dict.fromkeys(range(len(starts)), len(DECODE_GPUS))
    out: list[tuple[int, float]] = []

    def run_to(t: float) -> None:
        while backend.active_flows and (t_net := backend.next_completion_s(t)) <= t:
            for fid in backend.advance_to(t_net):
                left[fid // 16] -= 1
                if left[fid // 16] == 0:
                    out.append((fid // 16, t_net))

    for r, (t, size) in enumerate(starts):
        run_to(t)
        for k, (src, dst) in enumerate(zip(PREFILL_GPUS, DECODE_GPUS, strict=True)):
            backend.start_flow(Flow(16 * r + k, src, dst, size, True), t)
    run_to(math.inf)
    return out


def test_a_transfer_simulated_on_its_lane_ends_when_all_its_flows_end():
    """Rank k of the prefill replica sends to rank k of the decode replica through its own NICs: 16 link-disjoint,
    identical lanes. Simulating lane 0 alone gives every transfer the end time of its 16 flows simulated
    together, bit for bit, under overlapping transfers of different sizes (max-min sharing within each lane)."""
    rng = np.random.default_rng(5)
    starts = [(float(t), int(s)) for t, s in zip(np.cumsum(rng.exponential(2e-4, 60)),
                                                  rng.integers(500, 40_000_000, 60), strict=True)]
    starts[10] = (starts[9][0], starts[9][1])  # two equal transfers at one instant
    every = KvTransfers("hgx-h100:4", "ib_cc0")
    lane = KvTransfers("hgx-h100:4", "ib_cc0")
    lane.prepare([(PREFILL_GPUS, DECODE_GPUS)])
    assert (every.lanes, lane.lanes) == (1, 16)
    assert len(lane.pairs[PREFILL_GPUS, DECODE_GPUS]) == 1
    ended = landings(lane, starts)
    assert ended == landings(every, starts) == landings_per_flow(starts)
    assert len(ended) == 60 and len({t for _, t in ended}) > 30  # transfers overlapped and ended apart
    with pytest.raises(MoesimError, match="not among the pairs prepared"):
        lane.start(0, 1.0, DECODE_GPUS, PREFILL_GPUS, 1000)


def test_flows_that_do_not_split_into_identical_lanes_are_all_simulated():
    """Lanes need link-disjoint flows (a prefill GPU serving two decode GPUs shares its NIC), single routes
    (mi300x:8:ls3's fabric has ECMP choices by flow id) and equal-bandwidth copies of lane 0."""
    topo, params = get_topology("hgx-h100:4"), network_mode("ib_cc0")
    paths = PathModel(topo, params)
    cross = [(s, s + 16, True) for s in range(8)]
    assert reference_lane(paths, [cross]) == [0]
    assert reference_lane(paths, [cross, [(s + 8, s + 16, True) for s in range(8)]]) == [0, 0]  # two sources
    assert reference_lane(paths, [cross, [(s + 8, s + 24, True) for s in range(8)]]) is None  # 16 apart
    assert reference_lane(paths, [[(s % 4, s + 16, True) for s in range(8)]]) is None  # shared source NICs
    assert reference_lane(paths, [cross[:1]]) is None  # one flow: nothing to leave out
    links = list(topo.links)
    k = paths.describe(Flow(0, 3, 19, 1)).fwd[2]
    links[k] = dataclasses.replace(links[k], bandwidth_bps=links[k].bandwidth_bps / 2)
    slow = dataclasses.replace(topo, links=tuple(links))
    assert reference_lane(PathModel(slow, params), [cross]) is None  # lane 3 crosses a slower link
    ecmp = get_topology("mi300x:8:ls3")
    assert len(ecmp.routes(0, 63)) > 1
    assert reference_lane(PathModel(ecmp, params), [[(s, 56 + s, True) for s in range(8)]]) is None
