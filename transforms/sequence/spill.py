"""Rows on their way to their sequence, in bounded memory: each batch's rows are cut by bucket
(a hash of the row's key, so every row of a sequence lands in the same bucket), each piece is
written to a spill file in the job's temp directory (transforms/write/grouped/spill.py), and only a
`RowsRef` to where it lies crosses the GroupByKey. The bucket's encoder then reads its pieces
back: it holds one bucket's rows, not the whole input.

A piece is an Arrow IPC stream of the rows (the columns the sequences use, dictionaries
decoded) followed by the int64 source row of each row.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from transforms.batch import TableBatch, source_rows
from transforms.sequence.encode import GroupRows
from transforms.sequence.groups import key_hashes
from transforms.write.grouped.spill import SpillReader, SpillWriter

__all__ = ["BUCKET_BYTES", "RowsRef", "read_bucket", "sequence_buckets", "spill_batch"]

BUCKET_BYTES = 64 << 20  # planned rows (as framed Example bytes) per bucket
MAX_BUCKETS = 1 << 16
FRAMED_PER_STORED = 4  # framed bytes per compressed output byte assumed from an estimate
_BUCKET_SALT = "sequence-bucket"


@dataclasses.dataclass(frozen=True)
class RowsRef:
    """One batch's rows of one bucket: an IPC stream at [start, rows_at) of a spill file,
    then their source rows (int64) up to `stop`."""

    path: str
    start: int
    rows_at: int
    stop: int
    origin: tuple[str, int, int]  # (source, first_row, task) of the batch


def sequence_buckets(estimated_bytes: int) -> int:
    """Buckets for an output planned at `estimated_bytes` (all splits, as stored): about
    BUCKET_BYTES of rows each."""
    framed = max(0, estimated_bytes) * FRAMED_PER_STORED
    return int(min(MAX_BUCKETS, max(1, math.ceil(framed / BUCKET_BYTES))))


def _plain_table(table: pa.Table, columns: Sequence[str]) -> pa.Table:
    """The columns, dictionaries decoded (pieces of one bucket must concatenate)."""
    arrays = []
    for name in columns:
        column = table.column(name)
        if pa.types.is_dictionary(column.type):
            column = pc.cast(column, column.type.value_type)
        arrays.append(column)
    return pa.table(arrays, names=list(columns))


def _ipc(table: pa.Table) -> pa.Buffer:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return sink.getvalue()


def spill_batch(
    batch: TableBatch,
    columns: Sequence[str],
    group_by: Sequence[str],
    buckets: int,
    spill: SpillWriter,
) -> list[tuple[int, RowsRef]]:
    """(bucket, where its rows lie) for each bucket the batch has rows of."""
    table = _plain_table(batch.table, columns)
    ids = (key_hashes(table, group_by, _BUCKET_SALT) % np.uint64(buckets)).astype(np.int64)
    order = np.argsort(ids, kind="stable")
    bounds = np.searchsorted(ids[order], np.arange(buckets + 1), side="left")
    rows = source_rows(batch)[order]
    table = table.take(pa.array(order, pa.int64()))
    origin = (batch.source, batch.first_row, batch.task)
    out = []
    for bucket in np.flatnonzero(np.diff(bounds)).tolist():
        a, b = int(bounds[bucket]), int(bounds[bucket + 1])
        data = _ipc(table.slice(a, b - a))
        row_bytes = np.ascontiguousarray(rows[a:b], dtype="<i8")
        path, start = spill.write([memoryview(data), memoryview(row_bytes).cast("B")])
        rows_at = start + data.size
        out.append((bucket, RowsRef(path, start, rows_at, rows_at + row_bytes.nbytes, origin)))
    return out


def read_bucket(refs: Sequence[RowsRef]) -> GroupRows:
    """A bucket's rows, its pieces in the order of their origin (so ties of `order_by` keep
    the input's order: files by path, then rows)."""
    refs = sorted(refs, key=lambda ref: ref.origin)
    sources = tuple(dict.fromkeys(ref.origin[0] for ref in refs))
    reader = SpillReader()
    tables, rows, index = [], [], []
    try:
        for ref in refs:
            data = reader.read(ref.path, ref.start, ref.stop)
            split = ref.rows_at - ref.start
            tables.append(pa.ipc.open_stream(pa.py_buffer(data[:split])).read_all())
            rows.append(np.frombuffer(data[split:], dtype="<i8").astype(np.int64))
            index.append(np.full(len(rows[-1]), sources.index(ref.origin[0]), np.int64))
    finally:
        reader.close()
    table = pa.concat_tables(tables).combine_chunks()
    return GroupRows(table, np.concatenate(rows), np.concatenate(index), sources)
