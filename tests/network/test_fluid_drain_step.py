"""Strided drains (``fluid_drain_step_s``, docs/network-fluid.md): the fluid shares the rates out again at
most once per stride; a flow that drains inside one completes at its own drain time, and the capacity it
frees waits for the stride's end. Driven as the engine drives a backend (look-ahead to the next event)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from helpers import load_benchmark, star

from moesim.network.base import Flow
from moesim.network.fluid import FluidBackend
from moesim.network.params import NETWORK_MODES
from moesim.system.engine import Simulation, SystemSettings
from moesim.topology.catalog import get_topology

STRIDE_S = 1e-6
DEEPEP = load_benchmark("bench_deepep")


def fan_out(sizes: list[float], stride_s: float) -> dict[int, float]:
    """Completion time per flow of host 1 sending ``sizes[i]`` bytes to host i + 2 of a star, all at t = 0:
    the sender's own port is the only shared link, so its flows split it equally while they last."""
    params = NETWORK_MODES["ib_cc0"].with_overrides({"fluid_drain_step_s": stride_s})
    backend = FluidBackend(star(len(sizes) + 2), params)
    for i, size in enumerate(sizes):
        backend.start_flow(Flow(i, 1, i + 2, size), 0.0)
    done: dict[int, float] = {}
    while (t := backend.next_completion_s(math.inf)) < math.inf:
        done.update((flow_id, t) for flow_id in backend.advance_to(t))
    return done


def test_a_stride_delays_only_what_the_freed_capacity_would_have_carried():
    """Three flows share the sender's port: A (1 MB) drains alone, a whole stride after the start, so the
    fluid jumps to it exactly; B (A + 5 kB) drains Δ = t_B − t_A < τ later, inside the next stride, at its
    own time. The last flow D then keeps half the port until the stride ends: it sends (τ − Δ)·r/2 bytes
    fewer, made up at the full rate r, so it completes (τ − Δ)/2 later than the exact fluid says."""
    sizes = [1e6, 1e6 + 5e3, 4e6]
    exact, strided = fan_out(sizes, 0.0), fan_out(sizes, STRIDE_S)
    delta = exact[1] - exact[0]
    assert 0.0 < delta < STRIDE_S
    assert strided[0] == pytest.approx(exact[0], rel=1e-12)
    assert strided[1] == pytest.approx(exact[1], rel=1e-12)
    assert strided[2] - exact[2] == pytest.approx((STRIDE_S - delta) / 2, rel=1e-6)


def test_drains_a_stride_apart_or_more_stay_exact():
    sizes = [1e6, 2e6, 3e6]
    exact, strided = fan_out(sizes, 0.0), fan_out(sizes, STRIDE_S)
    assert strided == pytest.approx(exact, rel=1e-12)


def _wall_s(stride_s: float, splits: int, seed: int) -> float:
    """A 16-GPU low-latency all-to-all whose pairs carry 8 to 24 rows of 7 KiB each, drawn."""
    pair_bytes = tuple(int(r) * 7168 for r in np.random.default_rng(seed).integers(8, 25, 16 * 16))
    params = NETWORK_MODES["ib_cc0"].with_overrides({"fluid_drain_step_s": stride_s})
    topology = get_topology("hgx-h100:2", nic_switch_delay_s=params.transport.nic_switch_delay_s)
    settings = SystemSettings(all_to_all=("low_latency",), dataset_splits=splits, fast_forward=False)
    sim = Simulation(DEEPEP.pair_all_to_all(16, pair_bytes), topology, FluidBackend(topology, params), settings)
    return max(t.wall_s for t in sim.run())


@pytest.mark.parametrize("splits", [1, 4])
def test_a_drawn_all_to_all_converges_to_the_exact_fluid_as_the_stride_shrinks(splits):
    """Per-pair sizes drain at many distinct times, in chunks that start as earlier ones complete: the error
    shrinks with the stride, under 1 % at 50 ns on this 31 µs (one chunk) or 51 µs (four) all-to-all
    (docs/network-fluid.md quotes it at a decode step's scale)."""
    exact = _wall_s(0.0, splits, seed=3)
    walls = [_wall_s(stride, splits, seed=3) for stride in (1e-6, 2.5e-7, 5e-8)]
    errors = [abs(wall / exact - 1) for wall in walls]
    assert errors[0] > errors[1] > errors[2]
    assert errors[2] < 0.01
    assert _wall_s(2.5e-7, splits, seed=3) == walls[1]  # deterministic
