"""The engine always passes its next own event as the look-ahead horizon (``math.inf`` when it has
none), which promises the backend that no flow starts before the answer: the packet backend then
keeps no copy of its state. The promise must hold: ignoring it (the backend snapshots before every
look-ahead and would roll back a flow started too early) gives bit-identical ranks and no rollback.
"""

from __future__ import annotations

from moesim.network.packet.backend import PacketBackend
from moesim.system import fast_forward
from moesim.system.engine import Simulation
from moesim.system.run import prepare
from moesim.system.spec import RunSpec


class _NoPromise(PacketBackend):
    looked_ahead_without_horizon = 0

    def next_completion_s(self, horizon_s: float | None = None) -> float:
        if horizon_s == float("inf"):
            self.looked_ahead_without_horizon += 1
            horizon_s = None
        return super().next_completion_s(horizon_s)


def _run(sim: Simulation) -> list:
    fast_forward.attach(sim)  # as a study run: identical layers are jumped over
    return sim.run()


def test_engine_keeps_its_horizon_promise():
    spec = RunSpec("deepseek-v4-flash", "3", "TP16EP2", "ring_direct", "roce_dcqcn", "packet", (("tokens", 128),))
    prepared = prepare(spec)
    params = prepared.params
    topology = prepared.topology
    workload = prepared.workload()
    settings = prepared.settings
    backend_cls = prepared.backend_cls
    assert backend_cls is PacketBackend
    promised, careful = PacketBackend(topology, params), _NoPromise(topology, params)
    ranks = _run(Simulation(workload, topology, promised, settings))
    assert _run(Simulation(workload, topology, careful, settings)) == ranks
    assert careful.looked_ahead_without_horizon > 100
    assert promised.rollbacks == careful.rollbacks == 0
    assert promised.completed == careful.completed > 0
