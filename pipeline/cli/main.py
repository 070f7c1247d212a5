"""Command line: `tfrecord-etl convert`, `plan`, `inspect`, `verify` and `report`. Argument
parsing only (the commands run in pipeline/cli/convert.py, pipeline/cli/commands.py and
pipeline/report/write.py); flags `convert` does not know are Beam pipeline options and go to
PipelineOptions unchanged, provided some Beam option takes them
(pipeline/engines/beam/options.py: else the command stops on the mistyped flag).

Nothing heavy is imported here: `--help` and the commands that read an output start without
Beam or TensorFlow; each command imports what it needs when it runs (docs/cli.md).
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import logging
import os
import re
import sys
from collections.abc import Sequence
from typing import NoReturn

from pipeline.cli.errors import EXIT_INTERRUPTED, EXIT_USAGE, closest
from pipeline.job.flags import add_flags, config_flags

__all__ = ["main", "run"]


EXIT_BROKEN_PIPE = 128 + 13  # what a shell reports for a process ended by SIGPIPE


class _Parser(argparse.ArgumentParser):
    """argparse with a usage error on one line (what is wrong, where the flags are listed)
    instead of the whole usage text; exit code 2 as argparse's."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"tfrecord-etl: error: {message} (see {self.prog} --help)\n")


