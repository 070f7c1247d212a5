"""The two engines of `convert` (pipeline/engines/choose.py), in one run on one table: Beam's
FnApiRunner (`--engine beam`, the default runner) against the in-process engine
(`--engine in-process`), each a whole `python -m pipeline convert` process.

Per size (`--small-rows`, `--rows`), the runs of the two engines alternate (beam, in-process,
in-process, beam, ...: a change of load hits both alike); the least wall time of each is kept.
Printed: wall seconds per size, the steady rows/s (row difference over wall-time difference)
of each engine, and the ratios in-process / beam.

    python bench/engines.py --rows 2000000 --small-rows 400000
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from measure import convert_cmd, load_avg, measure, steady
from tables import TABLES, write_parquet

ENGINES = ("beam", "in-process")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--small-rows", type=int, default=None)
    parser.add_argument("--table", default="basic", choices=TABLES)
    parser.add_argument("--rounds", type=int, default=2, help="runs of each engine per size")
    args = parser.parse_args()
    small = args.small_rows or args.rows // 5
    print(f"table {args.table}; {small:,} and {args.rows:,} rows; load {load_avg()}")
    best: dict[tuple[str, int], dict] = {}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        for n in (small, args.rows):
            source = work / f"{args.table}-{n}.parquet"
            write_parquet(args.table, n, source, 131_072)
            for r in range(args.rounds):
                for engine in ENGINES if r % 2 == 0 else ENGINES[::-1]:
                    out = work / f"out-{engine}"
                    run = measure(
                        convert_cmd(source, out, "--engine", engine),
                        out,
                        work / "logs" / engine,
                        n,
                        1,
                        0,
                    )
                    wall, load = run["wall_s"], run["load"]
                    print(f"  {engine:>10} {n:>11,} rows: {wall:.2f} s (load {load})")
                    if (engine, n) not in best or run["wall_s"] < best[engine, n]["wall_s"]:
                        best[engine, n] = run
    rates = {}
    best_sizes = (small, args.rows)
    for engine in ENGINES:
        rates[engine] = steady(best[engine, small], best[engine, args.rows], small, args.rows)
        walls = ", ".join(f"{n:,} rows {best[engine, n]['wall_s']:.2f} s" for n in best_sizes)
        rate = f"{rates[engine]:,.0f} rows/s" if rates[engine] else "no steady rate"
        print(f"{engine}: {walls}; steady {rate}")
    for n in (small, args.rows):
        ratio = best["beam", n]["wall_s"] / best["in-process", n]["wall_s"]
        print(f"{n:,} rows: in-process takes 1/{ratio:.2f} of beam's wall time")
    if rates["beam"] and rates["in-process"]:
        print(f"steady rows/s, in-process / beam: {rates['in-process'] / rates['beam']:.2f}")
    print(f"load at the end {load_avg()}")


if __name__ == "__main__":
    main()
