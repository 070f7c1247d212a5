"""`tfrecord-etl convert`: the config (file and flags), the plan (pipeline/job/plan.py, which
writes nothing), the engine (pipeline/engines/choose.py), the output claimed for the run
(pipeline/engines/launch.py: the lease, clearing), the engine's run, then the summary: a human
summary and one JSON line, the last line of stdout, for schedulers (pipeline/cli/summary.py).

Both engines go through the same steps here; neither's insides are known to this module
(pipeline/engines/interface.py). Beam is imported only when Beam runs the job.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from pipeline.cli.errors import (
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_USAGE,
    INTERRUPTED,
    print_error,
)
from pipeline.cli.joblog import JobLog, job_log
from pipeline.cli.progress import ProgressWatch, planned_rows
from pipeline.cli.summary import run_summary, summary_line
from pipeline.engines.choose import choose_engine, workers
from pipeline.engines.interface import DRY_RUN, SUBMITTED, Engine, EngineResult
from pipeline.engines.launch import OutputClaim, claim_output
from pipeline.job.config import JobConfig, load_config
from pipeline.job.dates import apply_date, parse_date
from pipeline.job.plan import JobPlan, plan_job
from pipeline.output.manifest import Manifest
from transforms import fs

__all__ = [
    "EXIT_FAILED",
    "EXIT_OK",
    "EXIT_USAGE",
    "Run",
    "configured",
    "convert",
    "progress_watch",
    "run_config",
]


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

    def interrupted(self, job: dict[str, Any], still_running: bool) -> int:
        """Ctrl-C: one line on stderr (none when the job goes on elsewhere: the engine said
        so), the JSON line with status "interrupted", exit 130."""
        if not still_running:
            print(INTERRUPTED, file=sys.stderr)
        return self.report(EXIT_INTERRUPTED, "interrupted", **job)

    def succeeded(self, result: EngineResult, write_report: bool) -> int:
        """The human summary of a finished run, its report.html if asked, the JSON line."""
        job = dict(result.facts)
        output = str(self.output)
        print(_summary(output, result.manifest, time.monotonic() - self.start))
        if write_report:
            try:
                job["report"] = _write_report(output)
            except (ValueError, OSError) as err:
                print(
                    f"tfrecord-etl: error: the output is complete, its report failed: {err}",
                    file=sys.stderr,
                )
                return self.report(EXIT_FAILED, "failed", **job, error=f"report: {err}")
        return self.report(EXIT_OK, "succeeded", **job, manifest=result.manifest)


def _sizes(paths: Sequence[str]) -> list[int]:
    return [m.size_in_bytes for r in fs.FileSystems.match(list(paths)) for m in r.metadata_list]


def _summary(output: str, manifest: Manifest | None, seconds: float) -> str:
    assert manifest is not None  # a succeeded run committed one
    files = [fs.join(output, f) for f in manifest.files()]
    rate = manifest.rows / seconds if seconds > 0 else 0.0
    return (
        f"rows: {manifest.rows}  shards: {len(files)}  bytes: {sum(_sizes(files))}  "
        f"compression: {manifest.compression}  seconds: {seconds:.1f} ({rate:,.0f} rows/s)\n"
        f"output: {output}  (manifest: {output.rstrip('/')}/manifest.json)"
    )


def progress_watch(plan: JobPlan, log: JobLog, shown: bool = True) -> ProgressWatch:
    """The progress display of a run that writes here and now (pipeline/cli/progress.py): none
    when quiet or not `shown` (the engine shows none: a dry run, a template, Dataflow, Beam's
    tfrecordio sink)."""
    config = plan.config
    mode = None
    if shown and not log.quiet:
        mode = "json" if log.json else "tty" if sys.stderr.isatty() else "lines"
    planned = planned_rows(plan) if mode else None
    names = tuple(name for name, _ in config.splits)
    return ProgressWatch(config.output, mode, log, planned, names)


def _note_new_columns(plan: JobPlan, log: JobLog) -> None:
    if plan.new_columns:
        log.event(
            "new_columns",
            f"note: new column(s) against {plan.config.expect_schema}: {list(plan.new_columns)}",
            columns=list(plan.new_columns),
        )


def convert(args: argparse.Namespace, flags: Mapping[str, Any], beam_args: Sequence[str]) -> int:
    """`tfrecord-etl convert`: `flags` are the options given on the command line (config keys,
    pipeline/job/flags.py), `beam_args` the rest (Beam's pipeline options). stderr as
    --log-format and --quiet ask (pipeline/cli/joblog.py)."""
    with job_log(getattr(args, "log_format", None), getattr(args, "quiet", None)) as log:

        def run_it(config: JobConfig, run: Run) -> int:
            return run_config(config, args, beam_args, log, run)

        return configured(args, flags, run_it)


def configured(
    args: argparse.Namespace,
    flags: Mapping[str, Any],
    then: Callable[[JobConfig, Run], int],
) -> int:
    """The run's config (the file, the flags, `--date` filled in), handed to `then` with the
    run's reporting; exit 2 and the summary line when the config is wrong."""
    run = Run(args.output)
    try:
        run.date = parse_date(args.date) if args.date else None
        config = apply_date(load_config(args.config, flags), run.date)
    except (ValueError, OSError) as err:
        message = print_error(err, args.debug)
        return run.report(EXIT_USAGE, "invalid", error=message)
    return then(config, run)


def _open_engine(
    name: str,
    plan: JobPlan,
    beam_args: Sequence[str],
    args: argparse.Namespace,
    run: Run,
    log: JobLog,
) -> Engine:
    """The engine `name` ("beam" or "in-process"), ready to run `plan`."""
    if name == "beam":
        from pipeline.engines.beam.engine import BeamEngine

        return BeamEngine(plan, beam_args, getattr(args, "wait", None), run.date, log)
    from pipeline.engines.inprocess import InProcessEngine

    return InProcessEngine(workers(plan.config.workers)[0])


def run_config(
    config: JobConfig,
    args: argparse.Namespace,
    beam_args: Sequence[str],
    log: JobLog,
    run: Run,
    check_plan: Callable[[JobPlan], None] | None = None,
) -> int:
    """Plan `config`, claim its output, run it, report: the run of one output. `check_plan`
    may refuse the plan (ValueError) before the output is claimed."""
    run.output = config.output
    try:
        plan = plan_job(config)  # reads the inputs, writes nothing
        if check_plan is not None:
            check_plan(plan)
        name = choose_engine(config.engine, beam_args, plan)
        engine = _open_engine(name, plan, beam_args, args, run, log)
        claim = claim_output(plan, engine)  # the lease, then clearing the output
    except (ValueError, OSError) as err:
        message = print_error(err, args.debug)
        return run.report(EXIT_USAGE, "invalid", error=message)
    for note in claim.notes:
        log.event("note", f"note: {note}", note=note)
    _note_new_columns(plan, log)
    try:
        return _run(args, plan, engine, claim, log, run)
    finally:
        warning = claim.release()
        if warning:
            print(f"tfrecord-etl: warning: {warning}", file=sys.stderr)


def _run(
    args: argparse.Namespace,
    plan: JobPlan,
    engine: Engine,
    claim: OutputClaim,
    log: JobLog,
    run: Run,
) -> int:
    """The engine's run under `claim`, and the summary of how it ended."""
    try:
        watch = progress_watch(plan, log, engine.shows_progress)
        with watch:  # the live progress line, until the run ends (pipeline/cli/progress.py)
            result = claim.run(plan, watch.directory, log)
    except KeyboardInterrupt:
        if not engine.still_running:
            claim.after_failure()  # the run's temp folders go; what is left stays
        return run.interrupted(dict(engine.facts), engine.still_running)
    except Exception as err:  # the job's failure: report it, exit non-zero, no manifest
        where = "" if engine.still_running else claim.after_failure()
        print_error(err, args.debug, context="the job failed: ", suffix=where)
        error = f"{err}; {where}" if where else str(err)
        return run.report(EXIT_FAILED, "failed", **engine.facts, error=error)
    if result.status == DRY_RUN:
        facts = result.facts
        print(f"dry run: job {result.extra['job_name']} built, not submitted ({facts['runner']})")
        return run.report(EXIT_OK, "dry_run", **{**facts, **result.extra})
    if result.status == SUBMITTED:
        return run.report(EXIT_OK, "submitted", **result.facts)
    return run.succeeded(result, plan.config.report)


def _write_report(output: str) -> str:
    """`convert --report`: write the output's report.html, say where; its path."""
    from pipeline.report.write import describe, write_report

    written = write_report(output)
    print(describe(written))
    return written.path
