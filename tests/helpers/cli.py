"""The one way to run the command line in a test (in-process, or as a `python -m nmt` child) and to check a
refusal as the user sees it."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from typer.testing import CliRunner, Result

from nmt.cli.main import main

from .paths import ROOT

# The exit statuses of a refusal (nmt.cli.main): the command's own (a user mistake: nmt.errors.NmtError or an
# OSError, caught by user_errors) and the option parser's (a bad option value, an unknown option or command,
# turned into an `error:` line by main). Either way stderr gets one `error:` line and no traceback.
USER_ERROR = 1
USAGE_ERROR = 2


def run_cli(*args: str | Path, input: bytes | str | None = None) -> Result:
    """`nmt ARGS` in-process: nmt.cli.main.main, the entry point of `nmt` and `python -m nmt`, with stdin fed from
    `input` and stdout and stderr captured apart (Typer's CliRunner isolation). Monkeypatched faults reach
    it; an exception that escapes main is kept in `result.exception`, as CliRunner.invoke keeps it."""
    runner = CliRunner()
    with runner.isolation(input=input) as (stdout, stderr, output):
        exit_code, exception, exc_info = 0, None, None
        try:
            main([str(a) for a in args])
        except SystemExit as e:
            exit_code = e.code if isinstance(e.code, int) else 0 if e.code is None else 1
            exception, exc_info = (e, sys.exc_info()) if exit_code else (None, None)
        except Exception as e:
            exit_code, exception, exc_info = 1, e, sys.exc_info()
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
        return Result(runner, stdout.getvalue(), stderr.getvalue(), output.getvalue(), None, exit_code,
                      exception, exc_info)


def nmt_env(**extra: str) -> dict[str, str]:
    """The environment of an nmt child process: this checkout's nmt, one OpenMP thread, then `extra`. It
    carries CUDA_VISIBLE_DEVICES="" (no GPU) except in tests marked gpu (see "no CUDA unless marked gpu" in
    tests/conftest.py). A PYTHONPATH the tests run with stays after the checkout (packages installed with pip
    --target)."""
    return {**os.environ, "PYTHONPATH": python_path(), "OMP_NUM_THREADS": "1", **extra}


def python_path() -> str:
    """This checkout first, then the PYTHONPATH this process was given."""
    return os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))


def nmt_process(*args: str, stdin: bytes | None = None, cwd: Path | None = None, entry: Sequence[str] = ("-m", "nmt"),
                timeout: float = 300, **env: str) -> subprocess.CompletedProcess:
    """`python -m nmt ARGS` (or `python ENTRY ARGS`) run to its end as a separate process, for what needs
    one: the real start-up, environment variables read at import, a module blocked before nmt loads."""
    return subprocess.run([sys.executable, *entry, *args], cwd=cwd, input=stdin, capture_output=True,
                          env=nmt_env(**env), timeout=timeout)


def assert_one_line_error(result: Result | subprocess.CompletedProcess, *fragments: str,
                          exit_code: int = USER_ERROR) -> str:
    """A refusal as the user sees it: exit status `exit_code`, no traceback (nor an exception escaping the
    CLI), and exactly one `error:` line on stderr, the last one, holding every fragment. Lines a command
    printed before it failed (training's log) may precede it. Returns the error line."""
    if isinstance(result, subprocess.CompletedProcess):
        code, err = result.returncode, result.stderr.decode(errors="replace")
    else:
        assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
        code, err = result.exit_code, result.stderr
    errors = [line for line in err.splitlines() if line.startswith("error: ")]
    assert code == exit_code and "Traceback" not in err and len(errors) == 1, f"exit {code}:\n{err[-3000:]}"
    assert err.splitlines()[-1] == errors[0], f"more after the error line:\n{err[-3000:]}"
    for fragment in fragments:
        assert fragment in errors[0], errors[0]
    return errors[0]
