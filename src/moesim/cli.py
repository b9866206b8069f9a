"""The ``moesim`` command. Each command group lives in ``moesim.commands.<group>`` and registers itself here.

The command modules import only typer at load time and everything else inside the commands, so help,
listings and inspection answer without loading numba or the network backends.

Exit codes (docs/cli.md, "Exit codes"):

====  =========================================================================================
0     success
1     a sweep finished but some of its runs failed (they are listed; a rerun tries them again)
2     input error: a bad value, file, model, topology, matrix or store, or a required option or argument
      left out; one line on stderr
3     usage error: an unknown command or option, a malformed or extra argument (click's usage)
130   interrupted by Ctrl-C (SIGINT); 143: terminated by SIGTERM. A sweep keeps what it stored.
====  =========================================================================================
"""

from __future__ import annotations

import functools
import os
import sys
from typing import Any

import typer
import typer.main

from moesim.commands import COMMAND_MODULES
from moesim.errors import MoesimError

EXIT_OK = 0
COMPLETE_VAR = "_MOESIM_COMPLETE"
"""Shell completion: ``eval "$(_MOESIM_COMPLETE=bash_source moesim)"`` (or ``zsh_source``, ``fish_source``)."""
EXIT_INPUT = 2
EXIT_USAGE = 3

app = typer.Typer(
    name="moesim",
    help="Simulate distributed Mixture-of-Experts inference: workloads, topologies, collectives, congestion control.",
    epilog="Exit codes: 0 ok, 1 some runs of a sweep failed, 2 input error, 3 usage error, 130/143 interrupted "
           "(docs/cli.md).",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _print_version(value: bool) -> None:
    if value:
        from moesim.version import __version__

        typer.echo(f"moesim {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(False, "--version", callback=_print_version, is_eager=True,
                                 help="Print the version and exit."),
) -> None:
    """The options of ``moesim`` itself (the help and the exit codes are the Typer app's help and epilog)."""


for _module in COMMAND_MODULES:
    _module.register(app)


def _error(message: str) -> None:
    print(f"moesim: error: {message}", file=sys.stderr)


def _os_error(exc: OSError) -> str:
    """An OSError as one line naming the file (the commands check their outputs first; this is the net)."""
    where = exc.filename if exc.filename is not None else ""
    reason = exc.strerror or str(exc)
    return f"{where}: {reason}" if where else reason


def _stdout_gone() -> None:
    """The reader of our standard output left (``moesim ... | head``): say nothing more, exit quietly."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except OSError:
        pass


def _click_error(exc: Exception) -> int | None:
    """click's own errors (typer's, whether click is vendored or not) carry ``show`` and ``exit_code``:
    2 for a usage error, 1 for another (e.g. a file click could not open). None for any other exception."""
    code = getattr(exc, "exit_code", None)
    if not callable(getattr(exc, "show", None)) or not isinstance(code, int):
        return None
    return code


@functools.cache
def _command() -> Any:
    """The click command of the app, built once (building it reads every command's signature)."""
    return typer.main.get_command(app)


def _complete(command: Any) -> None:
    """Shell completion (bash, zsh, fish): print the shell's script (``bash_source``) or the completions of
    the words in its variables (``bash_complete``), then exit. Typer's completion reads the instruction
    the other way round (``source_bash``); both spellings are taken."""
    from typer.completion import completion_init

    completion_init()
    shell, _, what = os.environ[COMPLETE_VAR].partition("_")
    if what in ("source", "complete"):
        os.environ[COMPLETE_VAR] = f"{what}_{shell}"
    command.main(args=[], prog_name="moesim", complete_var=COMPLETE_VAR)


def run_cli(args: list[str] | None = None) -> int:
    """Run the command line ``args`` (default: ``sys.argv[1:]``) and return its exit code; user errors
    become one line on stderr, never a traceback.

    The click command is invoked directly (not through typer's ``main``, which turns Ctrl-C into a silent
    exit 130), so an interrupted sweep can say what it stored.
    """
    from moesim.interrupts import exit_code, sigterm_as_interrupt

    command = _command()
    if COMPLETE_VAR in os.environ:
        _complete(command)
    try:
        with sigterm_as_interrupt():
            with command.make_context("moesim", list(sys.argv[1:] if args is None else args)) as ctx:
                code = command.invoke(ctx)
        return code if isinstance(code, int) else EXIT_OK
    except MoesimError as exc:
        _error(str(exc))
        return EXIT_INPUT
    except KeyboardInterrupt as exc:  # Ctrl-C, or SIGTERM (moesim.interrupts.Interrupted)
        message = str(exc) or "interrupted"
        print(message if message.startswith("interrupted") else f"moesim: {message}", file=sys.stderr)
        return exit_code(exc)
    except typer.Exit as exc:  # --help, --version
        return int(getattr(exc, "exit_code", 0) or 0)
    except typer.Abort:
        print("moesim: aborted", file=sys.stderr)
        return EXIT_INPUT
    except BrokenPipeError:
        _stdout_gone()
        return EXIT_OK
    except OSError as exc:  # a file the command could not read or write
        _error(_os_error(exc))
        return EXIT_INPUT
    except Exception as exc:
        code = _click_error(exc)
        if code is None:
            raise
        if type(exc).__name__ == "NoArgsIsHelpError":  # `moesim` or `moesim sweep` alone: the help, on stdout
            typer.echo(exc.format_message())  # type: ignore[attr-defined]
        elif type(exc).__name__ == "MissingParameter":  # a required input left out: one line, as any input error
            where = getattr(getattr(exc, "ctx", None), "command_path", "moesim")
            _error(f"{where}: {exc.format_message()} (see {where} -h)")  # type: ignore[attr-defined]
            return EXIT_INPUT
        else:
            exc.show()  # type: ignore[attr-defined]
        return EXIT_USAGE if code == 2 else EXIT_INPUT


def main() -> None:
    """Entry point of the ``moesim`` script and of ``python -m moesim``."""
    sys.exit(run_cli())


if __name__ == "__main__":
    main()
