"""`moesim astra run`: simulate an ASTRA-sim input directory on a moesim backend (docs/system.md)."""

from __future__ import annotations

import json

import typer

astra_app = typer.Typer(help="Run ASTRA-sim inputs (ET workload, system JSON, NS-3 or analytical network) on moesim.",
                        no_args_is_help=True)


@astra_app.command("run")
def run(
    directory: str = typer.Argument(None, help="an ASTRA-sim input directory (as `moesim export` writes it)"),
    workload: str = typer.Option(None, "--workload-configuration", help="ET prefix: <dir>/<prefix> of <prefix>.<rank>.et"),
    system: str = typer.Option(None, "--system-configuration", help="system JSON"),
    network: str = typer.Option(None, "--network-configuration",
                                help="NS-3 config text (with its TOPOLOGY_FILE) or an analytical network .yml"),
    remote_memory: str = typer.Option(None, "--remote-memory-configuration", help="remote-memory JSON"),
    logical_topology: str = typer.Option(None, "--logical-topology-configuration", help="logical-topology JSON"),
    comm_groups: str = typer.Option(None, "--comm-group-configuration", help="communicator-group JSON, or 'empty'"),
    backend: str = typer.Option("packet", "--backend", help="packet | fluid | flow | analytical"),
    set_: list[str] = typer.Option(None, "--set", help="network or system parameter key=value (repeatable)"),
    as_json: bool = typer.Option(False, "--json", help="print one JSON object"),
) -> None:
    """Simulate ASTRA-sim inputs; prints ASTRA-sim's per-rank lines (cycles = ns) or one JSON object.
    Each option overrides the file of that name found in DIR. A caveat on what the backend cannot see
    goes to stderr (and into the JSON)."""
    from moesim.commands.run import parse_set
    from moesim.network import BACKENDS
    from moesim.system import fast_forward
    from moesim.system.astra_input import find_paths, read_inputs, with_overrides
    from moesim.system.engine import Simulation
    from moesim.system.phases import fast_tier_caveat

    paths = find_paths(directory, workload=workload, system=system, network=network, remote_memory=remote_memory,
                       logical_topology=logical_topology, comm_groups=comm_groups)
    inputs = with_overrides(read_inputs(paths), dict(parse_set(set_)))
    backend_cls = BACKENDS.get(backend)
    sim = Simulation(inputs.workload, inputs.topology, backend_cls(inputs.topology, inputs.params), inputs.settings)
    caveat = fast_tier_caveat(backend, inputs.params, sim.multi_dimensional)
    fast_forward.attach(sim)
    ranks = sim.run()
    if caveat:
        typer.echo(caveat, err=True)
    if as_json:
        typer.echo(json.dumps({
            "backend": backend, "network": inputs.network_kind, "workload": str(paths.workload),
            "ranks": [{"rank": r, "wall_s": t.wall_s, "gpu_s": t.gpu_s, "comm_s": t.comm_s} for r, t in enumerate(ranks)],
            "wall_s": max(t.wall_s for t in ranks), **({"caveat": caveat} if caveat else {}),
        }, sort_keys=True))
        return
    for r, t in enumerate(ranks):  # ASTRA-sim's report line (docs/reference-semantics.md B.7)
        finish = round(t.wall_s * 1e9)
        typer.echo(f"sys[{r}] finished, {finish} cycles, exposed communication {finish - round(t.gpu_s * 1e9)} cycles.")


def register(app: typer.Typer) -> None:
    """Add ``moesim astra``."""
    app.add_typer(astra_app, name="astra")
