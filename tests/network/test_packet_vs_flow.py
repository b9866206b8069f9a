"""On uncongested transfers (ASTRA-sim's microbenchmarks on one switch, no CC) the packet and flow
backends agree within 2 %."""

from __future__ import annotations

import pytest
from helpers import one_collective, star

from moesim.network.flow import FlowBackend
from moesim.network.packet import PacketBackend
from moesim.network.params import REFERENCE_PRESETS
from moesim.system.engine import SystemSettings
from moesim.system.run import simulate
from moesim.workload.graph import CollectiveType as C

SETTINGS = SystemSettings(roofline=False, all_reduce=("ring",), all_to_all=("direct",),
                          all_gather=("ring",), reduce_scatter=("ring",))


@pytest.mark.parametrize("ctype", [C.ALL_REDUCE, C.ALL_TO_ALL, C.ALL_GATHER, C.REDUCE_SCATTER])
@pytest.mark.parametrize("n", [4, 8])
def test_packet_and_flow_agree_on_uncongested_collectives(ctype, n):
    topo = star(n)
    params = REFERENCE_PRESETS["none"]
    walls = [max(t.wall_s for t in simulate(one_collective(n, ctype, 1 << 20), topo, backend(topo, params), SETTINGS))
             for backend in (PacketBackend, FlowBackend)]
    assert walls[1] == pytest.approx(walls[0], rel=0.02)
