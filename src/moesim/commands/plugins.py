"""`moesim plugins`: every registered variant of every pluggable kind, with its description and reference."""

from __future__ import annotations

import json
import sys
from importlib import import_module
from typing import Annotated

import typer

from moesim.errors import MoesimError

KINDS: tuple[tuple[str, str, str], ...] = (
    # kind, module whose import registers every variant, registry attribute
    ("backends", "moesim.network", "BACKENDS"),
    ("cc", "moesim.network.cc", "CC_ALGORITHMS"),
    ("collectives", "moesim.system.collectives", "COLLECTIVES"),
    ("topologies", "moesim.topology", "TOPOLOGIES"),
    ("server-templates", "moesim.topology", "SERVER_TEMPLATES"),
    ("gpu-models", "moesim.topology.gpus", "GPU_MODELS"),
    ("gpu-domains", "moesim.topology.domains", "GPU_DOMAINS"),
    ("fabrics", "moesim.topology.fabrics", "FABRICS"),
    ("placement-rules", "moesim.topology.placement", "PLACEMENT_RULES"),
    ("generators", "moesim.workload.generator", "GENERATORS"),
    ("hf-families", "moesim.models.hf_families", "HF_FAMILIES"),
    ("executors", "moesim.experiments.executors", "EXECUTORS"),
    ("progress", "moesim.experiments.progress", "PROGRESS"),
    ("serving-policies", "moesim.serving.policies", "POLICIES"),
    ("serving-routers", "moesim.serving.routing", "ROUTERS"),
)
"""Each pluggable kind and where its registry lives (moesim.registry.Registry, one per kind)."""


def registered(kinds: list[str] | None = None) -> dict[str, list[dict[str, str]]]:
    """kind → its variants as ``{name, description, reference}``, for ``kinds`` (default: all)."""
    names = [k for k, _, _ in KINDS]
    for kind in kinds or []:
        if kind not in names:
            raise MoesimError(f"command line: plug-in kind '{kind}': unknown (allowed: {', '.join(names)})")
    out: dict[str, list[dict[str, str]]] = {}
    for kind, module, attr in KINDS:
        if kinds and kind not in kinds:
            continue
        registry = getattr(import_module(module), attr)
        out[kind] = [{"name": e.name, "description": e.description, "reference": e.reference} for e in registry]
    return out


def plugins_cmd(
    kinds: Annotated[list[str] | None, typer.Argument(
        help=f"kinds to list (default: all): {', '.join(k for k, _, _ in KINDS)}", show_default=False)] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON: kind → [{name, description, reference}].")] = False,
) -> None:
    """List every registered plug-in: network backends, congestion control, collectives, topologies, server
    templates, GPU domains, fabrics, placement rules, workload generators, Hugging Face families, executors,
    progress displays and serving scheduling policies."""
    data = registered(kinds)
    if as_json:
        typer.echo(json.dumps(data, indent=1))
        return
    from rich.console import Console
    from rich.table import Table

    console = Console(width=None if sys.stdout.isatty() else 200)
    for kind, rows in data.items():
        table = Table(title=kind, title_justify="left")
        for col in ("name", "description", "reference"):
            table.add_column(col, no_wrap=col == "name")
        for row in rows:
            table.add_row(row["name"], row["description"], row["reference"])
        console.print(table)


def register(app: typer.Typer) -> None:
    """Add ``moesim plugins``."""
    app.command("plugins")(plugins_cmd)
