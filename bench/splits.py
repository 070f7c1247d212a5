"""A job's split of the records it writes (`splits:` without `split_key`): each encoded batch's
records hashed (`assign_splits`) and cut by split (`partition_records`), in one process, on
the same batches, against the way it cut them before, with the encoding itself as the scale.

Before: a split id per byte (`np.repeat` of the record lengths) and, per split, a mask of the
bytes and numpy's boolean indexing. Now: per split, its rows (`flatnonzero`) and a memcpy per
record (`gather_records`). Both give the same buffers and offsets (checked before timing).

The batches: `--batches` batches of `--batch-rows` rows of the bench's basic table (14
columns, about 300 bytes an Example), framed as the job writes them, split 9:1 (train, eval).
Printed per step: seconds for all batches (best of `--repeat`) and per million rows.

    python bench/splits.py
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from measure import best
from tables import make_table

from transforms.encode.records import encode_table
from transforms.encode.schema import plan_features
from transforms.split.assign import assign_splits, partition_records

WEIGHTS = [9, 1]


def partition_by_byte_masks(
    buffer: np.ndarray, offsets: np.ndarray, ids: np.ndarray, count: int
) -> list[tuple[np.ndarray, np.ndarray] | None]:
    """The way before: a split id per byte, a boolean mask of the bytes per split."""
    lengths = np.diff(offsets)
    byte_ids = np.repeat(ids, lengths)
    start = int(offsets[0])
    out: list[tuple[np.ndarray, np.ndarray] | None] = []
    for s in range(count):
        chosen = ids == s
        if not chosen.any():
            out.append(None)
            continue
        data = buffer[start : start + len(byte_ids)][byte_ids == s]
        off = np.zeros(int(chosen.sum()) + 1, dtype=np.int64)
        np.cumsum(lengths[chosen], out=off[1:])
        out.append((data, off))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--batches", type=int, default=8)
    parser.add_argument("--batch-rows", type=int, default=131_072)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    table = make_table("basic", args.batches * args.batch_rows)
    specs = plan_features(table.schema)
    batches = []
    for i in range(args.batches):
        part = table.slice(i * args.batch_rows, args.batch_rows)
        batches.append((part, encode_table(part, specs, "t.parquet", 0, True)[0]))
    rows = args.batches * args.batch_rows
    ids = [
        assign_splits(WEIGHTS, "", buffer=b.buffer, offsets=b.offsets, framed=True)
        for _, b in batches
    ]
    for (_, b), i in zip(batches, ids, strict=True):
        old = partition_by_byte_masks(b.buffer, b.offsets, i, len(WEIGHTS))
        new = partition_records(b.buffer, b.offsets, i, len(WEIGHTS))
        for o, n in zip(old, new, strict=True):
            if (o is None) != (n is None) or (
                o is not None and not (np.array_equal(o[0], n[0]) and np.array_equal(o[1], n[1]))
            ):
                raise SystemExit("the two ways cut the records differently")

    def encode() -> None:
        for part, _ in batches:
            encode_table(part, specs, "t.parquet", 0, True)

    def hash_ids() -> None:
        for _, b in batches:
            assign_splits(WEIGHTS, "", buffer=b.buffer, offsets=b.offsets, framed=True)

    def cut(fn: Callable) -> Callable[[], None]:
        def run() -> None:
            for (_, b), i in zip(batches, ids, strict=True):
                fn(b.buffer, b.offsets, i, len(WEIGHTS))

        return run

    mb = sum(b.buffer.nbytes for _, b in batches) / 1e6
    print(f"{rows:,} rows, {mb:,.0f} MB of framed records, splits {WEIGHTS}")
    print("| step | seconds | s per 1M rows |")
    print("| --- | ---: | ---: |")
    timed = {
        "encode (for scale)": best(encode, args.repeat),
        "hash and assign": best(hash_ids, args.repeat),
        "cut, before (byte masks)": best(cut(partition_by_byte_masks), args.repeat),
        "cut, now (a memcpy per record)": best(cut(partition_records), args.repeat),
    }
    for name, seconds in timed.items():
        print(f"| {name} | {seconds:.3f} | {seconds / rows * 1e6:.3f} |", flush=True)
    before, now = timed["cut, before (byte masks)"], timed["cut, now (a memcpy per record)"]
    print(f"cut: before / now {before / now:.1f}x; before / encode "
          f"{before / timed['encode (for scale)']:.2f}")  # fmt: skip


if __name__ == "__main__":
    main()
