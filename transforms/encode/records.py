"""Arrow batch -> serialized tf.train.Example records, and the counts the manifest takes from them.

`encode_table` prepares each column (columns.py) and serializes every row with one call of the
compiled kernel (kernel/example.py); an `EncodedBatch` carries the records of a batch as one
buffer and offsets, framed as TFRecord or not. `gather_records` copies records into a new order
(a batch cut by split, the grouped write's buckets and keys).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np
import pyarrow as pa
from numba import njit

from transforms.encode.columns import to_kernel_columns
from transforms.encode.kernel.example import encode_records
from transforms.encode.kernel.memory import copy_memory
from transforms.encode.schema import FeatureSpec

__all__ = ["BatchStats", "EncodedBatch", "concat_batches", "encode_table", "gather_records"]


@dataclasses.dataclass(frozen=True)
class EncodedBatch:
    """Records of one batch: record i is buffer[offsets[i]:offsets[i+1]] (framed or not).

    `task`, `source` and `first_row` say where the rows came from (the ReadTask, the file and
    its first row), so writers can keep a task's rows together and order blocks the same way
    on every run.
    """

    buffer: np.ndarray
    offsets: np.ndarray
    framed: bool
    task: int = 0
    source: str = ""
    first_row: int = 0

    @property
    def num_records(self) -> int:
        return len(self.offsets) - 1

    def records(self) -> list[bytes]:
        """One bytes object per record (for sinks that frame records themselves)."""
        n = self.num_records
        arr = pa.LargeBinaryArray.from_buffers(
            pa.large_binary(), n, [None, pa.py_buffer(self.offsets), pa.py_buffer(self.buffer)]
        )
        return arr.to_pylist()


def concat_batches(parts: Sequence[EncodedBatch]) -> EncodedBatch:
    """The records of several encoded batches as one, in their order (the origin fields are
    the first part's)."""
    if len(parts) == 1:
        return parts[0]
    buffer = np.concatenate([p.buffer[p.offsets[0] : p.offsets[-1]] for p in parts])
    offsets, base = [np.zeros(1, dtype=np.int64)], 0
    for p in parts:
        offsets.append(p.offsets[1:] - p.offsets[0] + base)
        base += int(p.offsets[-1] - p.offsets[0])
    return dataclasses.replace(parts[0], buffer=buffer, offsets=np.concatenate(offsets))


@dataclasses.dataclass(frozen=True)
class BatchStats:
    """Counts a batch contributes to the manifest: per column the rows that are null, and per
    feature of null positions inside a list (`nulls_key`) the rows that hold it (a key only
    where the batch has such nulls)."""

    rows: int
    nulls: dict[str, int]
    split_rows: dict[str, int] = dataclasses.field(default_factory=dict)
    steps: int = 0  # SequenceExamples: the steps of the records (rows: the records)

    def merge(self, other: BatchStats) -> BatchStats:
        nulls = dict(self.nulls)
        for name, count in other.nulls.items():
            nulls[name] = nulls.get(name, 0) + count
        split_rows = dict(self.split_rows)
        for name, count in other.split_rows.items():
            split_rows[name] = split_rows.get(name, 0) + count
        return BatchStats(self.rows + other.rows, nulls, split_rows, self.steps + other.steps)


def encode_table(
    table: pa.Table,
    specs: Sequence[FeatureSpec],
    source: str,
    first_row: int,
    framed: bool = False,
    rows: np.ndarray | None = None,
) -> tuple[EncodedBatch, BatchStats]:
    """Serialize every row of `table` as a tf.train.Example with the features `specs` describe.

    Raises ConversionError naming source, row and column for a value that cannot be written;
    the row is `first_row` + index, or `rows[index]` (the source rows, when rows were dropped).
    """
    columns = []
    nulls = {}
    for spec in specs:
        spec_columns, null_count = to_kernel_columns(table, spec, source, first_row, rows)
        columns.extend(spec_columns)
        nulls[spec.name] = null_count
        for column in spec_columns[1 + len(spec.partition_levels) :]:  # null positions
            nulls[column.key.tobytes().decode("utf-8")] = int(np.count_nonzero(column.valid))
    if len(columns) > len(specs):  # row-lengths, null positions: every key in sorted order
        columns.sort(key=lambda c: c.key.tobytes())
    buffer, offsets = encode_records(columns, table.num_rows, framed=framed)
    stats = BatchStats(table.num_rows, nulls)
    return EncodedBatch(buffer, offsets, framed, source=source, first_row=first_row), stats


@njit(cache=True)
def _gathered_offsets(offsets: np.ndarray, order: np.ndarray) -> np.ndarray:  # pragma: no cover
    out_off = np.empty(order.shape[0] + 1, dtype=np.int64)
    out_off[0] = 0
    for i in range(order.shape[0]):
        r = order[i]
        out_off[i + 1] = out_off[i] + offsets[r + 1] - offsets[r]
    return out_off


@njit(cache=True)
def _copy_records(
    src: int, dst: int, offsets: np.ndarray, out_off: np.ndarray, order: np.ndarray
) -> None:  # pragma: no cover
    # By address, a memcpy per record: a slice per record (a new array view each) cost 1.5x
    # more than a loop of 8-byte words, which memcpy beats 1.9-2.7x (bench/copy_bytes.py).
    for i in range(order.shape[0]):
        r = order[i]
        copy_memory(dst + out_off[i], src + offsets[r], offsets[r + 1] - offsets[r])


def gather_records(
    buffer: np.ndarray, offsets: np.ndarray, order: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Records `order[0], order[1], ...` of (buffer, offsets), as a new (buffer, offsets)."""
    buffer = np.ascontiguousarray(buffer, dtype=np.uint8)
    offsets = np.ascontiguousarray(offsets, dtype=np.int64)
    order = np.ascontiguousarray(order, dtype=np.int64)
    if order.size and (order.min() < 0 or order.max() >= len(offsets) - 1):
        raise IndexError(f"record order names records outside 0..{len(offsets) - 2}")
    if len(offsets) and (offsets[0] < 0 or offsets[-1] > buffer.size):
        raise IndexError(f"record offsets run past the buffer's {buffer.size} bytes")
    out_off = _gathered_offsets(offsets, order)
    out = np.empty(int(out_off[-1]), dtype=np.uint8)
    if out.size:
        _copy_records(buffer.ctypes.data, out.ctypes.data, offsets, out_off, order)
    return out, out_off
