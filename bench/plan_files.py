"""Planning time for many small Parquet files: the code before the one-footer-read plan against
the current tree, in one run, on the same files.

    python bench/plan_files.py                       # 100, 1,000 and 10,000 files of 100 rows
    python bench/plan_files.py --files 100,2000 --rows-per-file 50 --repeat 3

The "before" tree is the commit `--before` (default 77e7abc, the layout commit) unpacked with
`git archive` into the work directory; each measurement is a fresh subprocess whose import path
is one tree, so both plan the same files with their own code. Each subprocess first plans one
file (imports, the encoder's compile) and then times `plan_job` (match, schema, work items,
first batch, shard plan), best of `--repeat`. The current tree is also timed stage by stage:
matching alone (the floor of any plan that reads no footer), the footers read one by one (what
the plan does with local files) and with a pool of 16 threads (what it does on an object
store). The files sit in the page cache (just written): this measures the
per-file work of the plan, not a cold disk or an object store's latency, where the thread pool
gains more. The machine is shared: compare the ratios of one run.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parent.parent  # the current tree (a worker imports another)


def _pattern(directory: Path, files: int, total: int) -> str:
    """A glob for the first `files` of `total` files named part-NNNNN.parquet."""
    if files == total:
        return str(directory / "part-*.parquet")
    digits = len(str(files - 1))
    if files != 10**digits:
        raise SystemExit(f"--files: {files} is not a power of ten below the largest count")
    return str(directory / ("part-" + "0" * (5 - digits) + "[0-9]" * digits + ".parquet"))


def make_files(directory: Path, files: int, rows: int) -> None:
    """`files` Parquet files of `rows` rows each of the bench's basic table."""
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    from bench.tables import make_table

    directory.mkdir(parents=True, exist_ok=True)
    table = make_table("basic", files * rows)
    for i in range(files):
        pq.write_table(table.slice(i * rows, rows), str(directory / f"part-{i:05d}.parquet"))


def _worker(pattern: str, warm: str, repeat: int, detail: bool) -> dict:
    """Run inside one tree (its path first on sys.path): plan_job's time for `pattern`."""
    from pipeline.job.config import load_config
    from pipeline.job.plan import plan_job

    def config(inputs: str):
        return load_config(None, {"input": [inputs], "output": tempfile.gettempdir() + "/x"})

    plan_job(config(warm))  # imports, numba compile
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        plan = plan_job(config(pattern))
        best = min(best, time.perf_counter() - start)
    out = {
        "seconds": best,
        "files": len(plan.paths),
        "work_items": len(plan.work),
        "rows": sum(w.num_rows or 0 for w in plan.work),
        "tasks": len(plan.shards.tasks),
    }
    if detail:
        from transforms.read.inputs import match_inputs
        from transforms.read.parquet_reader import parquet_footer

        start = time.perf_counter()
        paths = match_inputs([pattern])
        out["match_seconds"] = time.perf_counter() - start
        start = time.perf_counter()
        [parquet_footer(p) for p in paths]  # what the plan does with local files
        out["footers_1_seconds"] = time.perf_counter() - start
        start = time.perf_counter()
        with ThreadPoolExecutor(16) as pool:  # what it does on an object store
            list(pool.map(parquet_footer, paths))
        out["footers_16_seconds"] = time.perf_counter() - start
    return out


def _measure(tree: Path, pattern: str, warm: str, repeat: int, detail: bool) -> dict:
    env = dict(os.environ, PYTHONPATH=str(tree))
    cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", pattern, "--warm", warm]
    cmd += ["--repeat", str(repeat)] + (["--detail"] if detail else [])
    done = subprocess.run(cmd, env=env, cwd=tree, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"the plan failed in {tree}:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--files", default="100,1000,10000", help="file counts (powers of ten)")
    ap.add_argument("--rows-per-file", type=int, default=100)
    ap.add_argument("--repeat", type=int, default=2, help="plans timed per case: best of N")
    ap.add_argument("--before", default="77e7abc", help="the commit to compare against")
    ap.add_argument("--workdir", default=None)
    ap.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--warm", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--detail", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        print(json.dumps(_worker(args.worker, args.warm, args.repeat, args.detail)))
        return
    counts = sorted(int(c) for c in args.files.split(","))
    work = Path(args.workdir or tempfile.mkdtemp(prefix="plan_files_"))
    data, old = work / "files", work / "before"
    if not (data / f"part-{counts[-1] - 1:05d}.parquet").exists():
        print(f"writing {counts[-1]} files of {args.rows_per_file} rows ...", file=sys.stderr)
        make_files(data, counts[-1], args.rows_per_file)
    if not old.exists():
        old.mkdir(parents=True)
        archive = subprocess.run(
            ["git", "-C", str(ROOT), "archive", args.before], capture_output=True, check=True
        )
        subprocess.run(["tar", "-x", "-C", str(old)], input=archive.stdout, check=True)
    warm = str(data / "part-00000.parquet")
    print(
        "| files | before s | after s | speed-up | before ms/file | after ms/file | "
        "work items | rows |"
    )
    print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    details = []
    for n in counts:
        pattern = _pattern(data, n, counts[-1])
        before = _measure(old, pattern, warm, args.repeat, False)
        after = _measure(ROOT, pattern, warm, args.repeat, True)
        if (before["work_items"], before["rows"]) != (after["work_items"], after["rows"]):
            raise SystemExit(f"{n} files: the plans differ: {before} vs {after}")
        b, a = before["seconds"], after["seconds"]
        print(
            f"| {n:,} | {b:.2f} | {a:.2f} | {b / a:.2f}x | {1000 * b / n:.3f} | "
            f"{1000 * a / n:.3f} | {after['work_items']:,} | {after['rows']:,} |",
            flush=True,
        )
        details.append((n, after))
    print("\nthe current tree, stage by stage (seconds):\n")
    print("| files | match | footers, 1 thread | footers, 16 threads | pool speed-up |")
    print("| ---: | ---: | ---: | ---: | ---: |")
    for n, d in details:
        one, pool = d["footers_1_seconds"], d["footers_16_seconds"]
        print(f"| {n:,} | {d['match_seconds']:.2f} | {one:.2f} | {pool:.2f} | {one / pool:.2f}x |")
    print(f"\nfiles and the before tree: {work}", file=sys.stderr)


if __name__ == "__main__":
    main()
