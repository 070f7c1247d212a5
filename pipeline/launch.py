"""Running a job: the launcher behind `tfrecord-etl convert` (`plan`, `inspect` and `verify` are
in pipeline/commands.py).

`convert`: the config (file and flags), Beam's options, the plan (pipeline/plan.py, which writes
nothing), the output's lease (pipeline/lease.py: one run at a time), clearing the output, the
pipeline (pipeline/build.py), and the run's summary: a human summary and one JSON line, the last
line of stdout, for schedulers (pipeline/schedule.py). The launcher removes its lease when the
run ends, unless the job was submitted and not waited for (the job removes it when it commits).
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Mapping, Sequence
from typing import Any

import apache_beam as beam
from apache_beam.io.filesystems import FileSystems
from apache_beam.options.pipeline_options import (
    DebugOptions,
    GoogleCloudOptions,
    PipelineOptions,
    StandardOptions,
)
from apache_beam.runners.runner import PipelineResult, PipelineState

from pipeline.build import build_pipeline
from pipeline.config import load_config
from pipeline.dataflow import (
    describe_dry_run,
    fill_dataflow_options,
    is_dataflow,
    is_dry_run,
    runner_name,
    write_job_file,
)
from pipeline.errors import EXIT_FAILED, EXIT_OK, EXIT_USAGE, print_error
from pipeline.follow import announce, follow
from pipeline.joblog import JobLog, job_log
from pipeline.lease import Lease, acquire_lease, release_lease
from pipeline.manifest import read_manifest
from pipeline.output_dir import clear_leftovers, clear_previous_output
from pipeline.plan import JobPlan, plan_job
from pipeline.progress import ProgressWatch, planned_rows
from pipeline.schedule import apply_date, parse_date, run_summary, summary_line

__all__ = ["DEFAULT_RUNNER", "EXIT_FAILED", "EXIT_OK", "EXIT_USAGE", "convert"]

# Beam's DirectRunner (2.68+) first downloads a Prism binary from the network. FnApiRunner is
# Beam's in-process portable runner: same semantics, nothing fetched.
DEFAULT_RUNNER = "FnApiRunner"
DASK_RUNNER = "pipeline.dask_runner.DaskRunner"


# Beam's own DaskRunner leaves gaps the job falls into (pipeline/dask_runner.py closes them):
# the short names select the project's runner.
_RUNNER_ALIASES = {"daskrunner": DASK_RUNNER, "dask": DASK_RUNNER}


def _beam_options(args: Sequence[str]) -> PipelineOptions:
    """Beam's options from the flags `convert` does not know; the default runner when none is
    named, and the project's DaskRunner for `--runner=DaskRunner` (or `dask`)."""
    args = list(args)
    if not any(a == "--runner" or a.startswith("--runner=") for a in args):
        args.append(f"--runner={DEFAULT_RUNNER}")
    for i, arg in enumerate(args):
        if arg.startswith("--runner="):
            name = arg.split("=", 1)[1]
            args[i] = f"--runner={_RUNNER_ALIASES.get(name.lower(), name)}"
        elif arg == "--runner" and i + 1 < len(args):
            args[i + 1] = _RUNNER_ALIASES.get(args[i + 1].lower(), args[i + 1])
    return PipelineOptions(args)


def _summary(output: str, seconds: float) -> str:
    manifest = read_manifest(output)
    files = [FileSystems.join(output, f) for f in manifest.files()]
    sizes = [m.size_in_bytes for r in FileSystems.match(files) for m in r.metadata_list]
    rate = manifest.rows / seconds if seconds > 0 else 0.0
    return (
        f"rows: {manifest.rows}  shards: {len(files)}  bytes: {sum(sizes)}  "
        f"compression: {manifest.compression}  seconds: {seconds:.1f} ({rate:,.0f} rows/s)\n"
        f"output: {output}  (manifest: {output.rstrip('/')}/manifest.json)"
    )


def _submitted_only(result: PipelineResult, waits: bool) -> bool:
    """True when the job was handed over and not waited for: a template launch (the service
    submits the job) or --no-wait on a runner that runs the job elsewhere."""
    if not getattr(result, "has_job", True):
        return True
    return not waits and not PipelineState.is_terminal(result.state)


def _takes_lease(options: PipelineOptions, dry_run: bool) -> bool:
    """A run that writes now takes the lease: not a dry run, nor a template being staged (its
    job runs later, launched by the service)."""
    return not dry_run and not options.view_as(GoogleCloudOptions).template_location


def _waits(options: PipelineOptions) -> bool:
    return not options.view_as(StandardOptions).no_wait_until_finish


def _progress(plan: JobPlan, options: PipelineOptions, dry_run: bool, log: JobLog) -> ProgressWatch:
    """The progress display of a run that writes here and now (pipeline/progress.py): none when
    quiet, for a dry run, a template, Dataflow (its state is followed instead) or the
    tfrecordio sink (Beam's sink reports nothing)."""
    config = plan.config
    elsewhere = is_dataflow(options) or options.view_as(GoogleCloudOptions).template_location
    mode = None
    if not (log.quiet or dry_run or elsewhere or config.sink == "tfrecordio"):
        mode = "json" if log.json else "tty" if sys.stderr.isatty() else "lines"
    planned = planned_rows(plan) if mode else None
    names = tuple(name for name, _ in config.splits)
    return ProgressWatch(config.output, mode, log, planned, names)


