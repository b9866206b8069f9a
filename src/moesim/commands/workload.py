"""`moesim workload ...`: generate MoE prefill workloads, export them as Chakra ET, inspect ET files."""

from __future__ import annotations

import json
import time
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from moesim.errors import MoesimError, input_error

if TYPE_CHECKING:
    from moesim.workload.graph import Workload
    from moesim.workload.summary import WorkloadSummary

STUDY_TOKENS = 4096
"""moesim.workload.options.STUDY_TOKENS, repeated so that help does not load the workload layer (tested)."""
COLLECTIVE_ADDRESSING = ("dims", "groups")
"""moesim.workload.options.COLLECTIVE_ADDRESSING (tested to agree)."""

EXPORT_FORMATS = ("chakra",)

workload_app = typer.Typer(
    name="workload",
    help="Generate MoE prefill workloads (docs/study.md §3), export them as Chakra ET, inspect ET files.",
    no_args_is_help=True,
)


def _fmt_bytes(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if abs(n) < 1000 or unit == "TB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.3f} {unit}"
        n /= 1000
    raise AssertionError  # unreachable


def _build(
    model: str | None,
    strategy: str | None,
    tokens: int,
    ranks: int | None,
    addressing: str,
    weight_bytes: float,
    expert_bytes: float,
    generator: str,
) -> Workload:
    from moesim.models.catalog import get_model
    from moesim.workload.generator import GENERATORS
    from moesim.workload.layout import ParallelLayout
    from moesim.workload.options import STUDY_STRATEGIES, WorkloadOptions

    if not model:
        raise input_error("moesim workload", "--model", "is required (or use --study)")
    if not strategy:
        raise input_error("moesim workload", "--strategy", "is required, e.g. TP4EP8", STUDY_STRATEGIES)
    options = WorkloadOptions(
        weight_bytes_per_param=weight_bytes,
        expert_bytes_per_param=expert_bytes,
        num_ranks=ranks,
        collective_addressing=addressing,
    )
    return GENERATORS.get(generator)(get_model(model), ParallelLayout.parse(strategy), tokens, options)


def _print_summary(s: WorkloadSummary, wl: Workload) -> None:
    r0 = s.ranks[0]
    uniform = all(r.__dict__ | {"rank": 0} == r0.__dict__ | {"rank": 0} for r in s.ranks)
    typer.echo(
        f"workload {s.name}: {s.num_ranks} ranks, logical dims {list(s.logical_dims)}, "
        f"{s.comm_groups} communicator groups"
    )
    kinds = Counter(
        (n.kind.value if n.collective is None else n.collective.name, n.size_bytes)
        for n in wl.graphs[0].nodes
    )
    typer.echo(
        "rank 0 nodes: "
        + ", ".join(
            f"{name}{f' {size} B' if size else ''} ×{count}" for (name, size), count in sorted(kinds.items())
        )
    )
    label = "every rank" if uniform else "rank 0 (ranks differ)"
    typer.echo(
        f"{label}: {r0.nodes} nodes ({r0.compute_nodes} compute, {r0.collective_nodes} collective), "
        f"{r0.flops:.4g} FLOPs, {_fmt_bytes(r0.bytes_moved)} moved, TP (all-reduce) {_fmt_bytes(r0.tp_bytes)}, "
        f"EP (all-to-all) {_fmt_bytes(r0.ep_bytes)}, roofline GPU estimate {r0.gpu_s_estimate:.6f} s"
    )
    typer.echo(
        f"all ranks: TP {_fmt_bytes(s.tp_bytes)}, EP {_fmt_bytes(s.ep_bytes)}, {s.flops:.4g} FLOPs, "
        f"slowest-rank GPU estimate {s.gpu_s_estimate:.6f} s"
    )


def _study(tokens: int, as_json: bool) -> None:
    from rich.console import Console
    from rich.table import Table

    from moesim.models.catalog import STUDY_MODELS, get_model
    from moesim.workload.costs import comm_proxies
    from moesim.workload.generator import GENERATORS
    from moesim.workload.layout import ParallelLayout
    from moesim.workload.options import STUDY_RANKS, STUDY_STRATEGIES, WorkloadOptions
    from moesim.workload.summary import summary

    start = time.perf_counter()
    rows: list[dict[str, Any]] = []
    for key in STUDY_MODELS:
        model = get_model(key)
        tp_proxy, ep_proxy = comm_proxies(model)
        for strategy in STUDY_STRATEGIES:
            wl = GENERATORS.get("moe_prefill")(
                model, ParallelLayout.parse(strategy), tokens, WorkloadOptions(num_ranks=STUDY_RANKS)
            )
            s = summary(wl)
            r0 = s.ranks[0]
            rows.append(
                {
                    "model": key,
                    "strategy": strategy,
                    "ranks": s.num_ranks,
                    "nodes_per_rank": r0.nodes,
                    "tp_bytes_per_rank": r0.tp_bytes,
                    "ep_bytes_per_rank": r0.ep_bytes,
                    "flops_per_rank": r0.flops,
                    "gpu_s_estimate": s.gpu_s_estimate,
                    "tp_proxy": tp_proxy,
                    "ep_proxy": ep_proxy,
                }
            )
    if as_json:
        typer.echo(json.dumps(rows, indent=1))
        return
    table = Table(
        title=f"Study workloads: {len(STUDY_MODELS)} models × {len(STUDY_STRATEGIES)} strategies, "
        f"T = {tokens} tokens, {STUDY_RANKS} ranks"
    )
    for col in (
        "model",
        "strategy",
        "nodes/rank",
        "TP bytes/rank",
        "EP bytes/rank",
        "FLOPs/rank",
        "GPU est. (s)",
        "TP proxy",
        "EP proxy",
    ):
        table.add_column(col, justify="left" if col in ("model", "strategy") else "right")
    for r in rows:
        table.add_row(
            r["model"],
            r["strategy"],
            str(r["nodes_per_rank"]),
            _fmt_bytes(r["tp_bytes_per_rank"]),
            _fmt_bytes(r["ep_bytes_per_rank"]),
            f"{r['flops_per_rank']:.4g}",
            f"{r['gpu_s_estimate']:.6f}",
            f"{r['tp_proxy']:,}",
            f"{r['ep_proxy']:,}",
        )
    Console(width=160).print(table)
    typer.echo(
        f"generated {len(rows)} workloads in {time.perf_counter() - start:.2f} s "
        "(GPU est. = summed roofline at 1 PFLOP/s, 1.6 TB/s; no communication)"
    )


_MODEL = typer.Option(
    None, "--model", help="model key (see `moesim models list`) or a model YAML / config.json path"
)
_STRATEGY = typer.Option(None, "--strategy", help="parallel strategy TP<n>EP<m>, e.g. TP4EP8")
_TOKENS = typer.Option(STUDY_TOKENS, "--tokens", help="tokens of the prefill pass")
_RANKS = typer.Option(None, "--ranks", help="require TP × EP to equal this rank count (the study: 32)")
_ADDRESSING = typer.Option(
    "dims", "--addressing", help=f"how collectives name their ranks: {' | '.join(COLLECTIVE_ADDRESSING)}"
)
_WEIGHT_BYTES = typer.Option(1.0, "--weight-bytes", help="bytes per attention/dense/shared weight (FP8 = 1)")
_EXPERT_BYTES = typer.Option(0.5, "--expert-bytes", help="bytes per routed-expert weight (FP4 = 0.5)")
_GENERATOR = typer.Option("moe_prefill", "--generator", help="workload generator (registry name)")


@workload_app.command("generate")
def generate_cmd(
    model: str | None = _MODEL,
    strategy: str | None = _STRATEGY,
    tokens: int = _TOKENS,
    ranks: int | None = _RANKS,
    addressing: str = _ADDRESSING,
    weight_bytes: float = _WEIGHT_BYTES,
    expert_bytes: float = _EXPERT_BYTES,
    generator: str = _GENERATOR,
    study: bool = typer.Option(False, "--study", help="all four study models × four strategies, as a table"),
    as_json: bool = typer.Option(False, "--json", help="print JSON instead of text"),
) -> None:
    """Generate a workload and print its summary (node counts, TP/EP bytes, FLOPs)."""
    from moesim.workload.summary import summary

    if study:
        if model or strategy:
            raise MoesimError("moesim workload generate: --study cannot be combined with --model/--strategy")
        _study(tokens, as_json)
        return
    wl = _build(model, strategy, tokens, ranks, addressing, weight_bytes, expert_bytes, generator)
    s = summary(wl)
    if as_json:
        typer.echo(json.dumps(s.to_dict(), indent=1))
    else:
        _print_summary(s, wl)


@workload_app.command("export")
def export_cmd(
    out: Path = typer.Option(..., "--out", help="output directory"),
    model: str | None = _MODEL,
    strategy: str | None = _STRATEGY,
    fmt: str = typer.Option("chakra", "--format", help=f"output format: {', '.join(EXPORT_FORMATS)}"),
    prefix: str | None = typer.Option(
        None, "--prefix", help="file prefix (default <model>_<strategy>_T<tokens>)"
    ),
    tokens: int = _TOKENS,
    ranks: int | None = _RANKS,
    addressing: str = _ADDRESSING,
    weight_bytes: float = _WEIGHT_BYTES,
    expert_bytes: float = _EXPERT_BYTES,
    generator: str = _GENERATOR,
) -> None:
    """Write a workload as Chakra ET files (one per rank) plus communicator-group and logical-topology JSONs."""
    from moesim.fileio import check_output_folder
    from moesim.workload.chakra import comm_groups_path, logical_topology_path, write_et

    if fmt not in EXPORT_FORMATS:
        raise input_error("moesim workload export", "--format", f"unknown format '{fmt}'", EXPORT_FORMATS)
    check_output_folder(out)
    wl = _build(model, strategy, tokens, ranks, addressing, weight_bytes, expert_bytes, generator)
    name = prefix or wl.name
    paths = write_et(wl, out, name)
    typer.echo(
        f"wrote {len(paths)} Chakra ET files {out / name}.{{0..{len(paths) - 1}}}.et, "
        f"{comm_groups_path(out, name).name} and {logical_topology_path(out, name).name}"
    )
    typer.echo(
        f"ASTRA-sim: --workload-configuration={out / name} "
        f"--comm-group-configuration={comm_groups_path(out, name)}"
    )


@workload_app.command("inspect")
def inspect_cmd(
    path: Path = typer.Argument(
        ..., help="a directory, a <dir>/<prefix> path or one <prefix>.<rank>.et file"
    ),
    as_json: bool = typer.Option(False, "--json", help="print JSON instead of text"),
) -> None:
    """Summarise Chakra ET files (moesim's own or other tools', e.g. ASTRA-sim's microbenchmarks)."""
    from moesim.workload.chakra import read_et
    from moesim.workload.graph import NodeKind
    from moesim.workload.summary import summary

    wl = read_et(path)
    s = summary(wl)
    if as_json:
        typer.echo(json.dumps(s.to_dict(), indent=1))
        return
    _print_summary(s, wl)
    grouped = sum(1 for g in wl.graphs for n in g.nodes if n.kind is NodeKind.COLLECTIVE and n.group)
    if grouped:
        typer.echo(f"{grouped} collective nodes address communicator groups (pg_name)")


def register(app: typer.Typer) -> None:
    """Add the `workload` sub-app to the root app."""
    app.add_typer(workload_app, name="workload")
