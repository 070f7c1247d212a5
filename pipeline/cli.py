"""Command line: `tfrecord-etl convert`. Argument parsing only; flags it does not know are
Beam pipeline options and go to PipelineOptions unchanged."""

from __future__ import annotations

import argparse
import logging
import sys
import time
from collections.abc import Sequence

import apache_beam as beam
from apache_beam.io.filesystems import FileSystems
from apache_beam.options.pipeline_options import PipelineOptions

from pipeline.build import build_pipeline, plan_job
from pipeline.config import load_config
from pipeline.manifest import read_manifest
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
    c.add_argument("--format", choices=("parquet", "csv"), help="default: from the file names")
    c.add_argument("--num-shards", type=int, help="files per split; 0 (default) = runner decides")
    c.add_argument("--compression", choices=COMPRESSIONS, help="default gzip")
    c.add_argument(
        "--compression-level",
        type=int,
        help="gzip level (isal 0-3, default 2; zlib 0-9, default 6)",
    )
    c.add_argument("--gzip-backend", choices=GZIP_BACKENDS, help="default isal (ISA-L)")
    c.add_argument("--sink", choices=SINKS, help="default blocks")
    c.add_argument("--batch-rows", type=int, help="rows per Arrow batch, default 32768")
    c.add_argument(
        "--overwrite", action="store_true", default=None, help="replace a complete output"
    )
    return parser


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


def convert(args: argparse.Namespace, beam_args: Sequence[str]) -> int:
    flags = {
        "input": args.input,
        "output": args.output,
        "format": args.format,
        "num_shards": args.num_shards,
        "compression": args.compression,
        "compression_level": args.compression_level,
        "gzip_backend": args.gzip_backend,
        "sink": args.sink,
        "batch_rows": args.batch_rows,
        "overwrite": args.overwrite,
    }
    start = time.monotonic()
    try:
        config = load_config(args.config, flags)
        plan = plan_job(config)
    except (ValueError, OSError) as err:
        print(f"tfrecord-etl: error: {err}", file=sys.stderr)
        return EXIT_USAGE
    try:
        with beam.Pipeline(options=_beam_options(beam_args)) as p:
            build_pipeline(p, plan)
    except Exception as err:  # the runner's failure: report it, exit non-zero, no manifest
        print(f"tfrecord-etl: error: the job failed: {err}", file=sys.stderr)
        return EXIT_FAILED
    print(_summary(config.output, time.monotonic() - start))
    return EXIT_OK


def main(argv: Sequence[str] | None = None) -> int:
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    args, beam_args = _parser().parse_known_args(argv)
    if args.command == "convert":
        return convert(args, beam_args)
    return EXIT_USAGE
