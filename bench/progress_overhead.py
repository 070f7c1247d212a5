"""What the progress reports cost: `convert` of the benchmark table with progress (the writers
report, a launcher thread polls and prints) against `--quiet` (no reports, no thread), in one
run, on the same file, runs interleaved.

    python bench/progress_overhead.py                      # 200,000 rows of `basic`, best of 3
    python bench/progress_overhead.py --rows 50000 --table strings --repeat 5 --num-shards 2

Each run is a fresh `convert` subprocess (stderr not a terminal: a log line every 5 s); the
time compared is the job's own, the `seconds` of the JSON summary line. The machine may be
shared: compare the ratio of one run.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from tables import TABLES, write_parquet

ROOT = Path(__file__).resolve().parent.parent


def _run(source: Path, out: Path, extra: list[str]) -> float:
    proc = subprocess.run(
        [sys.executable, "-m", "pipeline", "convert", "--input", str(source), "--output",
         str(out), "--overwrite", *extra],
        cwd=ROOT, capture_output=True, text=True, check=True,
    )  # fmt: skip
    return float(json.loads(proc.stdout.splitlines()[-1])["seconds"])


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rows", type=int, default=200_000)
    p.add_argument("--table", choices=TABLES, default="basic")
    p.add_argument("--repeat", type=int, default=3, help="runs of each, interleaved: best of N")
    p.add_argument("--num-shards", type=int, default=0, help="0: the rolling write")
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as work:
        source = Path(work) / "table.parquet"
        write_parquet(args.table, args.rows, source, 131_072)
        extra = ["--num-shards", str(args.num_shards)] if args.num_shards else []
        _run(source, Path(work) / "warm", ["--quiet", *extra])  # the encoder's compile cache
        times: dict[str, list[float]] = {"quiet": [], "progress": []}
        for _ in range(args.repeat):
            times["quiet"].append(_run(source, Path(work) / "q", ["--quiet", *extra]))
            times["progress"].append(_run(source, Path(work) / "p", extra))
    best = {name: min(t) for name, t in times.items()}
    print(f"table {args.table}, {args.rows:,} rows, num_shards {args.num_shards}, best of "
          f"{args.repeat}")  # fmt: skip
    for name, t in times.items():
        print(f"  {name:9s} {best[name]:7.2f} s   (runs: {', '.join(f'{x:.2f}' for x in t)})")
    middle = {name: statistics.median(t) for name, t in times.items()}
    print(f"  progress / quiet: best {best['progress'] / best['quiet']:.3f}, "
          f"median {middle['progress'] / middle['quiet']:.3f}")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
