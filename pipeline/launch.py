"""Running a job: the launcher behind `tfrecord-etl convert` (`plan`, `inspect` and `verify` are
in pipeline/commands.py).

`convert`: the config (file and flags), the plan (pipeline/plan.py, which writes nothing), the
engine (pipeline/engine.py: Beam, or this process for a local job that needs no grouping),
then the run: pipeline/launch_beam.py for Beam (its options, the lease, the pipeline of
pipeline/build.py), `_run_in_process` here otherwise (pipeline/inprocess.py). Either ends with
the run's summary: a human summary and one JSON line, the last line of stdout, for schedulers
(pipeline/schedule.py). Beam is imported only when Beam runs the job.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Mapping, Sequence
from typing import Any

from pipeline.config import load_config
from pipeline.engine import choose_engine
from pipeline.errors import (
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_USAGE,
    INTERRUPTED,
    print_error,
)
from pipeline.joblog import JobLog, job_log
from pipeline.lease import Lease, acquire_lease, release_lease
from pipeline.manifest import read_manifest
from pipeline.output_dir import clear_leftovers, clear_previous_output
from pipeline.plan import JobPlan, plan_job
from pipeline.progress import ProgressWatch, planned_rows
from pipeline.schedule import apply_date, parse_date, run_summary, summary_line
from transforms import fs

__all__ = ["EXIT_FAILED", "EXIT_OK", "EXIT_USAGE", "Run", "convert", "progress_watch"]


class Run:
    """One `convert` run's reporting: its start, and its JSON summary line."""

    def __init__(self, output: str | None) -> None:
        self.start = time.monotonic()
        self.output = output
        self.date = None

    def report(self, code: int, status: str, **extra: Any) -> int:
        """Print the run's JSON summary as the last line of stdout; return the exit code."""
        summary = run_summary(
            status=status,
            exit_code=code,
            seconds=time.monotonic() - self.start,
            output=self.output,
            date=self.date,
            **extra,
        )
        print(summary_line(summary), flush=True)
        return code

    def interrupted(self, job: dict[str, Any]) -> int:
        """Ctrl-C: one line on stderr, the JSON line with status "interrupted", exit 130."""
        print(INTERRUPTED, file=sys.stderr)
        return self.report(EXIT_INTERRUPTED, "interrupted", **job)

    def succeeded(self, output: str, write_report: bool, job: dict[str, Any]) -> int:
        """The human summary of a finished run, its report.html if asked, the JSON line."""
        print(_summary(output, time.monotonic() - self.start))
        if write_report:
            try:
                job["report"] = _write_report(output)
            except (ValueError, OSError) as err:
                print(
                    f"tfrecord-etl: error: the output is complete, its report failed: {err}",
                    file=sys.stderr,
                )
                return self.report(EXIT_FAILED, "failed", **job, error=f"report: {err}")
        return self.report(EXIT_OK, "succeeded", **job, manifest=read_manifest(output))


def _sizes(paths: Sequence[str]) -> list[int]:
    return [m.size_in_bytes for r in fs.FileSystems.match(list(paths)) for m in r.metadata_list]


def _summary(output: str, seconds: float) -> str:
    manifest = read_manifest(output)
    files = [fs.join(output, f) for f in manifest.files()]
    rate = manifest.rows / seconds if seconds > 0 else 0.0
    return (
        f"rows: {manifest.rows}  shards: {len(files)}  bytes: {sum(_sizes(files))}  "
        f"compression: {manifest.compression}  seconds: {seconds:.1f} ({rate:,.0f} rows/s)\n"
        f"output: {output}  (manifest: {output.rstrip('/')}/manifest.json)"
    )


def progress_watch(plan: JobPlan, log: JobLog, shown: bool = True) -> ProgressWatch:
    """The progress display of a run that writes here and now (pipeline/progress.py): none when
    quiet or not `shown` (a dry run, a template, Dataflow, Beam's tfrecordio sink)."""
    config = plan.config
    mode = None
    if shown and not log.quiet:
        mode = "json" if log.json else "tty" if sys.stderr.isatty() else "lines"
    planned = planned_rows(plan) if mode else None
    names = tuple(name for name, _ in config.splits)
    return ProgressWatch(config.output, mode, log, planned, names)


def note_new_columns(plan: JobPlan, log: JobLog) -> None:
    if plan.new_columns:
        log.event(
            "new_columns",
            f"note: new column(s) against {plan.config.expect_schema}: {list(plan.new_columns)}",
            columns=list(plan.new_columns),
        )


def convert(args: argparse.Namespace, flags: Mapping[str, Any], beam_args: Sequence[str]) -> int:
    """`tfrecord-etl convert`: `flags` are the options given on the command line (config keys,
    pipeline/flags.py), `beam_args` the rest (Beam's pipeline options). stderr as
    --log-format and --quiet ask (pipeline/joblog.py)."""
    with job_log(getattr(args, "log_format", None), getattr(args, "quiet", None)) as log:
        return _convert(args, flags, beam_args, log)


def _convert(
    args: argparse.Namespace, flags: Mapping[str, Any], beam_args: Sequence[str], log: JobLog
) -> int:
    run = Run(args.output)
    try:
        run.date = parse_date(args.date) if args.date else None
        config = apply_date(load_config(args.config, flags), run.date)
        run.output = config.output
        plan = plan_job(config)  # reads the inputs, writes nothing
        engine = choose_engine(config.engine, beam_args, plan)
    except (ValueError, OSError) as err:
        message = print_error(err, args.debug)
        return run.report(EXIT_USAGE, "invalid", error=message)
    if engine == "beam":
        from pipeline.launch_beam import convert_with_beam

        return convert_with_beam(args, plan, beam_args, log, run)
    return _run_in_process(args, plan, log, run)


def _run_in_process(args: argparse.Namespace, plan: JobPlan, log: JobLog, run: Run) -> int:
    """The job in this process (pipeline/inprocess.py): lease, clear, run, summary."""
    from pipeline.inprocess import run_in_process

    config = plan.config
    job: dict[str, Any] = {"engine": "in-process"}
    lease: Lease | None = None
    try:
        lease = acquire_lease(config.output)  # before anything in the output is deleted
        clear_previous_output(config.output, config.overwrite)
        clear_leftovers(config.output, config.splits)
        note_new_columns(plan, log)
        watch = progress_watch(plan, log)
    except (ValueError, OSError) as err:
        _release(lease)
        message = print_error(err, args.debug)
        return run.report(EXIT_USAGE, "invalid", error=message)
    try:
        with watch:  # the live progress line, until the run ends (pipeline/progress.py)
            run_in_process(plan, run_id=lease.run_id, progress_dir=watch.directory)
    except KeyboardInterrupt:
        return run.interrupted(job)
    except Exception as err:  # the job's failure: report it, exit non-zero, no manifest
        print_error(err, args.debug, context="the job failed: ")
        return run.report(EXIT_FAILED, "failed", **job, error=str(err))
    finally:
        _release(lease)
    return run.succeeded(config.output, config.report, job)


def _release(lease: Lease | None, options: Any = None) -> None:
    if lease is None:
        return
    try:
        release_lease(lease.output, lease.run_id, options)
    except Exception as err:  # the run's own result stands; say what is left
        print(f"tfrecord-etl: warning: could not remove the output's lease: {err}", file=sys.stderr)


def _write_report(output: str) -> str:
    """`convert --report`: write the output's report.html, say where; its path."""
    from pipeline.report.write import describe, write_report

    written = write_report(output)
    print(describe(written))
    return written.path
