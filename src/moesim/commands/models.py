"""`moesim models list|show` and `moesim residency`: the model catalog and weight residency on the command line."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from moesim.errors import MoesimError

if TYPE_CHECKING:
    from rich.console import Console

    from moesim.models.spec import ModelSpec

GB = 1_000_000_000
"""Decimal GB (moesim.models.residency.GB; not imported here so that help and listings stay fast)."""
DEFAULT_RANKS = 32
DEFAULT_CAPACITY_GB = 64.0

models_app = typer.Typer(
    help="The built-in model catalog (docs/models.md) and weight residency.", no_args_is_help=True
)


def _console() -> Console:
    """Rich console; a fixed wide width when not on a terminal so piped tables are not truncated."""
    from rich.console import Console

    return Console(width=None if sys.stdout.isatty() else 160)


def _gb(n: float) -> str:
    """Decimal GB, as many digits as needed up to 6 decimals (166.9, 5.215625, 48.75)."""
    return f"{n / GB:.6f}".rstrip("0").rstrip(".")


def _params(n: float | None) -> str:
    if n is None:
        return "-"
    return f"{n / 1e12:.3g}T" if n >= 1e12 else f"{n / 1e9:.3g}B"


def _bytes_from_gb(value: float, option: str) -> int:
    """Decimal GB → bytes, within the sizes residency accepts (``moesim.models.residency.BYTES``)."""
    from moesim.models.residency import BYTES
    from moesim.schema import Constraint, Param

    allowed = Constraint(low=BYTES.allowed.low / GB, high=BYTES.allowed.high / GB)  # type: ignore[operator]
    gb = Param(option, "residency", float, "GB", allowed).check(value, "command line")
    return round(gb * GB)


def _show_mapping(spec: ModelSpec) -> dict[str, Any]:
    from moesim.models.schema import spec_to_mapping

    out = spec_to_mapping(spec)
    out.update(moe_layers=spec.moe_layers, tp_proxy=spec.tp_proxy, ep_proxy=spec.ep_proxy)
    return out


@models_app.command("list")
def list_cmd(
    json_out: Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")] = False,
) -> None:
    """List the built-in models (study models first, marked with *)."""
    from rich.table import Table

    from moesim.models.catalog import STUDY_MODELS, list_models

    specs = list_models()
    if json_out:
        print(json.dumps([_show_mapping(s) for s in specs], indent=2))
        return
    table = Table(title="moesim models (* = study model, docs/study.md)")
    for col in ("key", "name", "h (comm)", "hidden", "layers", "dense", "experts", "top-k", "expert width",
                "params", "checkpoint GB"):  # fmt: skip
        table.add_column(col, no_wrap=col == "key", justify="left" if col in ("key", "name") else "right")
    for s in specs:
        table.add_row(
            s.key + (" *" if s.key in STUDY_MODELS else ""),
            s.name,
            str(s.comm_dim),
            str(s.hidden_size),
            str(s.num_layers),
            str(s.first_dense_layers),
            str(s.routed_experts),
            str(s.top_k),
            str(s.expert_ffn_width),
            _params(s.total_params),
            _gb(s.checkpoint_size_bytes) if s.checkpoint_size_bytes else "-",
        )
    _console().print(table)


@models_app.command("show")
def show_cmd(
    name: Annotated[str, typer.Argument(help="A catalog key, a model .yaml, or a Hugging Face config.json.")],
    json_out: Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")] = False,
) -> None:
    """Show every field of one model, plus its MoE layers and TP/EP communication proxies."""
    from rich.table import Table

    from moesim.models.catalog import get_model

    spec = get_model(name)
    data = _show_mapping(spec)
    if json_out:
        print(json.dumps(data, indent=2))
        return
    table = Table(title=f"{spec.name} ({spec.key})", show_header=True)
    table.add_column("field", no_wrap=True)
    table.add_column("value")
    for key, value in data.items():
        if key == "attention":
            for akey, avalue in value.items():
                table.add_row(f"attention.{akey}", "-" if avalue is None else str(avalue))
        elif key == "notes":
            for i, note in enumerate(value):
                table.add_row("notes" if i == 0 else "", note)
        else:
            table.add_row(key, "-" if value is None else str(value))
    _console().print(table)


def residency_cmd(
    models: Annotated[
        list[str] | None,
        typer.Argument(
            help="Catalog keys, model files or checkpoint directories (default: the four study models)."
        ),
    ] = None,
    checkpoint: Annotated[
        Path | None,
        typer.Option("--checkpoint", help="Size from this checkpoint (directory, *.safetensors or index)."),
    ] = None,
    size_gb: Annotated[
        float | None, typer.Option("--size-gb", help="Stated checkpoint size in decimal GB.")
    ] = None,
    ranks: Annotated[
        int, typer.Option("--ranks", help="Ranks the weights are evenly sharded over.")
    ] = DEFAULT_RANKS,
    capacity_gb: Annotated[
        float, typer.Option("--capacity-gb", help="Memory per accelerator, decimal GB.")
    ] = DEFAULT_CAPACITY_GB,
    redundant_experts: Annotated[
        int, typer.Option("--redundant-experts", min=0,
                          help="Replicas of routed experts per MoE layer (EPLB; 1 byte per parameter).")
    ] = 0,
    dp_groups: Annotated[
        int, typer.Option("--dp-groups", min=1,
                          help="Data-parallel attention groups (DP<d>EP<e>: d): each holds the weights outside "
                               "the routed experts.")
    ] = 1,
    json_out: Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")] = False,
) -> None:
    """Per-rank weight requirement (checkpoint size / ranks) against a per-accelerator capacity (weights only)."""
    from rich.table import Table

    from moesim.models.catalog import STUDY_MODELS, get_model
    from moesim.models.residency import (
        WEIGHTS_ONLY_NOTE,
        ResidencyReport,
        checkpoint_residency,
        residency,
        residency_for,
    )

    refs = list(models or [])
    if checkpoint is not None and size_gb is not None:
        raise MoesimError(
            "command line: options '--checkpoint' and '--size-gb' are exclusive (give one size)"
        )
    if (checkpoint is not None or size_gb is not None) and len(refs) > 1:
        raise MoesimError("command line: '--checkpoint' / '--size-gb' give one size: name at most one model")
    if (redundant_experts or dp_groups > 1) and (checkpoint is not None or size_gb is not None):
        raise MoesimError("command line: '--redundant-experts' and '--dp-groups' need a model's expert shapes: name "
                          "the model without '--checkpoint' / '--size-gb'")
    capacity = _bytes_from_gb(capacity_gb, "--capacity-gb")
    label = get_model(refs[0]).key if refs and (checkpoint is not None or size_gb is not None) else None
    reports: list[ResidencyReport]
    if checkpoint is not None:
        reports = [checkpoint_residency(checkpoint, ranks=ranks, capacity_bytes=capacity, label=label)]
    elif size_gb is not None:
        reports = [
            residency(
                _bytes_from_gb(size_gb, "--size-gb"),
                ranks=ranks,
                capacity_bytes=capacity,
                source=f"stated size --size-gb {size_gb:g}",
                label=label or "stated",
            )
        ]
    else:
        reports = [residency_for(r, ranks=ranks, capacity_bytes=capacity, redundant_experts=redundant_experts,
                                 dp_groups=dp_groups) for r in (refs or STUDY_MODELS)]
    if json_out:
        print(json.dumps([r.to_dict() for r in reports], indent=2))
        return
    sharding = "even sharding" if dp_groups == 1 else f"{dp_groups} data-parallel attention groups"
    table = Table(title=f"Weight residency ({sharding}, decimal GB)", caption=WEIGHTS_ONLY_NOTE)
    for col in ("model", "checkpoint GB", "ranks", "per-rank GB", "capacity GB", "fits", "source"):
        table.add_column(col, justify="right" if "GB" in col or col == "ranks" else "left")
    for r in reports:
        table.add_row(
            r.label,
            _gb(r.total_bytes),
            str(r.ranks),
            _gb(r.per_rank_bytes),
            _gb(r.capacity_bytes),
            "yes" if r.fits else "NO",
            r.source,
        )
    _console().print(table)


def register(app: typer.Typer) -> None:
    """Add this group's commands to the root app."""
    app.add_typer(models_app, name="models")
    app.command("residency")(residency_cmd)
