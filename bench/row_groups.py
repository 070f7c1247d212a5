"""One Parquet file of small row groups against the same rows in one row group, in one run.

The same table (`--rows` rows of an int64, a float64 and a short string column) is written as
one file with one row group and as files of `--groups` row groups each; `python -m pipeline
convert` runs on each as a whole command (in-process engine, every core, gzip), the files
alternating, the least wall time of `--rounds` kept. Printed: wall seconds and the ratio to the
one-group file. Every output is checked to hold every row.

    python bench/row_groups.py                      # 200,000 rows; 1,000, 4,000, 20,000 groups
    python bench/row_groups.py --rows 50000 --groups 500,5000 --rounds 1
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parent))

from measure import convert_cmd, load_avg, run_process


def table(rows: int) -> pa.Table:
    ids = np.arange(rows, dtype=np.int64)
    return pa.table({"id": ids, "x": ids * 0.5, "s": pa.array([f"row {i}" for i in ids])})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--groups", default="1000,4000,20000")
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-row-groups-"))
    try:
        data = table(args.rows)
        counts = [1, *(int(g) for g in args.groups.split(","))]
        files = {}
        for groups in counts:
            files[groups] = work / f"groups-{groups}.parquet"
            pq.write_table(data, files[groups], row_group_size=-(-args.rows // groups))
        best: dict[int, float] = {}
        for _ in range(args.rounds):
            for groups, path in files.items():
                out = work / "out"
                r = run_process(convert_cmd(path, out, "--quiet"), work / f"log-{groups}.txt")
                if r.get("rc"):
                    raise SystemExit(f"convert of {path.name} failed: see {work}")
                rows = json.loads((out / "manifest.json").read_text(encoding="utf-8"))["rows"]
                if rows != args.rows:
                    raise SystemExit(f"{path.name}: {rows} rows written of {args.rows}")
                best[groups] = min(best.get(groups, float("inf")), r["wall_s"])
                shutil.rmtree(out)
        print(f"bench/row_groups.py: {args.rows:,} rows, least of {args.rounds}, load {load_avg()}")
        print("| row groups | rows a group | wall s | / one row group |")
        print("| ---: | ---: | ---: | ---: |")
        for groups in counts:
            real = pq.ParquetFile(files[groups]).metadata.num_row_groups
            print(f"| {real:,} | {args.rows // real:,} | {best[groups]:.2f} | "
                  f"{best[groups] / best[1]:.2f} |")  # fmt: skip
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
