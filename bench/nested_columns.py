"""Nested columns against the same values flattened by hand, in one process.

`--case maps` (default): a generated table of an id, a float, a map<string, int64> column and a
list<struct<x: int32, tag: string>> column (0-5 entries per row, some null rows). The same rows
flattened by hand are the baseline: the map as two list columns (keys, values), the list of
structs as one list column per field.
`--case ragged`: an id, a float and a list<list<list<int64>>> column ragged at every level
(0-3 lists at each level, some null rows); the baseline holds the same features made by hand:
the innermost values as one list column per row and the lengths of each inner level as list
columns named as the job names them (NAME__row_lengths_1, NAME__row_lengths_2).
`--case nulls`: an id, a float, a list<int64> (0-5 values) and the list<list<list<int64>>> of
`ragged`, with 5% of the items of every level null (values, inner lists of both levels) beside
5% null rows; the baseline is the same table without the nulls inside the lists (the same
offsets and values, the inner validity bitmaps dropped; null rows kept). Its records differ
(the nulls' positions, NAME__nulls_K, are written), so they are not compared; the ratio is the
cost of writing nulls inside lists.
The two tables of `maps` and `ragged` give the same features, so the records are checked equal
first. Measured,
best of `--repeat`, in this process: `encode_table` over `--batch-rows` batches (the leaves
found along their paths, the compiled serializer). Prints rows per second of each and the ratio
nested / flattened, with the load average (the machine may be shared: repeat, keep the best).

    python bench/nested_columns.py --rows 500000
    python bench/nested_columns.py --case ragged --rows 500000
    python bench/nested_columns.py --case nulls --rows 500000
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from measure import load_avg, timed

from transforms.encode.records import encode_table
from transforms.encode.schema import ColumnOptions, plan_features

POINT = pa.struct([("x", pa.int32()), ("tag", pa.string())])


def make_tables(rows: int, seed: int = 0) -> tuple[pa.Table, pa.Table]:
    """(nested, flattened by hand): the same features."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(0, 6, rows)
    offsets = np.zeros(rows + 1, np.int32)
    np.cumsum(lengths, out=offsets[1:])
    total = int(offsets[-1])
    nulls = pa.array(rng.random(rows) < 0.05)
    keys = pa.array([f"k{i % 50}" for i in range(total)])
    values = pa.array(rng.integers(-(10**9), 10**9, total), pa.int64())
    xs = pa.array(rng.integers(0, 1000, total).astype(np.int32))
    tags = pa.array([f"t{i % 17}" for i in range(total)])
    off = pa.array(offsets)
    nested = pa.table(
        {
            "id": pa.array(np.arange(rows), pa.int64()),
            "f": pa.array(rng.random(rows).astype(np.float32)),
            "m": pa.MapArray.from_arrays(off, keys, values, mask=nulls),
            "p": pa.ListArray.from_arrays(
                off, pa.StructArray.from_arrays([xs, tags], fields=list(POINT)), mask=nulls
            ),
        }
    )

    def listed(child: pa.Array) -> pa.Array:
        return pa.ListArray.from_arrays(off, child, mask=nulls)

    flat = pa.table(
        {
            "id": nested.column("id"),
            "f": nested.column("f"),
            "m.key": listed(keys),
            "m.value": listed(values),
            "p.x": listed(xs),
            "p.tag": listed(tags),
        }
    )
    return nested, flat


def make_ragged_tables(rows: int, seed: int = 0) -> tuple[pa.Table, pa.Table]:
    """(a list ragged at three levels, the same features by hand), built from offsets."""
    rng = np.random.default_rng(seed)

    def offsets(count: int) -> np.ndarray:
        out = np.zeros(count + 1, np.int32)
        np.cumsum(rng.integers(0, 4, count), out=out[1:])
        return out

    nulls = rng.random(rows) < 0.05
    off0 = offsets(rows)  # row -> level-1 lists
    off1 = offsets(int(off0[-1]))  # level-1 list -> level-2 lists
    off2 = offsets(int(off1[-1]))  # level-2 list -> values
    values = pa.array(rng.integers(-(10**6), 10**6, int(off2[-1])), pa.int64())
    level2 = pa.ListArray.from_arrays(pa.array(off2), values)
    level1 = pa.ListArray.from_arrays(pa.array(off1), level2)
    deep = pa.ListArray.from_arrays(pa.array(off0), level1, mask=pa.array(nulls))
    common = {
        "id": pa.array(np.arange(rows), pa.int64()),
        "f": pa.array(rng.random(rows).astype(np.float32)),
    }
    nested = pa.table({**common, "deep": deep})

    def per_row(child: np.ndarray | pa.Array, row_off: np.ndarray) -> pa.Array:
        return pa.ListArray.from_arrays(pa.array(row_off), pa.array(child), mask=pa.array(nulls))

    lengths1 = np.diff(off1).astype(np.int64)  # per level-1 list: its level-2 lists
    lengths2 = np.diff(off2).astype(np.int64)  # per level-2 list: its values
    flat = pa.table(
        {
            **common,
            "deep": per_row(values, off2[off1[off0]]),
            "deep__row_lengths_1": per_row(lengths1, off0),
            "deep__row_lengths_2": per_row(lengths2, off1[off0]),
        }
    )
    return nested, flat


