"""Splits: each source row goes to a split chosen by a stable hash of its source values.

The hash is the project's 64-bit hash (FNV-1a 64 then MurmurHash3's fmix64, see
transforms/preprocess/hashing.py) of the salt's UTF-8 bytes followed by the key: the key
column's value bytes (UTF-8 text, binary, an integer's decimal text; a null is no bytes), or,
without a key column, the source row serialized as the tf.train.Example the job writes for it
with no transforms and default column options. It depends on nothing but the source row, so a
row lands in the same split across runs, runners and machines, and whatever the transforms do.

Where it runs: with transforms, `AssignSplits` cuts each source batch into one batch per split
before preprocessing (so analyzers can be fitted on the train split alone). Without, the records
the job writes are those very bytes, and the encoder hashes them as it writes them (no second
encoding): `assign_splits` on the encoded batch, then `partition_records`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Sequence

import apache_beam as beam
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from transforms.columns import to_kernel_column
from transforms.deadletter import BAD_TAG, count_bad, isolate_bad_rows, take_rows
from transforms.example_kernel import encode_records
from transforms.preprocess.hashing import hash_ranges_kernel
from transforms.read import TableBatch
from transforms.schema import FeatureSpec

__all__ = [
    "AssignSplits",
    "KeepSplit",
    "assign_splits",
    "hash_ranges",
    "partition_records",
    "split_batch",
]

HEADER_BYTES, FOOTER_BYTES = 12, 4  # TFRecord frame: length (8) + its crc (4) ... data crc (4)


def hash_ranges(starts: np.ndarray, ends: np.ndarray, data: np.ndarray, salt: str) -> np.ndarray:
    """uint64 hash of salt + data[starts[i]:ends[i]] for each i."""
    salt_bytes = np.frombuffer(salt.encode("utf-8"), np.uint8) if salt else np.empty(0, np.uint8)
    return hash_ranges_kernel(
        np.asarray(starts, np.int64), np.asarray(ends, np.int64), data, salt_bytes
    )


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
    keeping their order; None for a group with no record."""
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
    key: str | None,
    specs: Sequence[FeatureSpec],
) -> list[TableBatch]:
    """The batch cut into one TableBatch per split that gets rows (each with `split` set).

    `specs`: the source's features with default options (the whole-row key, when `key` is None).
    Raises ConversionError (naming file, row and column) for a row that cannot be serialized.
    """
    weights = [w for _, w in splits]
    if key is not None:
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


class _AssignDoFn(beam.DoFn):
    def __init__(self, splits, salt, key, specs) -> None:  # noqa: ANN001
        self._args = (list(splits), salt, key, list(specs))

    def process(self, batch: TableBatch) -> Iterator:
        parts, bad = isolate_bad_rows(batch, lambda b: split_batch(b, *self._args), "split")
        count_bad("split", bad)
        for row in bad:
            yield beam.pvalue.TaggedOutput(BAD_TAG, row)
        yield from parts or []


@beam.typehints.with_input_types(TableBatch)
class AssignSplits(beam.PTransform):
    """TableBatch from the source -> TableBatch of one split each (main output `batches`); a row
    that cannot be hashed goes to the output tagged `bad` (a dead-letter dict)."""

    def __init__(
        self,
        splits: Sequence[tuple[str, int]],
        salt: str,
        key: str | None,
        specs: Sequence[FeatureSpec],
    ) -> None:
        super().__init__()
        self._splits, self._salt, self._key, self._specs = list(splits), salt, key, list(specs)

    def expand(self, batches: beam.PCollection) -> beam.pvalue.DoOutputsTuple:
        fn = _AssignDoFn(self._splits, self._salt, self._key, self._specs)
        return batches | "Assign" >> beam.ParDo(fn).with_outputs(BAD_TAG, main="batches")


@beam.typehints.with_input_types(TableBatch)
@beam.typehints.with_output_types(TableBatch)
class KeepSplit(beam.PTransform):
    """The batches of one split (after AssignSplits)."""

    def __init__(self, split: str) -> None:
        super().__init__()
        self._split = split

    def expand(self, batches: beam.PCollection) -> beam.PCollection:
        return batches | "Keep" >> beam.Filter(lambda b, s=self._split: b.split == s)
