"""Where a local job's wall time goes, serial and parallel, and what more cores would give by the
same measurements: the in-process engine at `--workers 1` and `--workers 2` on one table.

Each run is a whole `convert` process whose steps are timed from inside (the functions the
launcher calls wrapped with a clock, nothing else changed):

- serial, in the launcher alone: interpreter start-up and imports; `plan_job` (footers, the
  first batch, the shard plan); the output's claim (lease, clearing); after the workers:
  renaming the shards into place, the statistics and bad-row files, the manifest; the summary;
- parallel, on every worker: the convert phase (read, encode, write as it goes, or spill) and
  the write phase (spilled blocks assembled, grouped shards written); inside the convert phase
  the launcher also merges each task's results (its statistics accumulators, counts and bad
  rows): timed apart, it is serial work done on one of the workers;
- the largest work item's share of the parallel work: no number of workers finishes the
  parallel phases sooner than that item (a Parquet file's row group, a CSV file).

Then a model (printed as such, not measured): T(N) = serial + merges + max(parallel(1) /
(N x e), largest item), with e the efficiency measured at 2 workers (parallel(1) / (2 x
parallel(2))) and the launcher's merges counted as serial (with many workers they wait on
them). The runs alternate (a change of load hits both) and the least of
`--rounds` is kept.

    python bench/scaling.py                          # 4M rows of the bench table
    python bench/scaling.py --rows 1000000 --rounds 1
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from measure import byte_compiled
from tables import write_parquet

ROW_GROUP_ROWS = 131_072
REPO = Path(__file__).resolve().parent.parent

# Run in the job's process: the launcher's steps wrapped with a clock; the timings as JSON on
# the last line of stderr.
DRIVER = r"""
import time
t_start = time.perf_counter()
import json, os, sys
timings = {}
from pipeline.cli.startup import one_blas_thread
one_blas_thread()  # as the console script does before numpy loads

def timed(module, name, key):
    fn = getattr(module, name)
    def wrapper(*args, **kwargs):
        t = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            timings[key] = timings.get(key, 0.0) + time.perf_counter() - t
    setattr(module, name, wrapper)

import pipeline.cli.convert as convert
import pipeline.engines.inprocess.engine as engine
from pipeline.cli.main import main
t_imported = time.perf_counter()
timed(convert, "plan_job", "plan")
timed(convert, "claim_output", "claim")
timed(engine, "_fit", "fit")
timed(engine, "_convert", "convert")
timed(engine, "_buckets", "buckets")
timed(engine, "_write", "write")
timed(engine, "finalize_shards", "finalize")
timed(engine, "write_statistics", "finalize")
timed(engine, "write_error_lines", "finalize")
timed(engine, "finish_job", "finalize")
timed(engine._Merged, "add_task", "merge")
timed(engine, "merge_output", "merge")
timed(engine, "assemble_task", "merge")  # a split task's files, assembled in the convert phase
code = main(sys.argv[1:], own_process=True)  # as the console script
t_end = time.perf_counter()
timings["imports"] = t_imported - t_start
timings["main"] = t_end - t_imported
sys.stdout.flush()
print(json.dumps({"code": code, **timings}), file=sys.stderr, flush=True)
os._exit(code)
"""


def run(source: Path, out: Path, workers: int) -> dict:
    cmd = [sys.executable, "-c", DRIVER, "convert", "--input", str(source), "--output", str(out),
           "--overwrite", "--quiet", "--workers", str(workers)]  # fmt: skip
    shutil.rmtree(out, ignore_errors=True)
    byte_compiled(REPO)
    os.sync()
    start = time.perf_counter()
    done = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - start
    last = done.stderr.strip().splitlines()[-1] if done.stderr.strip() else "{}"
    timings = json.loads(last)
    if timings.get("code") != 0:
        raise SystemExit(f"the run failed: {done.stderr[-2000:]}")
    timings["wall"] = wall
    timings["startup"] = wall - timings["imports"] - timings["main"]  # interpreter, exit
    return timings


def parts(t: dict) -> dict:
    """The run's wall time cut into serial and parallel parts."""
    parallel = t.get("fit", 0) + t["convert"] + t.get("buckets", 0) + t["write"]
    inside = t["plan"] + t["claim"] + parallel + t["finalize"]
    serial = t["startup"] + t["imports"] + (t["main"] - inside) + t["plan"] + t["claim"]
    serial += t["finalize"]
    return {"serial": serial, "parallel": parallel, "merge": t.get("merge", 0.0)}


def largest_item_share(source: Path) -> float:
    """The largest row group's share of the table's rows (the largest work item's share)."""
    import pyarrow.parquet as pq

    meta = pq.ParquetFile(source).metadata
    rows = [meta.row_group(i).num_rows for i in range(meta.num_row_groups)]
    return max(rows) / sum(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=4_000_000)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--workdir", help="where the input and output go (default: a temp dir)")
    args = parser.parse_args()
    work = Path(args.workdir or tempfile.mkdtemp(prefix="scaling-"))
    work.mkdir(parents=True, exist_ok=True)
    source = work / f"basic-{args.rows}.parquet"
    if not source.exists():
        write_parquet("basic", args.rows, source, ROW_GROUP_ROWS)
    best: dict[int, dict] = {}
    for _ in range(args.rounds):
        for workers in (1, 2):
            t = run(source, work / "out", workers)
            if workers not in best or t["wall"] < best[workers]["wall"]:
                best[workers] = t
    shutil.rmtree(work / "out", ignore_errors=True)
    keys = ["wall", "startup", "imports", "plan", "claim", "convert", "write", "finalize", "merge"]
    print(f"bench/scaling.py: {args.rows:,} rows, Parquet, {ROW_GROUP_ROWS:,}-row groups, gzip")
    print("  seconds       " + "".join(f"{k:>10}" for k in keys))
    for workers, t in sorted(best.items()):
        row = "".join(f"{t.get(k, 0.0):10.2f}" for k in keys)
        print(f"  {workers} worker(s)   {row}")
    p1, p2 = parts(best[1]), parts(best[2])
    efficiency = min(1.0, p1["parallel"] / (2 * p2["parallel"]))  # above 1: noise
    share = largest_item_share(source)
    print(
        f"  serial {p1['serial']:.2f} / {p2['serial']:.2f} s; parallel {p1['parallel']:.2f} / "
        f"{p2['parallel']:.2f} s (efficiency at 2 workers {efficiency:.2f}); merges in the "
        f"launcher {p1['merge']:.2f} / {p2['merge']:.2f} s; the largest work item "
        f"{share:.1%} of the rows"
    )
    for workers, t in sorted(best.items()):
        print(f"  N={workers:>2}: {t['wall']:6.2f} s  ({args.rows / t['wall']:>12,.0f} rows/s), "
              "measured")  # fmt: skip
    print("  model, not measured: T(N) = serial + merges + max(parallel(1) / (N x e), "
          "largest item)")  # fmt: skip
    serial = p2["serial"] + p2["merge"]  # the launcher's merges: serial once workers wait on it
    for n in (4, 8, 16, 32):
        parallel = max(p1["parallel"] / (n * (efficiency if n > 1 else 1.0)),
                       p1["parallel"] * share)  # fmt: skip
        total = serial + parallel
        print(
            f"  N={n:>2}: {total:6.2f} s  ({args.rows / total:>12,.0f} rows/s; "
            f"{best[1]['wall'] / total:5.2f}x one worker; serial {serial / total:.0%} of it)"
        )
    if not args.workdir:
        shutil.rmtree(work, ignore_errors=True)  # the generated input goes with the temp dir


if __name__ == "__main__":
    main()
