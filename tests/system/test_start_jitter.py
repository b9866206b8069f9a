"""Start jitter (SystemSettings.start_jitter_s, jitter_seed): rank r starts at a seeded uniform draw in
[0, start_jitter_s), so a run can be repeated with only the ranks' start times moved."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from helpers import one_collective, star

from moesim.errors import MoesimError
from moesim.network.flow import FlowBackend
from moesim.network.params import REFERENCE_PRESETS
from moesim.system.engine import SystemSettings
from moesim.system.run import simulate
from moesim.workload.graph import CollectiveType as C
from moesim.workload.graph import Node, NodeKind, RankGraph, Workload

P = REFERENCE_PRESETS["none"]
NO_COMPUTE = SystemSettings(roofline=False)


def compute_only(n: int, duration_ns: int) -> Workload:
    return Workload("compute", tuple(RankGraph(r, (Node(0, "c", NodeKind.COMPUTE, duration_ns=duration_ns),))
                                     for r in range(n)), (n,))


def test_each_rank_ends_its_draw_after_its_node():
    # wall_r = U_r·J + D with U = default_rng(seed).random(n), the documented draw
    n, jitter_s, seed = 6, 5e-9, 7
    topo = star(n)
    settings = dataclasses.replace(NO_COMPUTE, start_jitter_s=jitter_s, jitter_seed=seed)
    times = simulate(compute_only(n, 1000), topo, FlowBackend(topo, P), settings)
    offsets = np.random.default_rng(seed).random(n) * jitter_s
    assert [t.wall_s for t in times] == pytest.approx((offsets + 1e-6).tolist(), abs=1e-18)
    assert len({t.wall_s for t in times}) == n


def test_same_seed_same_result_and_zero_jitter_is_the_default():
    n, size = 8, 4 << 20
    topo = star(n)

    def walls(settings: SystemSettings) -> list[float]:
        return [t.wall_s for t in simulate(one_collective(n, C.ALL_REDUCE, size), topo, FlowBackend(topo, P),
                                           settings)]

    jittered = dataclasses.replace(NO_COMPUTE, start_jitter_s=1e-7, jitter_seed=3)
    assert walls(jittered) == walls(jittered)
    assert walls(jittered) != walls(dataclasses.replace(jittered, jitter_seed=4))
    assert walls(dataclasses.replace(NO_COMPUTE, jitter_seed=3)) == walls(NO_COMPUTE)


@pytest.mark.parametrize("field,value", [("start_jitter_s", -1e-9), ("jitter_seed", -1), ("jitter_seed", 1.5)])
def test_bad_jitter_settings_name_the_field(field, value):
    with pytest.raises(MoesimError, match=field):
        SystemSettings(**{field: value})
