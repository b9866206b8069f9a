"""Layer fast-forward over packets in flight (docs/system.md): the engine compares the packet backend's
flow summaries at layer starts, and when the layer period is stationary moves the whole packet state
forward (``PacketBackend.shift_time``) with flows still in flight. Oracle: full simulation of the same
run; an approximate jump extrapolates, so agreement is to the tolerance the docs quote, not exact.
"""

from __future__ import annotations

import dataclasses

from moesim.network.packet.backend import PacketBackend
from moesim.system.engine import Simulation
from moesim.system.run import prepare
from moesim.system.spec import RunSpec


class _Counting(PacketBackend):
    shifts_in_flight = 0

    def shift_time(self, delta_s: float) -> None:
        self.shifts_in_flight += self.active_flows > 0
        super().shift_time(delta_s)


def test_a_jump_with_packets_in_flight_matches_full_simulation():
    spec = RunSpec("deepseek-v4-flash", "2", "TP8EP4", "dbt_direct", "roce_hpcc", "packet", (("tokens", 256),))
    _, _, params, topology, workload, settings, _, _ = prepare(spec)
    backend = _Counting(topology, params)
    sim = Simulation(workload, topology, backend, settings)
    jumped = sim.run()
    full = Simulation(workload, topology, PacketBackend(topology, params),
                      dataclasses.replace(settings, fast_forward=False)).run()
    assert backend.shifts_in_flight == 1 and sim.fast_forward_mode == "approximate"
    assert sim.fast_forwarded_layers >= 20
    for a, b in zip(jumped, full, strict=True):
        assert abs(a.wall_s - b.wall_s) <= 1e-4 * b.wall_s
        assert abs(a.comm_s - b.comm_s) <= 1e-4 * b.comm_s
