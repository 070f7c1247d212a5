"""What a person reads when a command stops: the exit codes and the one-line error message.

A user error (a flag, the config, an input, the output directory, the date) is a `ValueError`
or an `OSError` whose message says what is wrong and how to fix it; the command prints it as
one line, `tfrecord-etl: error: ...`, on stderr, and the traceback only with `--debug`.
Anything else is a fault of the program and keeps its traceback. The catalogue of user errors
and their messages is in docs/cli.md (tests/test_cli_errors.py runs each).
"""

from __future__ import annotations

import sys
import traceback

from pipeline.job.errors import ConfigError, closest

__all__ = [
    "EXIT_FAILED",
    "EXIT_INTERRUPTED",
    "EXIT_OK",
    "EXIT_USAGE",
    "INTERRUPTED",
    "USER_ERRORS",
    "ConfigError",
    "closest",
    "one_line",
    "print_error",
]

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2
EXIT_INTERRUPTED = 130  # Ctrl-C (SIGINT), as shells report it
INTERRUPTED = (
    "tfrecord-etl: interrupted: the output has no manifest, so no reader takes it; the next "
    "run clears what this one left"
)
USER_ERRORS = (ValueError, OSError)  # what the commands report as the user's, without traceback

PREFIX = "tfrecord-etl: error: "


def one_line(message: str) -> str:
    """A message on one line: lines joined by "; ", blank ones and indents dropped."""
    lines = [line.strip() for line in str(message).splitlines()]
    return "; ".join(line for line in lines if line)


def print_error(
    err: BaseException, debug: bool = False, context: str = "", suffix: str = ""
) -> str:
    """Print `tfrecord-etl: error: <context><message>[; <suffix>]` on stderr, after the
    traceback of `err` when `debug` (without it, an error that is not the user's says so);
    return the message (what the JSON summary line says)."""
    if debug:
        traceback.print_exception(err, file=sys.stderr)
    message = context + one_line(str(err)) + (f"; {suffix}" if suffix else "")
    hint = ""
    if not debug and not isinstance(err, USER_ERRORS):  # a fault of the program: where is it?
        hint = f" ({type(err).__name__}; --debug shows the traceback)"
    print(PREFIX + message + hint, file=sys.stderr, flush=True)
    return message
