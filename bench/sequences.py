"""The SequenceExample encoder against SequenceExamples built with protobuf, in one process.

A generated table of events (a user key, a timestamp, an int, a float, a string and a list per
row, with nulls), grouped per user into sequences of about `--steps` rows. Measured, best of
`--repeat`, CPU seconds of this process:
- `encode_groups`: sort into groups, the context check, the compiled sequence kernel (framed);
- the kernel alone (`encode_sequences`, the groups already sorted);
- protobuf: one `tf.train.SequenceExample` per group from the sorted rows' Python values,
  `SerializeToString(deterministic=True)` (on `--proto-rows` rows; TensorFlow's protobuf).
Prints rows per CPU-second and the ratios; the records of both ways are checked equal first.

    python bench/sequences.py --rows 200000 --proto-rows 20000
"""

from __future__ import annotations

import argparse
import itertools
import os
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from measure import load_avg, timed

from transforms.encode.columns import to_kernel_column
from transforms.encode.kernel.sequence import encode_sequences
from transforms.sequence.encode import GroupRows, encode_groups
from transforms.sequence.groups import group_bounds, group_order
from transforms.sequence.layout import SequenceOptions, plan_sequence


def make_table(rows: int, steps: int, seed: int = 0) -> pa.Table:
    rng = np.random.default_rng(seed)
    users = rng.integers(0, max(1, rows // steps), rows)
    clicks = pa.array(rng.integers(0, 1000, rows), mask=rng.random(rows) < 0.1)
    prices = pa.array(rng.random(rows).astype(np.float32), mask=rng.random(rows) < 0.1)
    pages = pa.array([f"page-{i % 97}" for i in range(rows)])
    lengths = rng.integers(0, 4, rows)
    offsets = np.zeros(rows + 1, np.int32)
    np.cumsum(lengths, out=offsets[1:])
    tags = pa.ListArray.from_arrays(
        pa.array(offsets), pa.array(rng.integers(0, 10**6, int(offsets[-1])))
    )
    return pa.table(
        {
            "user": pa.array(users, pa.int64()),
            "country": pa.array([f"c{u % 13}" for u in users.tolist()]),
            "ts": pa.array(rng.integers(0, 10**9, rows), pa.int64()),
            "click": clicks,
            "price": prices,
            "page": pages,
            "tags": tags,
        }
    )


def group_rows(table: pa.Table) -> GroupRows:
    n = table.num_rows
    return GroupRows(table, np.arange(n, dtype=np.int64), np.zeros(n, np.int64), ("bench",))


def protobuf_records(table: pa.Table, layout) -> list[bytes]:
    """SequenceExamples built value by value with protobuf (TensorFlow's)."""
    import tensorflow as tf

    kinds = {s.name: s.kind for s in (*layout.context, *layout.steps)}
    order = group_order(table, ("user",), "ts")
    table = table.take(pa.array(order))
    bounds = group_bounds(table, ("user",)).tolist()
    columns = {name: table.column(name).to_pylist() for name in table.column_names}

    def fill(feature: tf.train.Feature, kind: str, value: object) -> None:
        values = value if isinstance(value, list) else [value]
        if kind == "int64":
            feature.int64_list.value.extend(values)
        elif kind == "float":
            feature.float_list.value.extend(values)
        else:
            feature.bytes_list.value.extend(v.encode() for v in values)

    out = []
    for g in range(len(bounds) - 1):
        a, b = bounds[g], bounds[g + 1]
        example = tf.train.SequenceExample()
        example.context.SetInParent()
        example.feature_lists.SetInParent()
        for spec in layout.context:
            value = columns[spec.name][a]
            if value is not None:
                fill(example.context.feature[spec.name], kinds[spec.name], value)
        for spec in layout.steps:
            feature_list = example.feature_lists.feature_list[spec.name]
            for value in columns[spec.name][a:b]:
                feature = feature_list.feature.add()
                if value is not None:
                    if isinstance(value, list):
                        getattr(feature, f"{kinds[spec.name]}_list").SetInParent()
                    fill(feature, kinds[spec.name], value)
        out.append(example.SerializeToString(deterministic=True))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--proto-rows", type=int, default=20_000)
    parser.add_argument("--steps", type=int, default=50, help="mean rows per sequence")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    table = make_table(args.rows, args.steps)
    layout = plan_sequence(
        SequenceOptions(group_by=("user",), order_by="ts", context=("country",)), table.schema
    )
    small = make_table(args.proto_rows, args.steps)
    encoded, _, bad = encode_groups(group_rows(small), layout, framed=False)
    ours = [bytes(encoded.buffer[a:b]) for a, b in itertools.pairwise(encoded.offsets)]
    assert not bad and ours == protobuf_records(small, layout), "the two ways differ"

    ordered = table.take(pa.array(group_order(table, ("user",), "ts")))
    bounds = group_bounds(ordered, ("user",))
    first = ordered.take(pa.array(bounds[:-1]))

    def kernel_only() -> None:
        context = [to_kernel_column(first, s, "b", 0)[0] for s in layout.context]
        steps = [to_kernel_column(ordered, s, "b", 0)[0] for s in layout.steps]
        encode_sequences(context, steps, bounds, None, True)

    results = {
        "encode_groups (sort, check, kernel)": (args.rows, timed(
            lambda: encode_groups(group_rows(table), layout, framed=True), args.repeat
        )),
        "columns + kernel (sorted input)": (args.rows, timed(kernel_only, args.repeat)),
        "protobuf SequenceExample per group": (args.proto_rows, timed(
            lambda: protobuf_records(small, layout), args.repeat
        )),
    }  # fmt: skip
    print(f"rows {args.rows:,} in sequences of about {args.steps} rows; load {load_avg()}")
    base = results["protobuf SequenceExample per group"]
    base_rate = base[0] / base[1]["cpu_s"]
    for name, (rows, t) in results.items():
        rate = rows / t["cpu_s"]
        print(
            f"{name:40s} {rate:12,.0f} rows/CPU-s  {rows / t['wall_s']:12,.0f} rows/s  "
            f"x{rate / base_rate:6.1f}"
        )


if __name__ == "__main__":
    main()
