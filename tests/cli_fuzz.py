"""Running the real entry point (moesim.cli.main) inside a hypothesis example, and the contract every
input must meet: a result (exit 0) or one line on stderr with exit 2, never a traceback."""

from __future__ import annotations

import contextlib
import io
import sys

from moesim import cli


def run_cli(*args: str) -> tuple[int, str, str]:
    """(exit code, stdout, stderr) of ``moesim ARGS``; any exception other than SystemExit propagates."""
    out, err = io.StringIO(), io.StringIO()
    saved = sys.argv
    sys.argv = ["moesim", *args]
    code = 0
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            cli.main()
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    finally:
        sys.argv = saved
    return code, out.getvalue(), err.getvalue()


def assert_result_or_one_line_error(code: int, stderr: str) -> None:
    assert "Traceback" not in stderr, stderr
    assert code in (0, 2), (code, stderr)
    if code == 2:
        assert stderr.startswith("moesim: error: ") and stderr.count("\n") == 1, stderr