def make_null_tables(rows: int, seed: int = 0) -> tuple[pa.Table, pa.Table]:
    """(lists with 5% null items at every level, the same without them), from offsets; a null
    list has no items in both."""
    rng = np.random.default_rng(seed)

    def level(count: int, top: int) -> tuple[np.ndarray, np.ndarray]:
        """Offsets of `count` lists (a null one empty) and which are null."""
        null = rng.random(count) < 0.05
        lengths = rng.integers(0, top, count)
        lengths[null] = 0
        out = np.zeros(count + 1, np.int32)
        np.cumsum(lengths, out=out[1:])
        return out, null

    rows_null = pa.array(rng.random(rows) < 0.05)
    off0, _ = level(rows, 4)  # row -> level-1 lists
    off1, null1 = level(int(off0[-1]), 4)  # level-1 list -> level-2 lists
    off2, null2 = level(int(off1[-1]), 4)  # level-2 list -> values
    deep_values = rng.integers(-(10**6), 10**6, int(off2[-1]))
    deep_null = rng.random(deep_values.shape[0]) < 0.05
    li_off, _ = level(rows, 6)
    li_values = rng.integers(-(10**9), 10**9, int(li_off[-1]))
    li_null = rng.random(li_values.shape[0]) < 0.05

    def table(inner: bool) -> pa.Table:
        mask = lambda m: pa.array(m) if inner else None  # noqa: E731
        values = pa.array(deep_values, pa.int64(), mask=deep_null if inner else None)
        level2 = pa.ListArray.from_arrays(pa.array(off2), values, mask=mask(null2))
        level1 = pa.ListArray.from_arrays(pa.array(off1), level2, mask=mask(null1))
        li = pa.array(li_values, pa.int64(), mask=li_null if inner else None)
        return pa.table(
            {
                "id": pa.array(np.arange(rows), pa.int64()),
                "f": pa.array(np.linspace(0, 1, rows, dtype=np.float32)),
                "li": pa.ListArray.from_arrays(pa.array(li_off), li, mask=rows_null),
                "deep": pa.ListArray.from_arrays(pa.array(off0), level1, mask=rows_null),
            }
        )

    return table(True), table(False)


def encode_all(table: pa.Table, specs: list, batch_rows: int) -> bytes:
    parts = []
    for start in range(0, table.num_rows, batch_rows):
        encoded, _ = encode_table(table.slice(start, batch_rows), specs, "bench", start)
        parts.append(bytes(encoded.buffer))
    return b"".join(parts)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=500_000)
    parser.add_argument("--batch-rows", type=int, default=32_768)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--case", choices=("maps", "ragged", "nulls"), default="maps")
    args = parser.parse_args()
    shape = {"deep": ColumnOptions(shape=(-1, -1, -1))}
    if args.case == "maps":
        nested, flat = make_tables(args.rows)
        nested_specs = plan_features(nested.schema)
        flat_specs = plan_features(flat.schema)
    elif args.case == "ragged":
        nested, flat = make_ragged_tables(args.rows)
        nested_specs = plan_features(nested.schema, shape)
        flat_specs = plan_features(flat.schema)
    else:  # "nested": with nulls inside the lists; "flattened": the same without them
        nested, flat = make_null_tables(args.rows)
        nested_specs = flat_specs = plan_features(nested.schema, shape)
    nested_out = encode_all(nested, nested_specs, args.batch_rows)
    if args.case == "nulls":
        _, stats = encode_table(nested.slice(0, args.batch_rows), nested_specs, "bench", 0)
        levels = {"li__nulls_1", "deep__nulls_1", "deep__nulls_2", "deep__nulls_3"}
        assert levels <= set(stats.nulls), "no null inside the lists"
        print(f"null-position features of the first batch: rows holding them {stats.nulls}")
    else:
        keys = lambda specs: [k for s in specs for k in s.feature_keys]  # noqa: E731
        assert sorted(keys(nested_specs)) == sorted(keys(flat_specs))
        assert nested_out == encode_all(flat, flat_specs, args.batch_rows), "records differ"
    print(f"load average before: {load_avg()}")
    results = {}
    # interleaved, best of --repeat each: a busy moment hits both alike
    for name, table, specs in (("flattened", flat, flat_specs), ("nested", nested, nested_specs)):
        results[name] = timed(lambda t=table, s=specs: encode_all(t, s, args.batch_rows), 1)
    for _ in range(args.repeat - 1):
        for name, table, specs in (
            ("flattened", flat, flat_specs),
            ("nested", nested, nested_specs),
        ):
            again = timed(lambda t=table, s=specs: encode_all(t, s, args.batch_rows), 1)
            if again["wall_s"] < results[name]["wall_s"]:
                results[name] = again
    for name, r in results.items():
        print(f"{name:>10}: {args.rows / r['wall_s']:>12,.0f} rows/s  ({r['wall_s']:.3f} s wall)")
    ratio = results["flattened"]["wall_s"] / results["nested"]["wall_s"]
    if args.case == "nulls":
        print(f"with nulls / without nulls inside the lists, rows/s: {ratio:.2f}")
    else:
        print(f"nested / flattened rows/s: {ratio:.2f}")
    print(f"load average after: {load_avg()}")


if __name__ == "__main__":
    main()
