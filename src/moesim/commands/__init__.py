"""Command groups of the ``moesim`` CLI, one module each (kept out of the library layers).

Each module imports only typer (and the standard library) at load time; everything else is imported inside
the commands, so ``moesim --help`` and the listings stay fast.
"""

from moesim.commands import (
    astra,
    collective,
    models,
    place,
    plugins,
    refine,
    report,
    run,
    sweep,
    topology,
    workload,
)

COMMAND_MODULES = (models, workload, topology, run, collective, place, sweep, report, refine, plugins, astra)
