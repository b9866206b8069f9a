"""`moesim run`: simulate one configuration and print a summary or one JSON object."""

from __future__ import annotations

import json
from typing import Any

import typer

from moesim.errors import MoesimError


def parse_set(items: list[str] | None) -> tuple[tuple[str, Any], ...]:
    """``--set key=value`` pairs; values are parsed as JSON when possible (numbers, booleans)."""
    out: dict[str, Any] = {}
    for item in items or []:
        if "=" not in item:
            raise MoesimError(f"--set '{item}': expected key=value")
        key, raw = item.split("=", 1)
        try:
            value: Any = json.loads(raw)
        except json.JSONDecodeError:
            value = raw
        out[key.strip()] = value
    return tuple(sorted(out.items()))


def register(app: typer.Typer) -> None:
    """Add ``moesim run``."""

    @app.command("run")
    def run(
        model: str = typer.Option(..., "--model", help="model key (moesim models list) or a YAML/config.json path"),
        topology: str = typer.Option(..., "--topology", help="study topology 1..6 or a topology YAML path"),
        strategy: str = typer.Option(..., "--strategy", help="TP<n>EP<m>, e.g. TP2EP16"),
        algorithm: str = typer.Option("ring_direct", "--algorithm", help="ring_direct | dbt_direct"),
        network: str = typer.Option("ib_cc0", "--network", help="ib_cc0 | ib_hpcc | roce_hpcc | roce_dcqcn"),
        backend: str = typer.Option("flow", "--backend", help="network backend (flow, analytical, ...)"),
        set_: list[str] = typer.Option(None, "--set", help="parameter override key=value (repeatable)"),
        as_json: bool = typer.Option(False, "--json", help="print one JSON object"),
    ) -> None:
        """Simulate one configuration (one deterministic prefill pass)."""
        from moesim.system.run import simulate_run
        from moesim.system.spec import RunSpec

        spec = RunSpec(model, topology, strategy, algorithm, network, backend, parse_set(set_))
        result = simulate_run(spec)
        record = result.summary()
        if as_json:
            typer.echo(json.dumps(record, sort_keys=True))
            return
        typer.echo(f"{model}  topology {topology}  {strategy}  {algorithm}  {network}")
        typer.echo(f"  wall {result.wall_s:.6f} s   GPU {result.gpu_s:.6f} s   comm {result.comm_s:.6f} s"
                   f"   (bottleneck rank {result.bottleneck_rank})")
        typer.echo(f"  backend {result.backend}; congestion control: {result.cc_model}; policy: {result.cc_policy}")
        typer.echo(f"  simulated in {result.sim_wallclock_s:.2f} s (moesim {result.version})")

    @app.command("export")
    def export(
        model: str = typer.Option(..., "--model"),
        topology: str = typer.Option(..., "--topology"),
        strategy: str = typer.Option(..., "--strategy"),
        algorithm: str = typer.Option("ring_direct", "--algorithm"),
        network: str = typer.Option("ib_cc0", "--network"),
        set_: list[str] = typer.Option(None, "--set", help="parameter override key=value (repeatable)"),
        out: str = typer.Option(..., "--out", help="output directory"),
    ) -> None:
        """Write one run as an ASTRA-sim 2.0 input directory (ET files, system/network configs, README)."""
        from moesim.system.export import export_run
        from moesim.system.spec import RunSpec

        files = export_run(RunSpec(model, topology, strategy, algorithm, network, "flow", parse_set(set_)), out)
        typer.echo(f"wrote {len(files)} files to {out} (see {out}/README.md for the ASTRA-sim command)")
