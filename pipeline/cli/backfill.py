"""`convert --dates 2026-11-01..2026-11-30`: a backfill, one run per date, as `convert --date D`
would run it, one after another or `--parallel-dates N` at once.

Each date is its own `convert` process (a date's failure, memory or Ctrl-C is its own; the
engine, lease, output checks and summary are exactly those of one scheduled run), its stderr
passed on line by line after a `[YYYY-MM-DD]` prefix. The output path must hold `{date}` (each
date writes its own output) and so must an input (each date reads its own). A date whose output
holds a committed manifest is skipped, and said so: a re-run of the same backfill finishes
what a failed or killed one left, and `--overwrite` runs every date again. The JSON summary
(the last line of stdout) lists each date's outcome; the exit code is 0 when every date
succeeded or was skipped, 1 when one failed, 130 on Ctrl-C.
"""

from __future__ import annotations

import argparse
import datetime
import json
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from pipeline.cli.errors import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK, EXIT_USAGE, print_error
from pipeline.cli.summary import JOB, summary_line
from pipeline.engines.choose import workers as choose_workers
from pipeline.job.config import load_config
from pipeline.job.dates import has_date_template, parse_date, render_date
from pipeline.job.errors import ConfigError

__all__ = ["MAX_DATES", "backfill", "child_args", "parse_dates"]

MAX_DATES = 3660  # ten years of days: a longer range is a typo
_BACKFILL_FLAGS = ("--dates", "--parallel-dates")


def parse_dates(text: str) -> list[datetime.date]:
    """`START..END` (both included) or one date, as YYYY-MM-DD."""
    start_text, dots, end_text = text.partition("..")
    if dots and (not start_text or not end_text):
        raise ConfigError(f"--dates {text!r}: expected START..END, as 2026-11-01..2026-11-30")
    start = parse_date(start_text)
    end = parse_date(end_text) if dots else start
    if end < start:
        raise ConfigError(f"--dates {text!r}: the range ends before it starts")
    count = (end - start).days + 1
    if count > MAX_DATES:
        raise ConfigError(f"--dates {text!r}: {count} dates; at most {MAX_DATES} in one backfill")
    return [start + datetime.timedelta(days=i) for i in range(count)]


def child_args(argv: Sequence[str], date: datetime.date, workers: int | None) -> list[str]:
    """The command line of one date's run: `argv` (convert's) without the backfill's flags,
    with `--date` (and `--workers` when the backfill chose it)."""
    out: list[str] = []
    skip = False
    for arg in argv:
        if skip:
            skip = False
            continue
        name = arg.split("=", 1)[0]
        if name in _BACKFILL_FLAGS:
            skip = "=" not in arg  # the value is the next argument
            continue
        out.append(arg)
    out += ["--date", date.isoformat()]
    if workers is not None:
        out += ["--workers", str(workers)]
    return out


def _committed(output: str) -> bool:
    """Whether `output` holds a manifest of this tool (a committed run)."""
    from pipeline.output.manifest import read_manifest

    try:
        read_manifest(output)
    except (ValueError, OSError):
        return False
    return True


class _Date:
    """One date's run: its child process and what it reported."""

    def __init__(self, date: datetime.date, output: str) -> None:
        self.date, self.output = date, output
        self.outcome: dict[str, Any] = {"date": date.isoformat(), "output": output}
        self.process: subprocess.Popen[str] | None = None
        self.lock = threading.Lock()

    def run(
        self,
        argv: Sequence[str],
        workers: int | None,
        say: Callable[[str], None],
        stopping: threading.Event,
    ) -> None:
        cmd = [sys.executable, "-m", "pipeline", "convert", *child_args(argv, self.date, workers)]
        start = time.monotonic()
        with self.lock:
            if stopping.is_set():  # Ctrl-C came before this date started
                return
            self.process = subprocess.Popen(
                cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, bufsize=1
            )
        prefix = f"[{self.date.isoformat()}] "
        relay = threading.Thread(target=_relay, args=(self.process.stderr, prefix, say))
        relay.start()
        stdout = self.process.stdout.read()
        code = self.process.wait()
        relay.join()
        summary = _last_json(stdout)
        interrupted = code in (EXIT_INTERRUPTED, -signal.SIGINT)  # its summary or not
        self.outcome.update(
            status=summary.get("status", "interrupted" if interrupted else "failed"),
            exit_code=code,
            rows_out=summary.get("rows_out"),
            bad=summary.get("bad"),
            seconds=round(time.monotonic() - start, 3),
        )
        if "span" in summary:  # --incremental: the span the date added, None: nothing new
            self.outcome["span"] = summary["span"]
            if summary["span"] is None and code == EXIT_OK:
                self.outcome.update(status="skipped", reason="nothing new")
        if summary.get("error"):
            self.outcome["error"] = summary["error"]


def _stop(runs: Sequence[_Date]) -> None:
    """After Ctrl-C: the dates' runs end as an interrupted convert does. From a terminal they
    had the SIGINT too (one process group); one sent to this process alone is passed on to
    those still running after a moment."""
    deadline = time.monotonic() + 2
    for run in runs:
        with run.lock:
            process = run.process
        if process is None:
            continue
        try:
            process.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            process.send_signal(signal.SIGINT)
            process.wait()