def _release(lease: Lease | None, options: PipelineOptions) -> None:
    if lease is None:
        return
    try:
        release_lease(lease.output, lease.run_id, options)
    except Exception as err:  # the run's own result stands; say what is left
        print(f"tfrecord-etl: warning: could not remove the output's lease: {err}", file=sys.stderr)


def convert(args: argparse.Namespace, flags: Mapping[str, Any], beam_args: Sequence[str]) -> int:
    """`tfrecord-etl convert`: `flags` are the options given on the command line (config keys,
    pipeline/flags.py), `beam_args` the rest (Beam's pipeline options). stderr as
    --log-format and --quiet ask (pipeline/joblog.py)."""
    with job_log(getattr(args, "log_format", None), getattr(args, "quiet", None)) as log:
        return _convert(args, flags, beam_args, log)


def _convert(
    args: argparse.Namespace, flags: Mapping[str, Any], beam_args: Sequence[str], log: JobLog
) -> int:
    start = time.monotonic()
    date, output = None, args.output
    lease = None

    def report(code: int, status: str, **extra: Any) -> int:
        """Print the run's JSON summary as the last line of stdout; return the exit code."""
        summary = run_summary(
            status=status,
            exit_code=code,
            seconds=time.monotonic() - start,
            output=output,
            date=date,
            **extra,
        )
        print(summary_line(summary), flush=True)
        return code

    try:
        date = parse_date(args.date) if args.date else None
        config = apply_date(load_config(args.config, flags), date)
        output = config.output
        options = _beam_options(beam_args)
        if getattr(args, "wait", None) is False:  # --no-wait
            options.view_as(StandardOptions).no_wait_until_finish = True
        for note in fill_dataflow_options(options, date):
            log.event("note", f"using {note}", option=note)
        dry_run = is_dataflow(options) and is_dry_run(options)
        plan = plan_job(config)  # reads the inputs, writes nothing
        if _takes_lease(options, dry_run):  # before anything in the output is deleted
            lease = acquire_lease(config.output, options, waits=_waits(options))
        if not dry_run:  # a dry run deletes nothing
            clear_previous_output(config.output, config.overwrite)
            clear_leftovers(config.output, config.splits)
        if plan.new_columns:
            log.event(
                "new_columns",
                f"note: new column(s) against {config.expect_schema}: {list(plan.new_columns)}",
                columns=list(plan.new_columns),
            )
        watch = _progress(plan, options, dry_run, log)
        waits = _waits(options)
        # Beam only starts the job (the pipeline keeps a copy of its options): the launcher
        # waits, following a Dataflow job (pipeline/follow.py)
        options.view_as(StandardOptions).no_wait_until_finish = True
        pipeline = beam.Pipeline(options=options)  # Beam validates its options here
    except (ValueError, OSError) as err:
        if lease is not None:
            _release(lease, options)
        message = print_error(err, args.debug)
        return report(EXIT_USAGE, "invalid", error=message)
    job = {
        "runner": runner_name(options),
        "job_name": options.view_as(GoogleCloudOptions).job_name,
    }
    keep_lease = False  # a job still running elsewhere removes its lease itself
    try:
        with watch:  # the progress of a local run, until it ends (pipeline/progress.py)
            with pipeline as p:
                build_pipeline(
                    p,
                    plan,
                    run_id=None if lease is None else lease.run_id,
                    progress_dir=watch.directory,
                )
            result = p.result
            if is_dataflow(options) and not dry_run:
                job.update(announce(result, options, log))
            if waits and not dry_run:
                if "job_id" in job:
                    follow(result, log)
                else:
                    result.wait_until_finish()
        if dry_run:
            built = describe_dry_run(result)
            job_file = options.view_as(DebugOptions).dataflow_job_file
            if job_file:
                write_job_file(job_file, result)
            print(f"dry run: job {built['job_name']} built, not submitted ({job['runner']})")
            return report(EXIT_OK, "dry_run", **{**job, **built, "job_file": job_file})
        if _submitted_only(result, waits):
            keep_lease = True
            job.setdefault("job_id", None)
            return report(EXIT_OK, "submitted", **job)
        if result.state != PipelineState.DONE:
            raise RuntimeError(f"the runner ended the job in state {result.state}")
    except Exception as err:  # the runner's failure: report it, exit non-zero, no manifest
        print_error(err, args.debug, context="the job failed: ")
        return report(EXIT_FAILED, "failed", **job, error=str(err))
    finally:
        if not keep_lease:
            _release(lease, options)
    print(_summary(config.output, time.monotonic() - start))
    if config.report:
        try:
            job["report"] = _write_report(config.output)
        except (ValueError, OSError) as err:
            print(
                f"tfrecord-etl: error: the output is complete, its report failed: {err}",
                file=sys.stderr,
            )
            return report(EXIT_FAILED, "failed", **job, error=f"report: {err}")
    return report(EXIT_OK, "succeeded", **job, manifest=read_manifest(config.output))


def _write_report(output: str) -> str:
    """`convert --report`: write the output's report.html, say where; its path."""
    from pipeline.report.write import describe, write_report

    written = write_report(output)
    print(describe(written))
    return written.path


