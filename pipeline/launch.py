"""Running a command: the launcher behind `tfrecord-etl convert`, `verify` and `inspect`.

`convert`: the config (file and flags), Beam's options, the plan (pipeline/plan.py, which writes
nothing), the output's lease (pipeline/lease.py: one run at a time), clearing the output, the
pipeline (pipeline/build.py), and the run's summary: a human summary and one JSON line, the last
line of stdout, for schedulers (pipeline/schedule.py). The launcher removes its lease when the
run ends, unless the job was submitted and not waited for (the job removes it when it commits).
"""

from __future__ import annotations

import argparse
import json
import os
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
from pipeline.lease import Lease, acquire_lease, release_lease
from pipeline.manifest import read_manifest
from pipeline.output_dir import clear_leftovers, clear_previous_output
from pipeline.plan import plan_job
from pipeline.schedule import apply_date, parse_date, run_summary, summary_line
from pipeline.verify.inspect import inspect_path

__all__ = ["DEFAULT_RUNNER", "EXIT_FAILED", "EXIT_OK", "EXIT_USAGE", "convert", "inspect", "verify"]

# Beam's DirectRunner (2.68+) first downloads a Prism binary from the network. FnApiRunner is
# Beam's in-process portable runner: same semantics, nothing fetched.
DEFAULT_RUNNER = "FnApiRunner"
DASK_RUNNER = "pipeline.dask_runner.DaskRunner"

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2


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


def _submitted_only(result: PipelineResult, options: PipelineOptions) -> bool:
    """True when the job was handed over and not waited for: a template launch (the service
    submits the job) or --no_wait_until_finish on a runner that runs the job elsewhere."""
    if not getattr(result, "has_job", True):
        return True
    no_wait = options.view_as(StandardOptions).no_wait_until_finish
    return bool(no_wait) and not PipelineState.is_terminal(result.state)


def _takes_lease(options: PipelineOptions, dry_run: bool) -> bool:
    """A run that writes now takes the lease: not a dry run, nor a template being staged (its
    job runs later, launched by the service)."""
    return not dry_run and not options.view_as(GoogleCloudOptions).template_location


def _waits(options: PipelineOptions) -> bool:
    return not options.view_as(StandardOptions).no_wait_until_finish


def _release(lease: Lease | None, options: PipelineOptions) -> None:
    if lease is None:
        return
    try:
        release_lease(lease.output, lease.run_id, options)
    except Exception as err:  # the run's own result stands; say what is left
        print(f"tfrecord-etl: warning: could not remove the output's lease: {err}", file=sys.stderr)


def convert(args: argparse.Namespace, flags: Mapping[str, Any], beam_args: Sequence[str]) -> int:
    """`tfrecord-etl convert`: `flags` are the options given on the command line (config keys,
    pipeline/flags.py), `beam_args` the rest (Beam's pipeline options)."""
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
        for note in fill_dataflow_options(options, date):
            print(f"tfrecord-etl: using {note}", file=sys.stderr)
        dry_run = is_dataflow(options) and is_dry_run(options)
        plan = plan_job(config)  # reads the inputs, writes nothing
        if _takes_lease(options, dry_run):  # before anything in the output is deleted
            lease = acquire_lease(config.output, options, waits=_waits(options))
        if not dry_run:  # a dry run deletes nothing
            clear_previous_output(config.output, config.overwrite)
            clear_leftovers(config.output, config.splits)
        if plan.new_columns:
            print(
                f"tfrecord-etl: note: new column(s) against {config.expect_schema}: "
                f"{list(plan.new_columns)}",
                file=sys.stderr,
            )
        pipeline = beam.Pipeline(options=options)  # Beam validates its options here
    except (ValueError, OSError) as err:
        if lease is not None:
            _release(lease, options)
        print(f"tfrecord-etl: error: {err}", file=sys.stderr)
        return report(EXIT_USAGE, "invalid", error=str(err))
    job = {
        "runner": runner_name(options),
        "job_name": options.view_as(GoogleCloudOptions).job_name,
    }
    keep_lease = False  # a job still running elsewhere removes its lease itself
    try:
        with pipeline as p:
            build_pipeline(p, plan, run_id=None if lease is None else lease.run_id)
        result = p.result
        if dry_run:
            built = describe_dry_run(result)
            job_file = options.view_as(DebugOptions).dataflow_job_file
            if job_file:
                write_job_file(job_file, result)
            print(f"dry run: job {built['job_name']} built, not submitted ({job['runner']})")
            return report(EXIT_OK, "dry_run", **{**job, **built, "job_file": job_file})
        if _submitted_only(result, options):
            keep_lease = True
            job_id = result.job_id() if getattr(result, "has_job", False) else None
            return report(EXIT_OK, "submitted", **job, job_id=job_id)
        if result.state != PipelineState.DONE:
            raise RuntimeError(f"the runner ended the job in state {result.state}")
    except Exception as err:  # the runner's failure: report it, exit non-zero, no manifest
        print(f"tfrecord-etl: error: the job failed: {err}", file=sys.stderr)
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


def inspect(args: argparse.Namespace) -> int:
    """`tfrecord-etl inspect`: the report as indented JSON."""
    try:
        report = inspect_path(args.path, args.records)
    except (ValueError, OSError) as err:
        print(f"tfrecord-etl: error: {err}", file=sys.stderr)
        return EXIT_FAILED
    print(json.dumps(report, indent=2, ensure_ascii=False))
    return EXIT_OK


def verify(args: argparse.Namespace) -> int:
    """`tfrecord-etl verify`: the report (or --json), then the JSON summary line."""
    start = time.monotonic()
    # TensorFlow (to parse the records) is imported by this command only; without its C++ info
    # lines on stderr.
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    from pipeline.verify.report import format_report
    from pipeline.verify.run import SourceRequest, verify_output

    request = None
    if args.source is not None or args.config or args.sample:
        fraction, count = args.sample or (None, None)
        request = SourceRequest(tuple(args.source or ()), args.config, fraction, count, args.seed)

    def summary(code: int, status: str, **extra: Any) -> dict[str, Any]:
        return run_summary(
            status=status,
            exit_code=code,
            seconds=time.monotonic() - start,
            output=args.output,
            command="verify",
            **extra,
        )

    try:
        if args.max_findings < 1:
            raise ValueError(f"--max-findings must be at least 1, not {args.max_findings}")
        report = verify_output(args.output, request, args.max_findings)
        manifest = read_manifest(args.output)
    except (ValueError, OSError) as err:
        print(f"tfrecord-etl: error: {err}", file=sys.stderr)
        print(summary_line(summary(EXIT_USAGE, "invalid", error=str(err))), flush=True)
        return EXIT_USAGE
    code = EXIT_OK if report.ok else EXIT_FAILED
    result = report.to_json()
    line = summary(
        code,
        result["result"],
        manifest=manifest,
        records_read=report.checked["records"]["per_split"],
        finding_counts=result["finding_counts"],
    )
    if args.json:
        print(summary_line({**line, **result}), flush=True)
    else:
        print(format_report(report))
        print(summary_line(line), flush=True)
    return code


