"""docs/reference-runs.md scenario S1 through the system layer: 32 hosts on one 400 Gb/s switch.

Completion of the last rank equal to ASTRA-sim + NS-3's to the ns (the model follows the same semantics and
event order, and any change of the kernel must keep it) and every message's FCT within 3 % of the reference's.
"""

from __future__ import annotations

import pytest
from helpers import one_collective, star

from moesim.network.diagnostics import DiagnosticsSpec
from moesim.network.packet import PacketBackend
from moesim.network.params import REFERENCE_PRESETS
from moesim.system.engine import SystemSettings
from moesim.system.run import simulate
from moesim.workload.graph import CollectiveType as C

ROWS = [
    # collective, mode, completion ns, FCT of one 524 288 B message ns
    (C.ALL_REDUCE, "none", 3_474_644, 13_510),
    (C.ALL_TO_ALL, "hpcc", 1_568_212, 391_803),
    pytest.param(C.ALL_REDUCE, "dcqcn", 3_474_644, 13_510, marks=pytest.mark.slow),
    pytest.param(C.ALL_REDUCE, "hpcc", 3_725_868, 14_523, marks=pytest.mark.slow),
    pytest.param(C.ALL_TO_ALL, "none", 1_438_236, 359_350, marks=pytest.mark.slow),
    pytest.param(C.ALL_TO_ALL, "dcqcn", 1_438_236, 359_350, marks=pytest.mark.slow),
]


@pytest.mark.parametrize("ctype,mode,completion_ns,fct_ns", ROWS)
def test_s1_matches_the_reference(ctype, mode, completion_ns, fct_ns):
    topo = star(32)
    backend = PacketBackend(topo, REFERENCE_PRESETS[mode], diagnostics=DiagnosticsSpec(fct=True))
    times = simulate(one_collective(32, ctype, 64 << 20), topo, backend, SystemSettings(roofline=False))
    wall_ns = max(t.wall_s for t in times) * 1e9
    assert round(wall_ns) == completion_ns
    fct = backend.tables()["fct"].to_pydict()
    assert len(fct["fct_ns"]) == (7936 if ctype == C.ALL_REDUCE else 3968)
    assert set(fct["size_bytes"]) == {524_288}
    assert all(abs(f - fct_ns) <= 0.03 * fct_ns for f in fct["fct_ns"])
    st = backend.stats()
    assert st["drops"] == 0 and st["pauses"] == 0  # no PFC pause in any S1 run (reference)
    assert st["delivered_bytes"] == 524_288 * len(fct["fct_ns"])
