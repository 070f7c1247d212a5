"""Command line: `tfrecord-etl convert`, `inspect` and `verify`. Argument parsing only; flags
`convert` does not know are Beam pipeline options and go to PipelineOptions unchanged."""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
import sys
import time
from collections.abc import Sequence
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

from pipeline.build import build_pipeline, plan_job
from pipeline.config import load_config
from pipeline.dataflow import (
    describe_dry_run,
    fill_dataflow_options,
    is_dataflow,
    is_dry_run,
    runner_name,
    write_job_file,
)
from pipeline.inspect_output import inspect_path
from pipeline.manifest import read_manifest
from pipeline.schedule import apply_date, parse_date, run_summary, summary_line
from transforms.write import COMPRESSIONS, GZIP_BACKENDS, SINKS

__all__ = ["DEFAULT_RUNNER", "main"]

# Beam's DirectRunner (2.68+) first downloads a Prism binary from the network. FnApiRunner is
# Beam's in-process portable runner: same semantics, nothing fetched.
DEFAULT_RUNNER = "FnApiRunner"

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="tfrecord-etl",
        description="Convert Parquet/CSV tables to sharded tf.train.Example TFRecord files.",
        epilog="Other flags are Beam pipeline options (--runner, --direct_num_workers, ...).",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    c = sub.add_parser("convert", help="run the conversion job")
    c.add_argument("--input", nargs="+", help="paths or globs (local, gs://, any Beam filesystem)")
    c.add_argument("--output", help="output directory")
    c.add_argument("--config", help="YAML file; each flag below is also a key there (flags win)")
    c.add_argument("--date", help="run date YYYY-MM-DD: fills {date} in --input and --output")
    c.add_argument("--format", choices=("parquet", "csv"), help="default: from the file names")
    c.add_argument(
        "--num-shards",
        "--num_shards",
        type=int,
        help="files per split; default 0: as many as --shard-mb gives",
    )
    c.add_argument(
        "--shard-mb", "--shard_mb", type=float, help="target shard size in MiB, default 128"
    )
    c.add_argument(
        "--shuffle",
        nargs="?",
        const=True,
        type=_true_or_false,
        help="write every split in a seeded global shuffle (in the config: also a list of splits)",
    )
    c.add_argument(
        "--shuffle-seed", "--shuffle_seed", type=int, help="the shuffle's seed, default 0"
    )
    c.add_argument("--compression", choices=COMPRESSIONS, help="default gzip")
    c.add_argument(
        "--compression-level",
        "--compression_level",
        type=int,
        help="gzip level (isal 0-3, default 2; zlib 0-9, default 6)",
    )
    c.add_argument(
        "--gzip-backend", "--gzip_backend", choices=GZIP_BACKENDS, help="default isal (ISA-L)"
    )
    c.add_argument("--sink", choices=SINKS, help="default blocks")
    c.add_argument(
        "--batch-rows", "--batch_rows", type=int, help="rows per Arrow batch, default 32768"
    )
    c.add_argument(
        "--overwrite",
        nargs="?",
        const=True,
        type=_true_or_false,
        help="replace a complete output (also --overwrite=true|false, as templates pass it)",
    )
    c.add_argument(
        "--transform-artifacts",
        "--transform_artifacts",
        help="apply the fitted analyzers of a previous output (its dir or its transform/)",
    )
    c.add_argument(
        "--max-bad-rows",
        "--max_bad_rows",
        type=int,
        help="bad rows (to <output>/_errors/) allowed before the job fails; default 0",
    )
    c.add_argument(
        "--max-bad-fraction",
        "--max_bad_fraction",
        type=float,
        help="or the fraction of the rows read that may be bad; default 0",
    )
    c.add_argument(
        "--expect-schema",
        "--expect_schema",
        help="a previous manifest (or output dir): fail before writing if a column disappeared "
        "or changed type",
    )
    i = sub.add_parser("inspect", help="manifest summary and first records as JSON")
    i.add_argument("path", help="an output directory or one .tfrecord[.gz|.deflate] file")
    i.add_argument("-n", "--records", type=int, default=5, help="records to show (default 5)")
    v = sub.add_parser(
        "verify",
        help="check every record of an output against its manifest, and optionally its source",
        description="Check an output: shards, crcs, parse against the manifest's features, "
        "counts; with --source, the values row by row. Exit 0: every check passed; 1: a "
        "mismatch or corruption (the report names it); 2: nothing checked (no manifest, bad "
        "flags, a source that cannot be planned).",
    )
    v.add_argument("output", help="the output directory (holding manifest.json)")
    v.add_argument(
        "--source",
        nargs="*",
        metavar="PATH",
        help="compare values with the source: these paths or globs, or with no PATH the files "
        "the run read (the manifest lists them)",
    )
    v.add_argument(
        "--config",
        help="the run's config file, for a manifest without a config section (implies --source)",
    )
    v.add_argument(
        "--sample",
        type=_sample,
        help="compare a seeded sample of the source rows: a fraction (0.05) or about N rows "
        "(5000); every record is still read and checked (implies --source)",
    )
    v.add_argument("--seed", type=int, default=0, help="the sample's seed (default 0)")
    v.add_argument(
        "--json", action="store_true", help="the report as one JSON line (with the summary keys)"
    )
    v.add_argument(
        "--max-findings",
        "--max_findings",
        type=int,
        default=20,
        help="findings shown per check (default 20; all are counted)",
    )
    return parser


