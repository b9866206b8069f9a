"""`moesim place`: search rank → GPU mappings for one configuration and report the best against the default."""

from __future__ import annotations

import json
import sys
from typing import Any

import typer

from moesim.commands.run import normal_strategy, parse_set
from moesim.schema import default_of
from moesim.system.spec import RunSpec


def _gb(nbytes: float) -> str:
    return f"{nbytes / 1e9:.2f} GB"


def _why(result: Any, top: int = 4) -> list[str]:
    """The balance bounds, and the fabric bytes of the busiest NICs under the default and the best mapping."""
    before, after = result.traffic_default.nic_bytes(), result.traffic_best.nic_bytes()
    lines = [f"  balance bound {result.default.bound_s:.6f} s → {result.best.bound_s:.6f} s "
             "(Σ per collective of its busiest link's bytes / bandwidth)"]
    if not before:
        return [*lines, "  no NICs: all traffic stays inside the server"]
    peak = [max(v[0] for v in side.values()) for side in (before, after)]
    lines.append(f"  busiest NIC sends {_gb(peak[0])} → {_gb(peak[1])} into the fabric over the run")
    busiest = sorted(before, key=lambda n: (-max(*before[n], *after[n]), n))[:top]
    lines += [f"    {n}: sends {_gb(before[n][0])} → {_gb(after[n][0])}, receives {_gb(before[n][1])} → "
              f"{_gb(after[n][1])}" for n in sorted(busiest)]
    return lines


def _record(result: Any) -> dict[str, Any]:
    def one(s: Any) -> dict[str, Any]:
        return {"origin": s.origin, "placement": list(s.rank_to_gpu), "bound_s": s.bound_s, "wall_s": s.wall_s,
                "comm_s": s.result.comm_s if s.result is not None else None}

    return {"default": one(result.default), "best": one(result.best), "gain": result.gain,
            "evaluated": result.evaluated, "skipped_symmetric": result.skipped_symmetric, "pruned": result.pruned,
            "exhausted": result.exhausted, "symmetry_classes": list(result.symmetry_classes),
            "rescored": [{"placement": list(s.rank_to_gpu), "origin": s.origin, "backend": r.backend,
                          "wall_s": r.wall_s} for s, r in result.rescored],
            "rescored_gain": result.rescored_gain, "elapsed_s": result.elapsed_s,
            "nic_bytes": {"default": result.traffic_default.nic_bytes(), "best": result.traffic_best.nic_bytes()}}


def register(app: typer.Typer) -> None:
    """Add ``moesim place``."""

    @app.command("place")
    def place(
        model: str = typer.Option(..., "--model", help="model key (moesim models list) or a YAML/config.json path"),
        topology: str = typer.Option(..., "--topology", help="study topology 1..6, a server template (hgx-h100:4, mi300x:4:ls3, gb200-nvl72) or a topology YAML path"),
        strategy: str = typer.Option(..., "--strategy", help="TP<n>EP<m>, e.g. TP16EP2"),
        algorithm: str = typer.Option(default_of(RunSpec, "algorithm"), "--algorithm", help="ring_direct | dbt_direct"),
        network: str = typer.Option(default_of(RunSpec, "network"), "--network", help="ib_cc0 | ib_hpcc | roce_hpcc | roce_dcqcn"),
        backend: str = typer.Option("flow", "--backend", help="backend that scores candidates: flow (default) or fluid"),
        rescore: str = typer.Option(default_of(RunSpec, "backend"), "--rescore", help="backend that re-scores the best few and the "
                                                              "default before the report: fluid | packet | none"),
        top: int = typer.Option(3, "--top", min=1, help="how many of the best mappings to re-score"),
        evaluations: int = typer.Option(64, "--evaluations", min=1, help="simulations on the scoring backend"),
        time_s: float = typer.Option(None, "--time", help="stop proposing after this many seconds"),
        seed: int = typer.Option(0, "--seed", min=0, help="seed of the proposals (same seed, same search)"),
        set_: list[str] = typer.Option(None, "--set", help="parameter override key=value (repeatable)"),
        executor: str = typer.Option("local", "--executor", help="local | ray | dask (moesim plugins)"),
        workers: int = typer.Option(None, "--workers", min=1, help="parallel simulations (default: one per CPU; "
                                                                   "1 simulates in this process)"),
        address: str = typer.Option(None, "--address", help="cluster address for --executor ray/dask"),
        out: str = typer.Option(None, "--out", help="write the best mapping as a JSON rank → GPU list"),
        as_json: bool = typer.Option(False, "--json", help="print one JSON object"),
        quiet: bool = typer.Option(False, "--quiet", help="no progress lines on stderr"),
    ) -> None:
        """Search rank → GPU mappings; print the best found against the default and why it wins."""
        from moesim.experiments.placement_search import SearchSpec, search_placement
        from moesim.fileio import output_file, write_output
        from moesim.system.spec import RunSpec

        if out is not None:
            out = output_file(out, "--out")
        spec = RunSpec(model, topology, normal_strategy(strategy), algorithm, network, backend, parse_set(set_))
        search = SearchSpec(spec, evaluations=evaluations, time_s=time_s, seed=seed,
                            rescore_backend=None if rescore == "none" else rescore, rescore_top=top,
                            batch=max(4, 2 * (workers or 2)))

        def progress(done: int, budget: int, best_s: float) -> None:
            if not quiet:
                print(f"placement search: {done}/{budget} evaluated, best wall {best_s:.6f} s", file=sys.stderr)

        result = search_placement(search, executor=executor, workers=workers, address=address, progress=progress)
        if out is not None:
            write_output(out, json.dumps(list(result.best.rank_to_gpu)) + "\n")
        if as_json:
            typer.echo(json.dumps(_record(result), sort_keys=True))
            return
        servers, slots = result.symmetry_classes
        typer.echo(f"{model}  topology {topology}  {spec.strategy}  {algorithm}  {network}  (scored on {backend})")
        stop = "no new neighbour of the best few could beat it" if result.exhausted else "budget reached"
        typer.echo(f"  {result.evaluated} mappings simulated, {result.skipped_symmetric} skipped as equivalent "
                   f"({servers} server classes, {slots} GPU slot classes), {result.pruned} pruned by the balance "
                   f"bound; stopped: {stop} ({result.elapsed_s:.1f} s)")
        d, b = result.default, result.best
        typer.echo(f"  default (contiguous): wall {d.wall_s:.6f} s")
        typer.echo(f"  best ({b.origin}): wall {b.wall_s:.6f} s, {100 * result.gain:.1f} % faster")
        typer.echo(f"  mapping (rank → GPU; moesim run --placement takes it): {b.inline}")
        for line in _why(result):
            typer.echo(line)
        if result.rescored:
            gain = result.rescored_gain or 0.0
            r_best, r_run = result.rescored[0]
            typer.echo(f"  re-scored on {r_run.backend}: best {r_run.wall_s:.6f} s ({r_best.origin}), "
                       f"{100 * gain:.1f} % faster than the default there")
        if out is not None:
            typer.echo(f"  wrote {out}")
