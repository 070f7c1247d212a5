"""Where the conversion job spends its time: the job in this process under cProfile.

    python bench/profile_job.py --rows 1000000 [--table basic] [--compression gzip]
        [--sink blocks] [--gzip-backend isal] [--top 25] [--save PATH.prof]

The job runs on FnApiRunner in this process (in-memory mode: bundles are processed in the
calling thread), so cProfile sees reading, encoding and writing. A summary splits the
wall time into the job's own steps by the cumulative time of their key functions; the top
functions by own time follow. Save with --save and browse with `python -m pstats PATH.prof`
or snakeviz. For native frames (numba, zlib, Arrow) use py-spy on the CLI instead:
`py-spy record --native -o job.svg -- python -m pipeline convert --input ... --output ...`.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import shutil
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

# (label, file suffix, function name): cumulative time of these is what the summary shows.
KEY_FUNCTIONS = [
    ("plan (before the pipeline runs)", "pipeline/job/plan.py", "plan_job"),
    ("read: Parquet -> TableBatch", "transforms/read/work.py", "read_work_item"),
    ("encode: encode_table (all)", "transforms/encode/records.py", "encode_table"),
    ("  arrow -> kernel columns", "transforms/encode/columns.py", "to_kernel_column"),
    ("  kernel: encode_records", "transforms/encode/kernel/example.py", "encode_records"),
    ("write: blocks sink write_record", "transforms/write.py", "write_record"),
    ("write: split into records (tfrecordio)", "transforms/encode/records.py", "records"),
    ("write: Beam tfrecordio write_record", "apache_beam/io/tfrecordio.py", "write_record"),
    ("write: file handle write", "apache_beam/io/filesystemio.py", "write"),
    ("write: Beam compressed file write", "apache_beam/io/filesystem.py", "write"),
    ("stats: MergeStats", "transforms/encode/records.py", "merge"),
    ("finalize: rename/move shards", "apache_beam/io/filebasedsink.py", "finalize_write"),
]


def _cumtime(stats: pstats.Stats, suffix: str, name: str) -> tuple[float, int]:
    total, calls = 0.0, 0
    for (filename, _, func), (_, ncalls, _, cum, _) in stats.stats.items():  # type: ignore[attr-defined]
        if func == name and filename.endswith(suffix):
            total += cum
            calls += ncalls
    return total, calls


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rows", type=int, default=1_000_000)
    p.add_argument("--table", default="basic", choices=("basic", "strings", "arrays"))
    p.add_argument("--input", help="profile on this input instead of a generated table")
    p.add_argument("--compression", default="gzip", choices=("gzip", "zlib", "none"))
    p.add_argument("--gzip-backend", choices=("isal", "zlib"))
    p.add_argument("--compression-level", type=int)
    p.add_argument("--sink", default="blocks", choices=("blocks", "tfrecordio"))
    p.add_argument("--batch-rows", type=int)
    p.add_argument("--row-group-rows", type=int, default=131_072)
    p.add_argument("--top", type=int, default=25)
    p.add_argument("--save", help="write the raw profile here (pstats format)")
    p.add_argument("--keep", action="store_true", help="keep the generated input and output")
    args = p.parse_args(argv)

    import apache_beam as beam
    from apache_beam.options.pipeline_options import PipelineOptions
    from throughput import write_parquet

    from pipeline.engines.beam.build import build_pipeline
    from pipeline.job.config import load_config
    from pipeline.job.plan import plan_job

    work = Path(tempfile.mkdtemp(prefix="tfrecord-etl-profile-"))
    source = args.input
    if source is None:
        source = str(work / f"{args.table}-{args.rows}.parquet")
        write_parquet(args.table, args.rows, Path(source), args.row_group_rows)
    flags = {
        "input": [source],
        "output": str(work / "out"),
        "compression": args.compression,
        "gzip_backend": args.gzip_backend,
        "compression_level": args.compression_level,
        "sink": args.sink,
        "batch_rows": args.batch_rows,
        "overwrite": True,
    }
    config = load_config(None, flags)
    profiler = cProfile.Profile()
    start = time.perf_counter()
    profiler.enable()
    plan = plan_job(config)
    with beam.Pipeline(options=PipelineOptions(["--runner=FnApiRunner"])) as pipeline:
        build_pipeline(pipeline, plan)
    profiler.disable()
    wall = time.perf_counter() - start
    if args.save:
        profiler.dump_stats(args.save)
    stats = pstats.Stats(profiler)
    total = sum(v[2] for v in stats.stats.values())  # type: ignore[attr-defined]
    level = config.compression_level
    try:
        from transforms.write.compression import check_level

        level = check_level(config.gzip_backend, level)
    except ImportError:
        pass
    print(
        f"job: {args.rows if args.input is None else source} rows, compression "
        f"{config.compression} ({config.gzip_backend} level {level}), "
        f"sink {config.sink}: {wall:.2f} s wall under the profiler "
        f"(profiled own time {total:.2f} s)\n"
    )
    print(f"{'step':44} {'cum s':>8} {'% wall':>7} {'calls':>8}")
    for label, suffix, name in KEY_FUNCTIONS:
        cum, calls = _cumtime(stats, suffix, name)
        if calls:
            print(f"{label:44} {cum:8.2f} {100 * cum / wall:6.1f}% {calls:8d}")
    out = io.StringIO()
    pstats.Stats(profiler, stream=out).sort_stats("tottime").print_stats(args.top)
    print("\nTop functions by own time:")
    text = out.getvalue()
    print(text[text.find("   ncalls") :] if "   ncalls" in text else text)
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
