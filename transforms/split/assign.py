"""Splits: each source row goes to a split chosen by a stable hash of its source values.

The hash is the project's 64-bit hash (FNV-1a 64 then MurmurHash3's fmix64, see
transforms/hashing.py) of the salt's UTF-8 bytes followed by the key: the key
column's value bytes (UTF-8 text, binary, an integer's decimal text; a null is no bytes), or,
without a key column, the source row serialized as the tf.train.Example the job writes for it
with no transforms and default column options. It depends on nothing but the source row, so a
row lands in the same split across runs, runners and machines, and whatever the transforms do.

Where it runs (transforms/convert.py): with transforms, `split_batch` cuts each source batch
into one batch per split before preprocessing (so analyzers can be fitted on the train split
alone). Without, the records the job writes are those very bytes, and the encode stage hashes
them as it writes them (no second encoding): `assign_splits` on the encoded batch, then
`partition_records`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from transforms.batch import TableBatch, take_rows
from transforms.encode.columns import to_kernel_column
from transforms.encode.kernel.example import encode_records
from transforms.encode.records import gather_records
from transforms.encode.schema import FeatureSpec
from transforms.hashing import hash_ranges
from transforms.sequence.groups import key_hashes
from transforms.write.tfrecord import FOOTER_BYTES, HEADER_BYTES

__all__ = [
    "assign_splits",
    "partition_records",
    "split_batch",
]


def _key_hashes(column: pa.Array | pa.ChunkedArray, salt: str) -> np.ndarray:
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks()
    if pa.types.is_dictionary(column.type):
        column = column.dictionary_decode()
    if pa.types.is_integer(column.type):
        column = pc.cast(column, pa.string())
    column = pc.fill_null(pc.cast(column, pa.large_binary()), b"")
    _, offsets_buf, data_buf = column.buffers()
    offsets = np.frombuffer(offsets_buf, np.int64)[column.offset : column.offset + len(column) + 1]
    data = np.frombuffer(data_buf, np.uint8) if data_buf is not None else np.empty(0, np.uint8)
    return hash_ranges(offsets[:-1], offsets[1:], data, salt)


def assign_splits(
    weights: list[int],
    salt: str,
    *,
    key: pa.Array | pa.ChunkedArray | None = None,
    buffer: np.ndarray | None = None,
    offsets: np.ndarray | None = None,
    framed: bool = False,
) -> np.ndarray:
    """The split index of each row: hash % sum(weights), placed in the cumulative weights.

    The key is the `key` column, or else each record `buffer[offsets[i]:offsets[i+1]]` (its
    Example bytes only, without the TFRecord frame, so both sinks agree).
    """
    if key is not None:
        hashes = _key_hashes(key, salt)
    else:
        starts, ends = offsets[:-1], offsets[1:]
        if framed:
            starts, ends = starts + HEADER_BYTES, ends - FOOTER_BYTES
        hashes = hash_ranges(starts, ends, buffer, salt)
    bounds = np.cumsum(np.asarray(weights, dtype=np.uint64))
    return np.searchsorted(bounds, hashes % bounds[-1], side="right").astype(np.int64)


def partition_records(
    buffer: np.ndarray, offsets: np.ndarray, ids: np.ndarray, count: int
) -> list[tuple[np.ndarray, np.ndarray] | None]:
    """Cut records (record i = buffer[offsets[i]:offsets[i+1]]) into `count` groups by `ids`,
    keeping their order; None for a group with no record.

    A memcpy per record (`gather_records`). The numpy way before, a split id per byte
    (`np.repeat`) and a boolean mask of the bytes per split, took 14.8x as long, 1.75-1.9x the
    encoding's own time (bench/splits.py: 1M rows of the bench's basic table, 9:1)."""
    out: list[tuple[np.ndarray, np.ndarray] | None] = []
    for s in range(count):
        rows = np.flatnonzero(ids == s)
        out.append(gather_records(buffer, offsets, rows) if rows.size else None)
    return out


def _row_examples(batch: TableBatch, specs: Sequence[FeatureSpec]) -> tuple[np.ndarray, np.ndarray]:
    columns = [
        to_kernel_column(batch.table, spec, batch.source, batch.first_row, batch.rows)[0]
        for spec in specs
    ]
    return encode_records(columns, batch.table.num_rows, framed=False)


def split_batch(
    batch: TableBatch,
    splits: Sequence[tuple[str, int]],
    salt: str,
    key: str | tuple[str, ...] | None,
    specs: Sequence[FeatureSpec],
) -> list[TableBatch]:
    """The batch cut into one TableBatch per split that gets rows (each with `split` set).

    `specs`: the source's features with default options (the whole-row key, when `key` is None).
    A tuple of key columns (the key of a grouped sequence) hashes their values together.
    Raises ConversionError (naming file, row and column) for a row that cannot be serialized.
    """
    weights = [w for _, w in splits]
    if isinstance(key, tuple):
        bounds = np.cumsum(np.asarray(weights, dtype=np.uint64))
        hashes = key_hashes(batch.table, key, salt)
        ids = np.searchsorted(bounds, hashes % bounds[-1], side="right").astype(np.int64)
    elif key is not None:
        ids = assign_splits(weights, salt, key=batch.table.column(key))
    else:
        buffer, offsets = _row_examples(batch, specs)
        ids = assign_splits(weights, salt, buffer=buffer, offsets=offsets)
    out = []
    for s, (name, _) in enumerate(splits):
        chosen = np.flatnonzero(ids == s)
        if chosen.size == batch.table.num_rows:
            return [dataclasses.replace(batch, split=name)]
        if chosen.size:
            out.append(dataclasses.replace(take_rows(batch, chosen), split=name))
    return out
