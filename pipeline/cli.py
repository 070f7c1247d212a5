"""Command line: `tfrecord-etl convert`, `inspect`, `verify` and `report`. Argument parsing only
(the commands run in pipeline/launch.py, `report` in pipeline/report/write.py); flags `convert`
does not know are Beam pipeline options and go to PipelineOptions unchanged."""

from __future__ import annotations

import argparse
import logging
import re
from collections.abc import Sequence

from pipeline import launch
from pipeline.flags import OPTIONS, add_flags

__all__ = ["main"]


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="tfrecord-etl",
        description="Convert Parquet/CSV tables to sharded tf.train.Example TFRecord files.",
        epilog="Other flags are Beam pipeline options (--runner, --direct_num_workers, ...).",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    c = sub.add_parser("convert", help="run the conversion job")
    c.add_argument("--config", help="YAML file; each flag below is also a key there (flags win)")
    c.add_argument("--date", help="run date YYYY-MM-DD: fills {date} in --input and --output")
    add_flags(c)  # every option of the job (pipeline/flags.py)
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
    r = sub.add_parser(
        "report",
        help="write <output>/report.html: splits, shards, bad rows, types, a plot per feature",
        description="Write a self-contained report.html into an output from its manifest and "
        "statistics (nothing is fetched when it is viewed). Exit 0: written; 1: it could not be "
        "read or written.",
    )
    r.add_argument("output", help="the output directory (holding manifest.json)")
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
        flags = {o.key: getattr(args, o.key) for o in OPTIONS if o.flag}
        return launch.convert(args, flags, beam_args)
    if beam_args:
        parser.error(f"unrecognized arguments: {' '.join(beam_args)}")
    if args.command == "verify":
        return launch.verify(args)
    if args.command == "inspect":
        return launch.inspect(args)
    if args.command == "report":
        from pipeline.report.write import report_command  # no Beam, no TensorFlow

        return report_command(args.output)
    return launch.EXIT_USAGE