def _sample(text: str) -> tuple[float | None, int | None]:
    """--sample: (fraction, None) for "0.05", (None, count) for "5000"."""
    if re.fullmatch(r"\d+", text):
        if int(text) < 1:
            raise argparse.ArgumentTypeError("a number of rows is at least 1")
        return None, int(text)
    try:
        fraction = float(text)
    except ValueError:
        fraction = -1.0
    if not 0.0 < fraction <= 1.0:
        raise argparse.ArgumentTypeError(
            f"expected a fraction in (0, 1] or a number of rows, got {text!r}"
        )
    return fraction, None


def _true_or_false(text: str) -> bool:
    value = {"true": True, "false": False}.get(text.lower())
    if value is None:
        raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")
    return value


def _beam_options(args: Sequence[str]) -> PipelineOptions:
    args = list(args)
    if not any(a == "--runner" or a.startswith("--runner=") for a in args):
        args.append(f"--runner={DEFAULT_RUNNER}")
    return PipelineOptions(args)


def _summary(output: str, seconds: float) -> str:
    manifest = read_manifest(output)
    files = [FileSystems.join(output, f) for s in manifest["splits"].values() for f in s["files"]]
    sizes = [m.size_in_bytes for r in FileSystems.match(files) for m in r.metadata_list]
    rate = manifest["rows"] / seconds if seconds > 0 else 0.0
    return (
        f"rows: {manifest['rows']}  shards: {len(files)}  bytes: {sum(sizes)}  "
        f"compression: {manifest['compression']}  seconds: {seconds:.1f} ({rate:,.0f} rows/s)\n"
        f"output: {output}  (manifest: {output.rstrip('/')}/manifest.json)"
    )


def _submitted_only(result: PipelineResult, options: PipelineOptions) -> bool:
    """True when the job was handed over and not waited for: a template launch (the service
    submits the job) or --no_wait_until_finish on a runner that runs the job elsewhere."""
    if not getattr(result, "has_job", True):
        return True
    no_wait = options.view_as(StandardOptions).no_wait_until_finish
    return bool(no_wait) and not PipelineState.is_terminal(result.state)


