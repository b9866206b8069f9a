import os
import sys
from pathlib import Path

import pytest
from hypothesis import settings

sys.path.insert(0, str(Path(__file__).parent))

# Under CI the property tests draw the same examples on every run (a red CI names a change, not a draw);
# elsewhere they draw afresh each time. No deadline: the machine may be busy.
settings.register_profile("ci", derandomize=True, deadline=None)
settings.register_profile("dev", deadline=None)
settings.load_profile("ci" if os.environ.get("CI") else "dev")


def pytest_configure(config: pytest.Config) -> None:
    """With pytest-xdist workers to come, compile the network kernels once here, in the controller: each
    worker then loads them from numba's disk cache instead of compiling them itself (about 35 CPU s each)."""
    if hasattr(config, "workerinput") or not getattr(config.option, "numprocesses", None):
        return
    from moesim.network.base import BACKENDS, Flow
    from moesim.network.params import network_mode
    from moesim.topology.catalog import get_topology

    for backend in ("fluid", "packet"):
        params = network_mode("roce_dcqcn")
        topology = get_topology("star:2", nic_switch_delay_s=params.transport.nic_switch_delay_s)
        network = BACKENDS.get(backend)(topology, params)
        network.start_flow(Flow(0, 0, 1, 4096, cc=True), 0.0)
        while network.active_flows:
            network.advance_to(network.next_completion_s(None))
