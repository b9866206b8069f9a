"""The ``moesim`` command. Each command group lives in ``moesim.commands.<group>`` and registers itself here."""

from __future__ import annotations

import sys

import typer

from moesim.commands import COMMAND_MODULES
from moesim.errors import MoesimError

app = typer.Typer(
    name="moesim",
    help="Simulate distributed Mixture-of-Experts inference: workloads, topologies, collectives, congestion control.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

for _module in COMMAND_MODULES:
    _module.register(app)


def main() -> None:
    """Entry point: user errors become one line on stderr and exit code 2, never a traceback."""
    try:
        code = app(standalone_mode=False)
        if isinstance(code, int) and code:
            sys.exit(code)
    except MoesimError as exc:
        print(f"moesim: error: {exc}", file=sys.stderr)
        sys.exit(2)
    except (typer.Abort, KeyboardInterrupt):
        print("moesim: aborted", file=sys.stderr)
        sys.exit(130)
    except SystemExit:
        raise
    except Exception as exc:  # click/typer usage errors arrive here with standalone_mode=False
        show = getattr(exc, "show", None)
        if callable(show) and type(exc).__name__.endswith(("UsageError", "BadParameter", "ClickException",
                                                           "MissingParameter", "NoSuchOption", "BadOptionUsage")):
            show()
            sys.exit(2)
        raise


if __name__ == "__main__":
    main()
