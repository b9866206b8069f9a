"""Command groups of the ``moesim`` CLI, one module each (kept out of the library layers)."""

from moesim.commands import models, report, run, sweep, topology, workload

COMMAND_MODULES = (models, workload, topology, run, sweep, report)
