"""The commands that run no job: `tfrecord-etl plan`, `inspect` and `verify`.

Each imports what it needs when it runs: `inspect` and `verify` of a local output read it
without Beam or TensorFlow (TensorFlow only when a record needs its parse to say what is wrong
with it); `plan` needs the readers, and so Beam's filesystems. A user error prints one line
(pipeline/cli/errors.py), its traceback with `--debug`.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from collections.abc import Mapping, Sequence
from typing import Any

from pipeline.cli.errors import EXIT_FAILED, EXIT_OK, EXIT_USAGE, USER_ERRORS, print_error

__all__ = ["inspect", "plan", "verify"]


def plan(args: argparse.Namespace, flags: Mapping[str, Any], beam_args: Sequence[str] = ()) -> int:
    """`tfrecord-etl plan`: the job's plan as lines (or one JSON object); nothing written."""
    from pipeline.cli.plan_summary import format_plan, summarize_plan
    from pipeline.engines.choose import choose_engine, engine_reason, workers
    from pipeline.job.config import load_config
    from pipeline.job.dates import apply_date, parse_date
    from pipeline.job.plan import plan_job

    try:
        date = parse_date(args.date) if args.date else None
        config = apply_date(load_config(args.config, flags), date)
        incremental = None
        if getattr(args, "incremental", False):  # the next span of the dataset, if any
            from pipeline.cli.incremental import preview

            span_config, incremental = preview(config, args)
            if span_config is None:
                return _nothing_new(args, incremental)
            config = span_config
        job = plan_job(config)  # reads the inputs, writes nothing
        engine = choose_engine(config.engine, beam_args, job)
        summary = summarize_plan(job)
        summary["engine"] = {
            "name": engine,
            "why": engine_reason(engine, config.engine, beam_args, job),
        }
        if engine == "in-process":
            count, why = workers(config.workers)
            # a work item goes whole to one worker: with fewer items than workers, some read
            # nothing (a grouped write's shards still go to every worker after)
            busy = min(count, len(job.work))
            summary["engine"].update(workers=count, workers_why=why, busy_workers=busy)
        if incremental is not None:
            summary["incremental"] = incremental
    except USER_ERRORS as err:
        print_error(err, args.debug)
        return EXIT_USAGE
    if args.json:
        print(json.dumps(summary, separators=(",", ":")), flush=True)
    else:
        print(format_plan(summary), flush=True)
    return EXIT_OK


def _nothing_new(args: argparse.Namespace, facts: dict[str, Any]) -> int:
    """`plan --incremental` when every input is in the dataset already."""
    if args.json:
        print(json.dumps({"incremental": facts}, separators=(",", ":")), flush=True)
    else:
        print(
            f"incremental: {facts['dataset']}: nothing new ({facts['inputs']['unchanged']} "
            f"input(s), all in spans {facts['spans']}); convert would write nothing",
            flush=True,
        )
    return EXIT_OK


def inspect(args: argparse.Namespace) -> int:
    """`tfrecord-etl inspect`: the report as indented JSON."""
    from pipeline.verify.inspect import inspect_path

    try:
        report = inspect_path(args.path, args.records)
    except USER_ERRORS as err:
        print_error(err, args.debug)
        return EXIT_FAILED
    print(json.dumps(report, indent=2, ensure_ascii=False))
    return EXIT_OK


def verify(args: argparse.Namespace) -> int:
    """`tfrecord-etl verify`: the report (or --json), then the JSON summary line."""
    start = time.monotonic()
    # TensorFlow parses a record only when the compiled check does not clear it: then without
    # its C++ info lines on stderr.
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    from pipeline.cli.summary import run_summary, summary_line
    from pipeline.output.dataset import read_output_manifest
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
        manifest = read_output_manifest(args.output)
    except USER_ERRORS as err:
        message = print_error(err, args.debug)
        print(summary_line(summary(EXIT_USAGE, "invalid", error=message)), flush=True)
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
