"""What the statistics cost (`--stats`, transforms/stats/), measured in one run on one table.

1. In process, one core: per batch of `--batch-rows`, `encode_table` alone against the
   statistics alone (a `StatisticsAccumulator` the batches are added to, as the job's encoder
   does; best of `--repeat`): the statistics' CPU time as a fraction of the encoder's.
2. The job end to end on `--engine` (in-process by default, or beam: FnApiRunner),
   `--stats=true` against `--stats=false`, each at `--small-rows` and
   `--rows` (runs interleaved: on, off, off, on, so a change of load hits both alike): the
   steady rows/s of each (row difference over wall-time difference) and their ratio, and the
   steady CPU time per row of each (the job's process tree; less moved by other load).
3. `--sections features`: in process, the steady CPU time per row of each feature's statistics
   (the batches after the first fifth, added to the split's accumulator), and of the row keys.

    python bench/stats_cost.py --rows 300000 --table basic
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np
from measure import convert_cmd, load_avg, measure, steady, timed
from tables import TABLES, make_table, write_parquet

from transforms.batch import TableBatch
from transforms.encode.columns import leaf_array
from transforms.encode.records import encode_table
from transforms.encode.schema import plan_features
from transforms.stats.accumulator import StatisticsAccumulator
from transforms.stats.features import SplitStats, feature_statistics, row_keys


def in_process(table_kind: str, rows: int, batch_rows: int, repeat: int) -> dict[str, float]:
    table = make_table(table_kind, rows)
    specs = plan_features(table.schema)
    batches = [table.slice(i, batch_rows) for i in range(0, rows, batch_rows)]

    def encode() -> None:
        for i, b in enumerate(batches):
            encode_table(b, specs, "bench.parquet", i * batch_rows, framed=True)

    def stats() -> None:
        accumulator = StatisticsAccumulator(specs)
        for i, b in enumerate(batches):
            accumulator.add("train", TableBatch(b, "bench.parquet", i * batch_rows))

    encode()  # compile and warm up
    stats()
    enc, st = timed(encode, repeat), timed(stats, repeat)
    return {"encode_s": enc["cpu_s"], "stats_s": st["cpu_s"], "ratio": st["cpu_s"] / enc["cpu_s"]}


def per_feature(table_kind: str, rows: int, batch_rows: int) -> dict[str, float]:
    """Steady CPU µs per row of each feature's statistics (the batches after the first fifth,
    added to the accumulator the first fifth filled), and of the row keys."""
    table = make_table(table_kind, rows)
    specs = plan_features(table.schema)
    starts = list(range(0, rows, batch_rows))
    warm = max(1, len(starts) // 5)
    stats = SplitStats()
    for start in starts[:warm]:
        batch = table.slice(start, batch_rows)
        stats.add(batch, specs, "bench.parquet", np.arange(start, start + batch.num_rows))
    steady_rows = rows - starts[warm]
    out: dict[str, float] = {}
    c = time.process_time()
    for start in starts[warm:]:
        row_keys("bench.parquet", np.arange(start, min(start + batch_rows, rows)))
    out["row keys"] = (time.process_time() - c) / steady_rows * 1e6
    for spec in specs:
        into = stats.features[spec.name]
        c = time.process_time()
        for start in starts[warm:]:
            batch = table.slice(start, batch_rows)
            keys = row_keys("bench.parquet", np.arange(start, start + batch.num_rows))
            into = feature_statistics(leaf_array(batch, spec.path), spec, keys, into, {})
        out[spec.name] = (time.process_time() - c) / steady_rows * 1e6 - out["row keys"]
    return out


def end_to_end(args: argparse.Namespace, work: Path) -> dict[str, dict[str, float]]:
    sizes = {"small": args.small_rows, "large": args.rows}
    files = {}
    for label, n in sizes.items():
        files[label] = work / f"{args.table}-{n}.parquet"
        write_parquet(args.table, n, files[label], 131_072)
    runs: dict[bool, dict[str, dict]] = {True: {}, False: {}}
    for label, n in sizes.items():
        for on in (True, False, False, True):
            out = work / f"out-{label}-{on}"
            stats = f"--stats={'true' if on else 'false'}"
            job = convert_cmd(files[label], out, stats, "--engine", args.engine)
            r = measure(job, out, work / "logs" / out.name, n, 1, 0)
            print(
                f"  stats={on} {n:,} rows: {r['wall_s']:.2f} s, {r['cpu_s']:.2f} CPU-s "
                f"(load {r['load']})"
            )
            best = runs[on].get(label)
            if best is None or r["wall_s"] < best["wall_s"]:
                runs[on][label] = r
    out = {}
    for on in (True, False):
        small, large = runs[on]["small"], runs[on]["large"]
        rate = steady(small, large, args.small_rows, args.rows)
        cpu = (large["cpu_s"] - small["cpu_s"]) / (args.rows - args.small_rows) * 1e6
        out[f"stats={on}"] = {
            "steady_rows_s": rate,
            "large_wall_s": large["wall_s"],
            "steady_cpu_us_row": cpu,
        }
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=300_000)
    parser.add_argument("--small-rows", type=int, default=None)
    parser.add_argument("--table", default="basic", choices=TABLES)
    parser.add_argument("--batch-rows", type=int, default=32_768)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--sections", default="process,e2e", help="any of process,features,e2e")
    parser.add_argument(
        "--engine", default="in-process", choices=("in-process", "beam"), help="the job's engine"
    )
    args = parser.parse_args()
    args.small_rows = args.small_rows or args.rows // 5
    sections = args.sections.split(",")
    print(f"table {args.table}, {args.rows:,} rows; load {load_avg()}")
    if "process" in sections:
        r = in_process(args.table, args.rows, args.batch_rows, args.repeat)
        print(
            f"in process, one core: encode_table {r['encode_s']:.2f} CPU-s, "
            f"statistics {r['stats_s']:.2f} CPU-s: statistics = {r['ratio']:.1%} of encoding"
        )
    if "features" in sections:
        parts = per_feature(args.table, args.rows, args.batch_rows)
        print(f"in process, steady CPU µs a row: total {sum(parts.values()):.3f}")
        for name, us in sorted(parts.items(), key=lambda item: -item[1]):
            print(f"  {name:12s} {us:.4f}")
    if "e2e" in sections:
        with tempfile.TemporaryDirectory() as tmp:
            r = end_to_end(args, Path(tmp))
        on, off = r["stats=True"]["steady_rows_s"], r["stats=False"]["steady_rows_s"]
        for name, entry in r.items():
            rate = entry["steady_rows_s"]
            print(
                f"job {name}: steady {rate:,.0f} rows/s" if rate else f"job {name}: no steady rate",
                f"({entry['steady_cpu_us_row']:.3f} CPU-µs a row)",
            )
        if on and off:
            print(f"job steady rows/s, stats on / off: {on / off:.3f} (cost {1 - on / off:.1%})")
        cpu_on, cpu_off = (
            r["stats=True"]["steady_cpu_us_row"],
            r["stats=False"]["steady_cpu_us_row"],
        )
        if cpu_on > 0 and cpu_off > 0:
            print(f"job steady CPU a row, off / on: {cpu_off / cpu_on:.3f}")
    print(f"load at the end {load_avg()}")


if __name__ == "__main__":
    main()
