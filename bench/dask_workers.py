"""The job on a Dask cluster: steady-state rows/s with 1 vs 2 Dask workers, and their ratio.

For each worker count a fresh local cluster (tests/dask_cluster.py: a `dask scheduler` and
one-process, one-thread `dask worker`s on 127.0.0.1) runs `tfrecord-etl convert` with
`--runner=DaskRunner` (the project's, pipeline/engines/beam/dask_runner.py) on the bench table
(bench/tables.py) split over `--files` Parquet files, at two sizes; the steady rate is the row
difference over the wall-time difference (measure.steady), which takes out the fixed cost (starting
the client, building and translating the graph, planning). A first, unmeasured run warms the workers
(imports, compiled kernels), as a long-running cluster would be.

    python bench/dask_workers.py                      # 400,000 and 2,000,000 rows, 8 files
    python bench/dask_workers.py --small-rows 100000 --rows 500000 --table strings

The machine's cores are shared: compare the ratio within one run, not figures across runs.
Worker RSS is each worker process's peak (VmHWM) over its cluster's runs.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
sys.path[:0] = [str(BENCH), str(BENCH.parent / "tests")]

from dask_cluster import DaskCluster  # noqa: E402  (tests/: the cluster the tests use too)
from measure import REPO, fixed_cost, load_avg, measure, steady  # noqa: E402
from sections_e2e import _cli as convert_command  # noqa: E402
from tables import TABLES, write_parquet  # noqa: E402

RUNNER = "pipeline.engines.beam.dask_runner.DaskRunner"


def _peak_rss_mb(pid: int) -> float:
    """A process's peak resident set (VmHWM), in MB; 0 once it is gone."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def _inputs(work: Path, table: str, rows: int, files: int) -> Path:
    """`rows` rows of `table` in `files` Parquet files (the same rows whatever the split)."""
    directory = work / f"in-{rows}"
    per_file = -(-rows // files)
    for i in range(files):
        n = min(per_file, rows - i * per_file)
        write_parquet(table, n, directory / f"part-{i:03d}.parquet", row_group_rows=50_000)
    return directory


def _cmd(source: Path, out: Path, address: str) -> list[str]:
    """The e2e benchmark's convert command, on the Dask cluster at `address`."""
    runner = [f"--runner={RUNNER}", f"--dask_client_address={address}"]
    return convert_command(str(source / "*.parquet"), out, runner)


def run_workers(workers: int, sources: dict[int, Path], work: Path, repeat: int) -> dict[str, Any]:
    """Warm-up, then the small and the large run on a fresh cluster of `workers` workers."""
    with DaskCluster(workers, log_dir=work) as cluster:
        small, large = sorted(sources)
        out = work / f"out-{workers}"
        log = work / f"w{workers}"
        measure(_cmd(sources[small], out, cluster.address), out, log / "warm.log", small, 1, 0)
        runs = {
            n: measure(_cmd(sources[n], out, cluster.address), out, log / f"{n}.log", n, repeat, 60)
            for n in (small, large)
        }
        rss = [_peak_rss_mb(w.pid) for w in cluster.workers]
    rate = steady(runs[small], runs[large], small, large)
    return {
        "workers": workers,
        "runs": runs,
        "steady_rows_s": rate,
        "fixed_s": fixed_cost(runs[large], large, rate),
        "worker_rss_mb": rss,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=2_000_000, help="rows of the large run")
    parser.add_argument("--small-rows", type=int, default=400_000, help="rows of the small run")
    parser.add_argument("--files", type=int, default=8, help="Parquet files the rows are in")
    parser.add_argument("--table", choices=TABLES, default="basic")
    parser.add_argument("--repeat", type=int, default=1, help="best of N runs (runs < 60 s)")
    parser.add_argument("--keep", action="store_true", help="keep the work directory")
    args = parser.parse_args(argv)
    if not 0 < args.small_rows < args.rows:
        parser.error("--small-rows must be positive and below --rows")
    work = Path(tempfile.mkdtemp(prefix="tfrecord-etl-dask-bench-"))
    try:
        sources = {
            n: _inputs(work, args.table, n, args.files) for n in (args.small_rows, args.rows)
        }
        print(
            f"table {args.table}, {args.files} files, rows {args.small_rows:,} / {args.rows:,}; "
            f"workers: 1 process x 1 thread each; repo {REPO}; load {load_avg()}"
        )
        results = [run_workers(n, sources, work, args.repeat) for n in (1, 2)]
        for r in results:
            walls = ", ".join(
                f"{n:,} rows {run['wall_s']:.1f} s ({run['rows_s']:,.0f} rows/s, client tree RSS "
                f"{run['tree_rss_mb']:.0f} MB)"
                for n, run in r["runs"].items()
            )
            rate = r["steady_rows_s"]
            fixed = r["fixed_s"]
            print(
                f"{r['workers']} worker(s): {walls}; steady "
                f"{'n/a' if rate is None else f'{rate:,.0f} rows/s'}, fixed "
                f"{'n/a' if fixed is None else f'{fixed:.1f} s'}; worker peak RSS "
                f"{', '.join(f'{m:.0f} MB' for m in r['worker_rss_mb'])}"
            )
        one, two = (r["steady_rows_s"] for r in results)
        if one and two:
            print(f"ratio steady rows/s, 2 workers / 1 worker: {two / one:.2f}")
        else:
            print("ratio: n/a (a run failed, or the large run was not slower than the small one)")
        print(f"load after: {load_avg()}")
    finally:
        if args.keep:
            print(f"work directory: {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