def _relay(stream: Any, prefix: str, say: Callable[[str], None]) -> None:
    """A date's stderr, line by line, after its prefix."""
    for line in stream:
        say(prefix + line.rstrip("\n"))


def _last_json(stdout: str) -> dict[str, Any]:
    for line in reversed(stdout.splitlines()):
        if line.startswith("{"):
            try:
                found = json.loads(line)
            except ValueError:
                return {}
            return found if isinstance(found, dict) else {}
    return {}


def _check(
    config_output: str,
    inputs: Sequence[str],
    dates: Sequence[datetime.date],
    incremental: bool = False,
    parallel: int = 1,
    overwrite: bool = False,
) -> None:
    if incremental and not has_date_template(config_output):  # the dates' spans of one dataset
        if overwrite:
            raise ConfigError(
                "--overwrite: an incremental backfill into one dataset would have each date "
                "retire the spans of the dates before it; to start the dataset over, run one "
                "convert --incremental --overwrite over every input"
            )
        if parallel > 1:
            raise ConfigError(
                "--parallel-dates: an incremental backfill into one dataset adds its spans one "
                "after another (the dataset's lease); drop --parallel-dates"
            )
    elif not has_date_template(config_output):
        raise ConfigError(
            f"--dates: the output {config_output!r} has no {{date}}; every date would write "
            "the same output (use e.g. --output 'out/{date}')"
        )
    if not any(has_date_template(path) for path in inputs):
        raise ConfigError(
            "--dates: no input path has {date}; every date would read the same input "
            "(use e.g. --input 'table/date={date}/*.parquet')"
        )
    seen: dict[str, datetime.date] = {}
    for date in dates if has_date_template(config_output) else ():
        output = render_date(config_output, date)
        if output in seen:
            raise ConfigError(
                f"--dates: the output {config_output!r} is the same path on two dates "
                f"({seen[output].isoformat()} and {date.isoformat()}); its {{date:FORMAT}} "
                "must tell days apart"
            )
        seen[output] = date


def backfill(args: argparse.Namespace, flags: Mapping[str, Any], argv: Sequence[str]) -> int:
    """`convert --dates ...`: each date's run, the summary of them all; the exit code."""
    start = time.monotonic()
    say_lock = threading.Lock()

    def say(line: str) -> None:
        with say_lock:
            print(line, file=sys.stderr, flush=True)

    def report(code: int, status: str, **extra: Any) -> int:
        summary = {"job": JOB, "status": status, "exit_code": code, **extra,
                   "seconds": round(time.monotonic() - start, 3)}  # fmt: skip
        print(summary_line(summary), flush=True)
        return code

    try:
        if args.date:
            raise ConfigError("--date and --dates: give one (--dates runs each date of a range)")
        parallel = args.parallel_dates
        if parallel < 1:
            raise ConfigError("--parallel-dates: must be at least 1")
        dates = parse_dates(args.dates)
        config = load_config(args.config, flags)
        incremental = bool(getattr(args, "incremental", False))
        _check(config.output, config.inputs, dates, incremental, parallel, config.overwrite)
    except (ValueError, OSError) as err:
        message = print_error(err, args.debug)
        return report(EXIT_USAGE, "invalid", error=message)
    workers = None
    if parallel > 1 and config.workers == 0:  # no --workers: the dates at once share the cores
        workers = max(1, choose_workers(0)[0] // parallel)
    runs = [_Date(date, render_date(config.output, date)) for date in dates]
    todo: list[_Date] = []
    for run in runs:
        if not config.overwrite and not incremental and _committed(run.output):
            run.outcome.update(status="skipped", exit_code=EXIT_OK, reason="committed already")
            say(f"[{run.date.isoformat()}] skipped: {run.output} holds a committed run "
                "(--overwrite runs it again)")  # fmt: skip
        else:
            todo.append(run)
    interrupted = False
    stopping = threading.Event()
    pool = ThreadPoolExecutor(parallel)
    try:
        for future in [pool.submit(run.run, argv, workers, say, stopping) for run in todo]:
            future.result()
    except KeyboardInterrupt:
        interrupted = True
        stopping.set()
        pool.shutdown(wait=False, cancel_futures=True)
        _stop(todo)
    finally:
        pool.shutdown(wait=True)
    outcomes = [run.outcome for run in runs]
    for run in runs:
        outcome = run.outcome
        status = outcome.get("status", "not run")
        rows = "" if outcome.get("rows_out") is None else f", {outcome['rows_out']} rows"
        print(f"{outcome['date']}: {status}{rows}")
    counts = {s: sum(o.get("status") == s for o in outcomes) for s in ("succeeded", "skipped")}
    failed = [o["date"] for o in outcomes if o.get("status") not in ("succeeded", "skipped")]
    extra = {"dates": outcomes, **counts, "failed": failed}
    if interrupted:
        return report(EXIT_INTERRUPTED, "interrupted", **extra)
    if failed:
        say(f"tfrecord-etl: error: {len(failed)} of {len(dates)} date(s) failed: "
            f"{', '.join(failed)}; a re-run skips the dates that succeeded")  # fmt: skip
        return report(EXIT_FAILED, "failed", **extra)
    return report(EXIT_OK, "succeeded", **extra)
