"""`moesim` commands of the run group."""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    """Add this group's commands to the root app."""
