"""Throughput benchmark: the project's encoder, job and reader against the usual ways, one run.

    python bench/throughput.py --rows 1000000 [--table basic|strings|arrays] [--quick]
        [--small-rows N] [--rss-rows N] [--sections LIST] [--tfx-python PATH] [--json PATH]

Every ratio is against a baseline measured in the same process run, on the same data, on the
same machine at the same time: see bench/README.md for what each number means.

Sections (all by default; --quick runs a reduced set at small sizes):
  compression  per-block gzip (transforms.write.compression.gzip_compressor): size ratio, MB/s
  encoders     in-memory table -> serialized Examples, one core
  e2e          Parquet -> TFRecord jobs as subprocesses: wall time, steady state, peak RSS
  workers      1 vs 2 local Beam workers on a 4-file input
  rss          peak RSS of the job at --rows vs --rss-rows rows
  reader       pipeline.reader.load_dataset vs TFRecordDataset -> map(parse_single_example)

The code, by what it does (modules next to this file, imported by name: the script's
directory is on sys.path when it runs as a script):
  tables.py           the seeded benchmark tables and their Parquet files
  baselines.py        the per-row and tfx_bsl encoders, the TFX-style pipeline worker
  measure.py          timings, process-tree RSS, job runs as subprocesses
  sections_encode.py  compression, encoders
  sections_e2e.py     e2e, workers, rss
  sections_reader.py  reader
  report.py           the markdown report and the targets
  throughput.py       the command line, the run, the worker dispatch

This file also runs as its own worker process (`_worker ...`, used internally) for the
TFX-style pipeline and the tfx_bsl encoder; those modes import nothing from the project, so
they can run under another Python environment (--tfx-python).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import shutil
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from baselines import worker_tfx_bsl_encode, worker_tfx_style
from measure import REPO, load_avg
from report import report, targets
from sections_e2e import section_e2e, section_rss, section_workers
from sections_encode import section_compression, section_encoders
from sections_reader import section_reader
from tables import TABLES, split_parquet, write_parquet

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")  # before any TensorFlow import

SECTIONS = ("compression", "encoders", "e2e", "workers", "rss", "reader")
QUICK_SECTIONS = ("compression", "encoders", "e2e", "reader")


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rows", type=int, default=1_000_000, help="rows of the benchmark table")
    p.add_argument("--table", choices=TABLES, default="basic")
    p.add_argument("--quick", action="store_true", help="small sizes, fewer runs: a smoke check")
    p.add_argument("--small-rows", type=int, help="the small run of the steady-state pair (rows/5)")
    p.add_argument("--rss-rows", type=int, default=8_000_000, help="rows for the RSS-scaling run")
    p.add_argument("--per-row-rows", type=int, default=100_000, help="subsample for per-row encode")
    p.add_argument("--compression-rows", type=int, default=262_144, help="rows for the gzip table")
    p.add_argument("--batch-rows", type=int, default=32768, help="encode_table batch (job default)")
    p.add_argument("--row-group-rows", type=int, default=131_072, help="Parquet row group size")
    p.add_argument("--reader-batch", type=int, default=1024)
    p.add_argument("--reader-rows", type=int, default=300_000, help="records each reader way reads")
    p.add_argument(
        "--workers-rows",
        type=int,
        default=16_000_000,
        help="rows of the 4-file input for 1 vs 2 workers (the small run has a quarter)",
    )
    p.add_argument(
        "--e2e-repeat",
        type=int,
        default=2,
        help="job runs: best of N for runs shorter than --repeat-below seconds",
    )
    p.add_argument("--repeat-below", type=float, default=30.0)
    p.add_argument("--repeat", type=int, default=3, help="in-process timings: best of N")
    p.add_argument("--sections", help=f"comma-separated subset of {','.join(SECTIONS)}")
    p.add_argument(
        "--tfx-python",
        help="a Python with tfx_bsl installed, for its encoder and the TFX-style pipeline using it",
    )
    p.add_argument(
        "--workdir", help="where the Parquet inputs and outputs go (default: a temp dir)"
    )
    p.add_argument("--keep", action="store_true", help="keep the work directory")
    p.add_argument("--json", help="also write the results to this JSON file")
    p.add_argument("--markdown", help="also write the report to this file")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["_worker"]:
        mode = argv[1]
        return {"tfx-style": worker_tfx_style, "tfx-bsl-encode": worker_tfx_bsl_encode}[mode](
            argv[2:]
        )
    args = _parser().parse_args(argv)
    if args.quick:
        args.rows = min(args.rows, 20_000)
        args.per_row_rows = min(args.per_row_rows, 5_000)
        args.compression_rows = min(args.compression_rows, 20_000)
        args.repeat = 1
        args.e2e_repeat = 1
        args.reader_rows = min(args.reader_rows, args.rows)
    args.small_rows = args.small_rows or max(1, args.rows // 5)
    args.workers_small_rows = max(1, args.workers_rows // 4)
    sections = (
        args.sections.split(",")
        if args.sections
        else list(QUICK_SECTIONS if args.quick else SECTIONS)
    )
    args.section_list = sections
    unknown = set(sections) - set(SECTIONS)
    if unknown:
        print(f"unknown sections {sorted(unknown)}; known: {', '.join(SECTIONS)}", file=sys.stderr)
        return 2
    sys.path.insert(0, str(REPO))
    import apache_beam

    work = (
        Path(args.workdir) if args.workdir else Path(tempfile.mkdtemp(prefix="tfrecord-etl-bench-"))
    )
    work.mkdir(parents=True, exist_ok=True)
    res: dict[str, Any] = {
        "meta": {
            "table": args.table,
            "rows": args.rows,
            "small_rows": args.small_rows,
            "quick": args.quick,
            "date": datetime.date.today().isoformat(),
            "cpus": os.cpu_count(),
            "machine": platform.processor() or platform.machine(),
            "python": platform.python_version(),
            "beam": apache_beam.__version__,
            "pyarrow": pa.__version__,
            "load_start": load_avg(),
            "reader_batch": args.reader_batch,
            "sections": sections,
            "argv": argv,
        }
    }
    try:
        with open("/proc/cpuinfo") as f:
            model = next(
                (line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), ""
            )
        res["meta"]["machine"] = model or res["meta"]["machine"]
    except OSError:
        pass
    t0 = time.monotonic()
    print(
        f"# tables: {args.table}, {args.rows:,} rows (small run {args.small_rows:,}); "
        f"work dir {work}"
    )
    files: dict[str, Any] = {
        "large": work / f"{args.table}-{args.rows}.parquet",
        "small": work / f"{args.table}-{args.small_rows}.parquet",
    }
    write_parquet(args.table, args.rows, files["large"], args.row_group_rows)
    write_parquet(args.table, args.small_rows, files["small"], args.row_group_rows)
    if "workers" in sections:
        for label, rows in (("small", args.workers_small_rows), ("large", args.workers_rows)):
            whole = work / f"{args.table}-{rows}.parquet"
            if not whole.exists():
                write_parquet(args.table, rows, whole, args.row_group_rows)
            files[f"parts_{label}"] = split_parquet(
                whole, work / f"parts-{label}", 4, args.row_group_rows
            )
    table = pq.read_table(str(files["large"]))
    import numba  # noqa: F401  (numba and Beam, imported above, load before the timer)

    from transforms.encode.schema import plan_features

    sample = table.slice(0, min(table.num_rows, 10_000))
    # The kernel module loads its helpers (compiled with explicit signatures) on import.
    first = time.perf_counter()
    from transforms.encode.records import encode_table

    enc, _ = encode_table(sample, plan_features(sample.schema), "bench", 0, False)
    res["meta"]["encode_first_call_s"] = time.perf_counter() - first
    res["meta"]["record_bytes"] = int(enc.offsets[-1]) / sample.num_rows
    res["meta"]["parquet_mb"] = files["large"].stat().st_size / 1e6
    print(
        f"  {table.num_columns} columns, {res['meta']['record_bytes']:.0f} B/record, "
        f"Parquet {res['meta']['parquet_mb']:.1f} MB ({time.monotonic() - t0:.1f} s); "
        "encoder start: kernel import + encode_table first call (numba compile/cache load) "
        f"{res['meta']['encode_first_call_s']:.2f} s"
    )
    try:
        if "compression" in sections:
            print("# compression")
            res["compression"] = section_compression(table, args)
        if "encoders" in sections:
            print("# encoders")
            res["encoders"] = section_encoders(table, files["large"], args)
        del table
        if "e2e" in sections:
            print("# end to end")
            res["e2e"] = section_e2e(files, args, work)
        elif "reader" in sections:
            print("# the outputs the reader reads")
            res["reader_outputs"] = section_e2e(files, args, work)
        if "workers" in sections:
            print("# workers")
            res["workers"] = section_workers(args, work, files)
        if "rss" in sections:
            print("# RSS scaling")
            res["rss"] = section_rss(args, work, res.get("e2e", []))
        if "reader" in sections:
            print("# reader")
            res["reader"] = section_reader(res.get("e2e") or res.get("reader_outputs", []), args)
    finally:
        res["meta"]["load_end"] = load_avg()
        res["meta"]["seconds"] = time.monotonic() - t0
        res["targets"] = targets(res)
        text = report(res)
        print()
        print(text)
        if args.json:
            Path(args.json).write_text(json.dumps(res, indent=2, default=str))
        if args.markdown:
            Path(args.markdown).write_text(text)
        if not args.keep and not args.workdir:
            shutil.rmtree(work, ignore_errors=True)
    print(f"({res['meta']['seconds']:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
