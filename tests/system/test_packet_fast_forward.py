"""Layer fast-forward over packets in flight (docs/system.md): the engine compares the packet backend's
flow summaries at layer starts, and when the layer period is stationary moves the whole packet state
forward (``PacketBackend.shift_time``) with flows still in flight. Oracle: full simulation of the same
run; an approximate jump extrapolates, so agreement is to the tolerance the docs quote, not exact.
"""

from __future__ import annotations

import pytest

from moesim.network.packet.backend import PacketBackend
from moesim.network.packet.layout import G_RNG_DRAWS
from moesim.network.params import KMIN_KB
from moesim.system import fast_forward
from moesim.system.engine import Simulation
from moesim.system.run import prepare
from moesim.system.spec import RunSpec


class _Counting(PacketBackend):
    shifts_in_flight = 0

    def shift_time(self, delta_s: float) -> None:
        self.shifts_in_flight += self.active_flows > 0
        super().shift_time(delta_s)


@pytest.mark.slow
def test_a_jump_with_packets_in_flight_matches_full_simulation():
    spec = RunSpec("deepseek-v4-flash", "2", "TP8EP4", "dbt_direct", "roce_hpcc", "packet", (("tokens", 256),))
    prepared = prepare(spec)
    params = prepared.params
    topology = prepared.topology
    workload = prepared.workload()
    settings = prepared.settings
    backend = _Counting(topology, params)
    sim = Simulation(workload, topology, backend, settings)
    ff = fast_forward.attach(sim)
    jumped = sim.run()
    full = Simulation(workload, topology, PacketBackend(topology, params), settings).run()  # nothing attached
    assert backend.shifts_in_flight == 1 and fast_forward.mode(ff) == "approximate"
    assert ff is not None and ff.layers_skipped >= 20
    for a, b in zip(jumped, full, strict=True):
        assert abs(a.wall_s - b.wall_s) <= 1e-4 * b.wall_s
        assert abs(a.comm_s - b.comm_s) <= 1e-4 * b.comm_s


# Every dequeue behind a queued packet draws a random number (KMIN 0), which practically never marks.
DRAW_ALWAYS = (("kmin_kb", tuple((r, 0.0) for r, _ in KMIN_KB)), ("kmax_kb", tuple((r, 1e9) for r, _ in KMIN_KB)))


def _run(mode: str, *overrides: tuple) -> tuple[list, str, PacketBackend]:
    spec = RunSpec("deepseek-v4-flash", "2", "TP4EP8", "ring_direct", mode, "packet", (("tokens", 256),) + overrides)
    prepared = prepare(spec)
    params = prepared.params
    topology = prepared.topology
    workload = prepared.workload()
    settings = prepared.settings
    backend = PacketBackend(topology, params)
    sim = Simulation(workload, topology, backend, settings)
    ff = fast_forward.attach(sim)
    return sim.run(), fast_forward.mode(ff), backend


def test_a_layer_that_drew_random_numbers_is_never_taken_as_exactly_periodic():
    """ECN marks are drawn from the backend's RNG, whose state no snapshot holds: two equal layers that
    drew numbers do not make the next one equal (V4 Flash T2 TP8EP4 dbt roce_dcqcn at 4096 tokens jumped
    'exactly' to 0.96875 s against 0.94086 s in full). Here the draws (PMAX 1e-12) never mark, so the
    layers do repeat: without the rule the run jumps exactly."""
    quiet, quiet_mode, quiet_backend = _run("roce_dcqcn")
    drawing, drawing_mode, drawing_backend = _run("roce_dcqcn", *DRAW_ALWAYS, ("pmax", 1e-12))
    assert quiet_backend.random_draws == 0 and quiet_mode == "exact"
    assert drawing_backend.random_draws > 0 and drawing_backend.stats()["ecn_marks"] == 0
    assert drawing_mode != "exact"
    for a, b in zip(drawing, quiet, strict=True):  # no mark: the same run, jumped or not
        assert abs(a.wall_s - b.wall_s) <= 1e-4 * b.wall_s


def test_marks_that_the_cc_algorithm_ignores_do_not_cost_the_exact_jump():
    """HPCC ignores the CNP flag (docs/reference-semantics.md A.1.2), so roce_hpcc's ECN draws cannot change a
    layer: the backend does not report them and the run still jumps exactly."""
    _, mode, backend = _run("roce_hpcc", *DRAW_ALWAYS)
    assert backend.S.g[G_RNG_DRAWS] > 0 and backend.random_draws == 0
    assert mode == "exact"
