"""Layer fast-forward over packets in flight (docs/system.md): the engine compares the packet backend's
flow summaries at layer starts, and when the layer period is stationary moves the whole packet state
forward (``PacketBackend.shift_time``) with flows still in flight. Oracle: full simulation of the same
run; an approximate jump extrapolates, so agreement is to the tolerance the docs quote, not exact.
"""

from __future__ import annotations

import dataclasses

from moesim.network.packet.backend import PacketBackend
from moesim.network.packet.layout import G_RNG_DRAWS
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


def test_a_layer_that_drew_random_numbers_is_never_taken_as_exactly_periodic():
    """ECN marks are drawn from the backend's RNG, whose state no snapshot holds: two equal layers that
    drew numbers do not make the next one equal (V4 Flash T2 TP8EP4 dbt roce_dcqcn at 4096 tokens jumped
    'exactly' to 0.96875 s against 0.94086 s in full). Here every queued dequeue draws (KMIN 0) but
    marks practically never (PMAX 1e-12), so the layers do repeat: without the rule the run jumps exactly."""
    rates = (25e9, 40e9, 100e9, 200e9, 400e9, 512e9, 2400e9)
    base = RunSpec("deepseek-v4-flash", "2", "TP4EP8", "ring_direct", "roce_dcqcn", "packet", (("tokens", 256),))
    drawing = dataclasses.replace(base, overrides=base.overrides + (
        ("kmin_kb", tuple((r, 0.0) for r in rates)), ("kmax_kb", tuple((r, 1e9) for r in rates)), ("pmax", 1e-12)))
    runs = {}
    for name, spec in (("quiet", base), ("drawing", drawing)):
        _, _, params, topology, workload, settings, backend_cls, _ = prepare(spec)
        backend = backend_cls(topology, params)
        sim = Simulation(workload, topology, backend, settings)
        runs[name] = (sim.run(), sim, backend)
    quiet, drawing_run = runs["quiet"], runs["drawing"]
    assert quiet[2].random_draws == 0 and quiet[1].fast_forward_mode == "exact"
    assert drawing_run[2].random_draws > 0 and drawing_run[2].stats()["ecn_marks"] == 0
    assert drawing_run[1].fast_forward_mode != "exact"
    for a, b in zip(drawing_run[0], quiet[0], strict=True):  # no mark: the same run, jumped or not
        assert abs(a.wall_s - b.wall_s) <= 1e-4 * b.wall_s


def test_marks_that_the_cc_algorithm_ignores_do_not_cost_the_exact_jump():
    """HPCC ignores the CNP flag (REFERENCE_SEMANTICS.md A.1.2), so roce_hpcc's ECN draws cannot change a
    layer: the backend does not report them and the run still jumps exactly."""
    rates = (25e9, 40e9, 100e9, 200e9, 400e9, 512e9, 2400e9)
    spec = RunSpec("deepseek-v4-flash", "2", "TP4EP8", "ring_direct", "roce_hpcc", "packet", (
        ("tokens", 256), ("kmin_kb", tuple((r, 0.0) for r in rates)), ("kmax_kb", tuple((r, 1e9) for r in rates))))
    _, _, params, topology, workload, settings, backend_cls, _ = prepare(spec)
    backend = backend_cls(topology, params)
    sim = Simulation(workload, topology, backend, settings)
    sim.run()
    assert backend.S.g[G_RNG_DRAWS] > 0 and backend.random_draws == 0
    assert sim.fast_forward_mode == "exact"