def _common() -> argparse.ArgumentParser:
    """The flags of every command."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--debug", action="store_true", help="show the traceback of an error, not one line"
    )
    return common


def _job_flags(parser: argparse.ArgumentParser) -> None:
    """The flags of a job (`convert`, and `plan` which takes the same)."""
    parser.add_argument(
        "--config", help="YAML file; each flag below is also a key there (flags win)"
    )
    parser.add_argument("--date", help="run date YYYY-MM-DD: fills {date} in --input and --output")
    add_flags(parser)  # every option of the job (pipeline/job/flags.py)


def _incremental_flags(parser: argparse.ArgumentParser) -> None:
    """`--incremental` and its flags (convert runs it, plan shows what it would do)."""
    parser.add_argument(
        "--incremental",
        action="store_true",
        help="convert only the inputs new since the last run, into a new numbered span of the "
        "dataset in --output (span-NNNNN/ and dataset.json, the ledger of converted inputs)",
    )
    parser.add_argument(
        "--reconvert-changed",
        action="store_true",
        help="with --incremental: an input changed since it was converted makes its span "
        "convert again into the new span, the old span retired (without: the run stops)",
    )
    parser.add_argument(
        "--refit",
        action="store_true",
        help="with --incremental: fit the transforms' analyzers again on this span instead of "
        "reusing the last span's",
    )


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="tfrecord-etl",
        description="Convert Parquet/CSV tables to sharded tf.train.Example TFRecord files.",
        epilog="Other flags of convert and plan are Beam pipeline options (--runner, "
        "--direct_num_workers, ...).",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    common = [_common()]
    c = sub.add_parser("convert", help="run the conversion job", parents=common)
    _job_flags(c)
    _incremental_flags(c)
    c.add_argument(
        "--dates",
        metavar="START..END",
        help="a backfill: one run per date of the range (both included), as --date would run "
        "it; dates whose output is committed are skipped",
    )
    c.add_argument(
        "--parallel-dates",
        type=int,
        default=1,
        metavar="N",
        help="with --dates: run N dates at once (default 1), sharing the cores",
    )
    p = sub.add_parser(
        "plan",
        help="what convert would read and write, without running it",
        description="Plan the job as convert would (same flags) and print what it would read "
        "(files, row groups, rows, bytes), write (rows, shards and bytes per split) and the "
        "work items; reads the inputs' footers and first rows, writes nothing.",
        parents=common,
    )
    _job_flags(p)
    _incremental_flags(p)
    p.add_argument("--json", action="store_true", help="the plan as one JSON object")
    i = sub.add_parser("inspect", help="manifest summary and first records as JSON", parents=common)
    i.add_argument("path", help="an output directory or one .tfrecord[.gz|.deflate] file")
    i.add_argument("-n", "--records", type=int, default=5, help="records to show (default 5)")
    v = sub.add_parser(
        "verify",
        parents=common,
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
        parents=common,
    )
    r.add_argument("output", help="the output directory (holding manifest.json)")
    for command in (c, p, i, v, r):
        command.set_defaults(parser=command)
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


def _no_traceback(record: logging.LogRecord) -> bool:
    """Beam logs the traceback of an exception in a step before the runner raises it; the
    command reports the failure once, on one line (the traceback with --debug)."""
    return record.exc_info is None


def _unknown(args: Sequence[str], parser: argparse.ArgumentParser, command: str) -> str:
    """The usage error for arguments nobody takes: the first, and the flag it may have meant."""
    arg = args[0]
    if not arg.startswith("-"):
        return f"unexpected argument {arg!r}"
    name = arg.split("=", 1)[0]
    known = [s for a in parser._actions for s in a.option_strings]
    near = closest(name, known)
    hint = f"; did you mean {near}?" if near else ""
    beam = " nor a Beam pipeline option" if command in ("convert", "plan") else ""
    return f"unknown flag {name}: not a flag of {command}{beam}{hint}"


def run() -> NoReturn:
    """The console script and `python -m pipeline`: `main()`, then the process ends without
    the interpreter's teardown. Freeing the compiled kernel's functions takes numba about
    0.3 s at exit (a quarter of a small convert, measured on the bundled sample); nothing the
    command wrote depends on it: the exit handlers run (logging, multiprocessing, a Dask
    client's), the standard streams are flushed, then `os._exit` ends the process. A reader
    that closes stdout early (`| head`) ends it quietly with 141, as SIGPIPE would."""
    try:
        code = main(own_process=True)
    except BrokenPipeError:
        with contextlib.suppress(OSError):  # no flush of the rest into the closed pipe
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        code = EXIT_BROKEN_PIPE
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    run_exit_handlers = getattr(atexit, "_run_exitfuncs", None)
    if run_exit_handlers is None:  # not CPython: the usual exit
        sys.exit(code)
    run_exit_handlers()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(code)


def main(argv: Sequence[str] | None = None, own_process: bool = False) -> int:
    """`tfrecord-etl ARGS`: the exit code. Ctrl-C stops any command with one line and 130.
    `own_process`: the process is the command's alone (`run()`), see `_main`."""
    try:
        return _main(argv, own_process)
    except KeyboardInterrupt:
        print("tfrecord-etl: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED


def _main(argv: Sequence[str] | None, own_process: bool = False) -> int:
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    logging.getLogger("apache_beam.io.filebasedsink").addFilter(_no_empty_error_sink_warning)
    parser = _parser()
    args, beam_args = parser.parse_known_args(argv)
    command = args.command
    sub = args.parser  # the command's own parser
    steps = logging.getLogger("apache_beam.runners.common")
    if args.debug:
        steps.removeFilter(_no_traceback)
    else:
        steps.addFilter(_no_traceback)
    if own_process:
        from pipeline.cli.startup import (
            COMMAND_MODULES,
            import_paused,
            one_blas_thread,
            pyarrow_without_pandas,
        )

        one_blas_thread()  # before numpy loads: 0.1 s of spinning threads, see its module
        import_paused(COMMAND_MODULES.get(command, ()))  # 0.17 s of convert's start: see there
        if command in ("convert", "plan"):
            pyarrow_without_pandas()  # 0.3-0.5 s of a job's serial start-up: see its module
    if command in ("convert", "plan") and beam_args:
        from pipeline.engines.beam.options import unknown_beam_args  # imports Beam's options

        try:
            unknown = unknown_beam_args(beam_args)
        except ValueError as err:  # a Beam option with a value Beam refuses
            sub.error(f"{err} (a Beam pipeline option)")
        if unknown:
            sub.error(_unknown(unknown, sub, command))
        from transforms.fs import set_beam_options

        # planning, the lease and the clearing reach an object store as the job will
        # (--s3_endpoint_url, --azure_connection_string, ...)
        set_beam_options(beam_args)
    if command in ("convert", "plan"):
        flags = config_flags(args)
        if (args.reconvert_changed or args.refit) and not args.incremental:
            sub.error("--reconvert-changed and --refit are for --incremental runs")
        if command == "plan":
            from pipeline.cli import commands

            return commands.plan(args, flags, beam_args)
        if args.parallel_dates != 1 and not args.dates:
            sub.error("--parallel-dates is for a backfill: give --dates START..END")
        if args.dates:
            from pipeline.cli.backfill import backfill

            given = list(sys.argv[1:] if argv is None else argv)
            return backfill(args, flags, given[given.index("convert") + 1 :])
        if args.incremental:
            from pipeline.cli.incremental import convert_incremental

            return convert_incremental(args, flags, beam_args)
        from pipeline.cli import convert as launch

        return launch.convert(args, flags, beam_args)
    if beam_args:
        sub.error(_unknown(beam_args, sub, command))
    from pipeline.cli import commands

    if command == "verify":
        return commands.verify(args)
    if command == "report":
        from pipeline.report.write import report_command  # no Beam, no TensorFlow

        return report_command(args.output)
    return commands.inspect(args)
