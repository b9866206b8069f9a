"""``PathModel`` (network/paths.py): a flow's costs on all equal-cost routes of its GPU pair at once
(``on_routes``) against ``describe`` of one flow on each route alone, from a model that has seen nothing
else, to the bit; and the costs kept per link-kind key are those a fresh model computes."""

from __future__ import annotations

import numpy as np
import pytest

from moesim.network.base import Flow
from moesim.network.params import network_mode
from moesim.network.paths import PathModel
from moesim.topology.catalog import parse_topology

TOPO = parse_topology("hgx-h800:2").resolve(1e-6)


def flow_on(src: int, dst: int, route: tuple[int, ...], size: int, cc: bool) -> Flow:
    """A flow of the pair that ``Topology.route`` sends over ``route``."""
    fid = next(f for f in range(10_000) if TOPO.route(src, dst, f) == route)
    return Flow(fid, src, dst, size, cc)


@pytest.mark.parametrize("mode", ["roce_hpcc", "ib_cc0"])
@pytest.mark.parametrize("size,cc", [(200, True), (1 << 20, True), (1 << 20, False)])
def test_costs_on_all_routes_at_once_equal_each_route_described_alone(mode, size, cc):
    params = network_mode(mode)
    together = PathModel(TOPO, params)
    for src, dst in ((0, 9), (3, 12), (15, 0), (0, 1), (8, 15)):  # across servers (8 routes) and inside one
        options = TOPO.routes(src, dst)
        paths = together.on_routes(Flow(0, src, dst, size, cc), options)
        assert paths.links.shape[0] == len(options)
        for i, route in enumerate(options):
            alone = PathModel(TOPO, params).describe(flow_on(src, dst, route, size, cc))
            assert alone.fwd == route == tuple(paths.fwd[i].tolist())
            assert alone.links.tolist() == paths.links[i].tolist()
            assert alone.coefs.tolist() == paths.coefs.tolist()
            assert alone.latency_s == paths.latency_s[i]
            assert (alone.data_coef, alone.ack_coef) == (paths.data_coef, paths.ack_coef)
    # pairs alike in link kinds share one key (and one set of costs); a pair inside a server has another
    keys = {together.on_routes(Flow(0, s, d, size, cc), TOPO.routes(s, d)).key for s, d in ((0, 9), (3, 12), (15, 0))}
    assert len(keys) == 1
    assert together.on_routes(Flow(0, 0, 1, size, cc), TOPO.routes(0, 1)).key not in keys


def test_latency_grows_with_the_last_packet_on_a_multi_hop_route():
    """The last packet's store-and-forward on every hop after the first: a 1000 B last packet takes longer
    than a 100 B one over the same route, by (900 B / bw) summed over those hops."""
    params = network_mode("ib_cc0")
    model = PathModel(TOPO, params)
    route = TOPO.routes(0, 9)[0]
    small, full = (model.on_routes(Flow(0, 0, 9, size, True), [route]).latency_s[0] for size in (100, 1 << 20))
    bw = np.array([TOPO.links[i].bandwidth_bps / 8.0 for i in route[1:]])
    assert full - small == pytest.approx(float(np.sum(900 / bw)), rel=1e-9)