def convert(args: argparse.Namespace, beam_args: Sequence[str]) -> int:
    flags = {
        "input": args.input,
        "output": args.output,
        "format": args.format,
        "num_shards": args.num_shards,
        "shard_mb": args.shard_mb,
        "shuffle": args.shuffle,
        "shuffle_seed": args.shuffle_seed,
        "compression": args.compression,
        "compression_level": args.compression_level,
        "gzip_backend": args.gzip_backend,
        "sink": args.sink,
        "batch_rows": args.batch_rows,
        "overwrite": args.overwrite,
        "transform_artifacts": args.transform_artifacts,
        "max_bad_rows": args.max_bad_rows,
        "max_bad_fraction": args.max_bad_fraction,
        "expect_schema": args.expect_schema,
    }
    start = time.monotonic()
    date, output = None, args.output

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
        plan = plan_job(config, clear_output=not dry_run)  # a dry run deletes nothing
        if plan.new_columns:
            print(
                f"tfrecord-etl: note: new column(s) against {config.expect_schema}: "
                f"{list(plan.new_columns)}",
                file=sys.stderr,
            )
        pipeline = beam.Pipeline(options=options)  # Beam validates its options here
    except (ValueError, OSError) as err:
        print(f"tfrecord-etl: error: {err}", file=sys.stderr)
        return report(EXIT_USAGE, "invalid", error=str(err))
    job = {
        "runner": runner_name(options),
        "job_name": options.view_as(GoogleCloudOptions).job_name,
    }
    try:
        with pipeline as p:
            build_pipeline(p, plan)
        result = p.result
        if dry_run:
            built = describe_dry_run(result)
            job_file = options.view_as(DebugOptions).dataflow_job_file
            if job_file:
                write_job_file(job_file, result)
            print(f"dry run: job {built['job_name']} built, not submitted ({job['runner']})")
            return report(EXIT_OK, "dry_run", **{**job, **built, "job_file": job_file})
        if _submitted_only(result, options):
            job_id = result.job_id() if getattr(result, "has_job", False) else None
            return report(EXIT_OK, "submitted", **job, job_id=job_id)
        if result.state != PipelineState.DONE:
            raise RuntimeError(f"the runner ended the job in state {result.state}")
    except Exception as err:  # the runner's failure: report it, exit non-zero, no manifest
        print(f"tfrecord-etl: error: the job failed: {err}", file=sys.stderr)
        return report(EXIT_FAILED, "failed", **job, error=str(err))
    print(_summary(config.output, time.monotonic() - start))
    return report(EXIT_OK, "succeeded", **job, manifest=read_manifest(config.output))


def verify(args: argparse.Namespace) -> int:
    """`tfrecord-etl verify`: the report (or --json), then the JSON summary line."""
    start = time.monotonic()
    # TensorFlow (to parse the records) is imported by this command only; without its C++ info
    # lines on stderr.
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    from pipeline.verify import SourceRequest, verify_output
    from pipeline.verify_report import format_report

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


def _no_empty_error_sink_warning(record: logging.LogRecord) -> bool:
    """Beam warns when a sink that may skip empty output has nothing to finalize: that is the
    bad-row sink of every clean run, not a problem worth a warning."""
    return not record.getMessage().startswith("No shards found to finalize")


def main(argv: Sequence[str] | None = None) -> int:
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    logging.getLogger("apache_beam.io.filebasedsink").addFilter(_no_empty_error_sink_warning)
    parser = _parser()
    args, beam_args = parser.parse_known_args(argv)
    if args.command == "convert":
        return convert(args, beam_args)
    if beam_args:
        parser.error(f"unrecognized arguments: {' '.join(beam_args)}")
    if args.command == "verify":
        return verify(args)
    if args.command == "inspect":
        try:
            report = inspect_path(args.path, args.records)
        except (ValueError, OSError) as err:
            print(f"tfrecord-etl: error: {err}", file=sys.stderr)
            return EXIT_FAILED
        print(json.dumps(report, indent=2, ensure_ascii=False))
        return EXIT_OK
    return EXIT_USAGE
