"""Reading cost of the new input layouts, against the old ones, in one run, on the same rows:

- Hive partitions: the bench's basic table with a `day` (8 values) and a `region` (4 values)
  column, as 32 Parquet files that hold both columns (flat) against the same files under
  `day=.../region=.../` without them (the reader adds them per batch);
- JSON Lines against CSV: the same table (its list column left out: CSV has none) as one CSV
  file and one JSON Lines file, and the JSON Lines file with one bad line in its middle (the
  file is then read again line by line from its first row not yet passed on).

    python bench/read_inputs.py                  # 200,000 rows
    python bench/read_inputs.py --rows 50000 --repeat 1

Each figure is the best of `--repeat` reads of every work item of the planned job
(`read_work_item`, batches of 32,768 rows), in this process, the cases taking turns; the plan
and a first read are made before the clock starts. The machine may be shared: compare the
ratios of one run.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.measure import load_avg, timed  # noqa: E402
from bench.tables import make_table  # noqa: E402
from pipeline.job.config import load_config  # noqa: E402
from pipeline.job.plan import plan_job  # noqa: E402
from transforms.read.work import read_work_item  # noqa: E402

DAYS = [f"2026-12-{d:02d}" for d in range(1, 9)]
REGIONS = ["eu", "us", "asia", "sa"]


def _keyed(rows: int) -> pa.Table:
    table = make_table("basic", rows)
    day = pc.take(pa.array(DAYS), pa.array([i * len(DAYS) // rows for i in range(rows)]))
    region = pa.array([REGIONS[i % len(REGIONS)] for i in range(rows)])
    return table.append_column("day", day).append_column("region", region)


def write_partitions(table: pa.Table, work: Path) -> tuple[Path, Path]:
    """The table as 32 flat files (keys inside) and as the same files partitioned (keys in
    the paths)."""
    flat, hive = work / "flat", work / "hive"
    flat.mkdir()
    for day in DAYS:
        for region in REGIONS:
            mask = pc.and_(pc.equal(table["day"], day), pc.equal(table["region"], region))
            part = table.filter(mask)
            pq.write_table(part, flat / f"part-{day}-{region}.parquet")
            folder = hive / f"day={day}" / f"region={region}"
            folder.mkdir(parents=True)
            pq.write_table(part.drop_columns(["day", "region"]), folder / "part-0.parquet")
    return flat, hive


def write_text(table: pa.Table, work: Path, bad_line: bool) -> tuple[Path, Path]:
    """The table without its list column as CSV and as JSON Lines (`bad_line`: one line in the
    middle cut short)."""
    nested = [f.name for f in table.schema if pa.types.is_nested(f.type)]
    table = table.drop_columns(nested)
    csv_path = work / "table.csv"
    pacsv.write_csv(table, csv_path)
    json_path = work / ("bad.jsonl" if bad_line else "table.jsonl")
    rows = table.to_pylist()
    with open(json_path, "w", encoding="utf-8") as f:
        for i, row in enumerate(rows):
            line = json.dumps(row)
            f.write((line[:-1] if bad_line and i == len(rows) // 2 else line) + "\n")
    return csv_path, json_path


def read_all(pattern: str, out: Path) -> tuple[Callable[[], None], list[int]]:
    """The job planned for `pattern`, and a function that reads every work item of it (the
    rows it read land in the list)."""
    plan = plan_job(load_config(None, {"input": [pattern], "output": str(out)}))
    config = plan.config
    rows = [0]

    def run() -> None:
        rows[0] = 0
        for item in plan.work:
            for batch in read_work_item(
                item, plan.fmt, plan.schema, config.csv, config.batch_rows, lambda _: None
            ):
                rows[0] += batch.table.num_rows

    return run, rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-read-") as tmp:
        work = Path(tmp)
        table = _keyed(args.rows)
        flat, hive = write_partitions(table, work)
        csv_path, json_path = write_text(table, work, bad_line=False)
        _, bad_path = write_text(table, work, bad_line=True)
        cases = {
            "parquet, keys in the files": str(flat),
            "parquet, keys in the paths": str(hive),
            "csv": str(csv_path),
            "jsonl": str(json_path),
            "jsonl, one bad line": str(bad_path),
        }
        runs = {}
        for name, pattern in cases.items():
            runs[name] = read_all(pattern, work / "out")
            runs[name][0]()  # a first read: imports, the page cache
        seconds = {name: float("inf") for name in cases}
        for _ in range(args.repeat):  # round robin: a burst of load touches every case alike
            for name, (run, _) in runs.items():
                seconds[name] = min(seconds[name], timed(run)["wall_s"])
        for name, (_, rows) in runs.items():
            print(f"{name:28s} {seconds[name]:7.3f} s  {rows[0]:,} rows", flush=True)
    print(f"\nload average: {load_avg()}")
    ratios = {
        "partition keys from the paths / in the files": (
            "parquet, keys in the paths",
            "parquet, keys in the files",
        ),
        "jsonl / csv": ("jsonl", "csv"),
        "jsonl with one bad line / jsonl": ("jsonl, one bad line", "jsonl"),
    }
    for label, (a, b) in ratios.items():
        print(f"{label}: {seconds[a] / seconds[b]:.2f}x")


if __name__ == "__main__":
    main()
