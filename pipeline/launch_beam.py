"""A convert job run by Beam (any runner): Beam's options, the output's lease, clearing the
output, the pipeline (pipeline/build.py), following a Dataflow job, and the run's summary.
The launcher removes its lease when the run ends, unless the job was submitted and not waited
for (the job removes it when it commits)."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any

import apache_beam as beam
from apache_beam.options.pipeline_options import (
    DebugOptions,
    GoogleCloudOptions,
    PipelineOptions,
    StandardOptions,
)
from apache_beam.runners.runner import PipelineResult, PipelineState

from pipeline.build import build_pipeline
from pipeline.dataflow import (
    describe_dry_run,
    fill_dataflow_options,
    is_dataflow,
    is_dry_run,
    runner_name,
    write_job_file,
)
from pipeline.errors import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK, EXIT_USAGE, print_error
from pipeline.follow import announce, follow
from pipeline.joblog import JobLog
from pipeline.launch import Run, _release, note_new_columns, progress_watch
from pipeline.lease import acquire_lease
from pipeline.output_dir import clear_leftovers, clear_previous_output
from pipeline.plan import JobPlan
from pipeline.progress import ProgressWatch

__all__ = ["DEFAULT_RUNNER", "convert_with_beam"]

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
    """The progress display of a run that writes here and now: none for a dry run, a template,
    Dataflow (its state is followed instead) or the tfrecordio sink (Beam's sink reports
    nothing)."""
    elsewhere = is_dataflow(options) or options.view_as(GoogleCloudOptions).template_location
    shown = not (dry_run or elsewhere or plan.config.sink == "tfrecordio")
    return progress_watch(plan, log, shown)


def convert_with_beam(
    args: argparse.Namespace, plan: JobPlan, beam_args: Sequence[str], log: JobLog, run: Run
) -> int:
    """Run the planned job with Beam; the exit code (the JSON summary line printed)."""
    config = plan.config
    lease = None
    try:
        options = _beam_options(beam_args)
        if getattr(args, "wait", None) is False:  # --no-wait
            options.view_as(StandardOptions).no_wait_until_finish = True
        for note in fill_dataflow_options(options, run.date):
            log.event("note", f"using {note}", option=note)
        dry_run = is_dataflow(options) and is_dry_run(options)
        if _takes_lease(options, dry_run):  # before anything in the output is deleted
            lease = acquire_lease(config.output, options, waits=_waits(options))
        if not dry_run:  # a dry run deletes nothing
            clear_previous_output(config.output, config.overwrite)
            clear_leftovers(config.output, config.splits)
        note_new_columns(plan, log)
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
        return run.report(EXIT_USAGE, "invalid", error=message)
    job: dict[str, Any] = {
        "engine": "beam",
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
            return run.report(EXIT_OK, "dry_run", **{**job, **built, "job_file": job_file})
        if _submitted_only(result, waits):
            keep_lease = True
            job.setdefault("job_id", None)
            return run.report(EXIT_OK, "submitted", **job)
        if result.state != PipelineState.DONE:
            raise RuntimeError(f"the runner ended the job in state {result.state}")
    except KeyboardInterrupt:
        if job.get("job_id"):  # a Dataflow job goes on, and removes its lease when it commits
            keep_lease = True
            return run.report(EXIT_INTERRUPTED, "interrupted", **job)
        return run.interrupted(job)
    except Exception as err:  # the runner's failure: report it, exit non-zero, no manifest
        print_error(err, args.debug, context="the job failed: ")
        return run.report(EXIT_FAILED, "failed", **job, error=str(err))
    finally:
        if not keep_lease:
            _release(lease, options)
    return run.succeeded(config.output, config.report, job)
