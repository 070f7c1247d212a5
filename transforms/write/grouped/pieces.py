"""The two halves of the grouped write as plain classes and functions (no Beam), which the Beam
DoFns (grouped/beam.py) and the in-process engine's workers call alike:

- `ShardSpiller.spill(batch)`: a batch's records cut by shard (with a seed, by bucket of their
  shuffle key) and written to spill files; returns (shard, where they lie) per shard;
- `write_shard(refs, ...)`: one shard's records read back from the spill files, in the order of
  their origin (or of their shuffle key, a group of buckets at a time), into one temp file.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import closing
from typing import Union

import numpy as np

from transforms.encode.records import EncodedBatch, gather_records
from transforms.write.compression import gzip_compressor
from transforms.write.direct import read_ahead
from transforms.write.files import BlockFile, ShardPart, temp_path
from transforms.write.grouped.records import (
    PACK_MIN_BYTES,
    BlockRuns,
    bucket_ids,
    framed_offsets,
    shard_ids,
    shuffle_keys,
)
from transforms.write.grouped.spill import (
    DEFAULT_BUCKETS,
    BucketRef,
    PieceRef,
    SpillReader,
    SpillWriter,
    bucket_groups,
)

__all__ = ["ShardSpiller", "SpillRef", "shard_bucket_bytes", "sorted_groups", "write_shard"]

SpillRef = Union[PieceRef, BucketRef]  # noqa: UP007 (a Beam type hint)


class ShardSpiller:
    """Spills batches of one split for the grouped write: `spill(batch)` per batch, then
    `close()` before the references leave (their files are then complete)."""

    def __init__(
        self,
        num_shards: int,
        seed: int | None,
        temp_dir: str,
        split: str = "train",
        compression: str = "none",
        level: int | None = None,
        backend: str = "isal",
        buckets: int = DEFAULT_BUCKETS,
        member_bytes: int | None = None,
    ) -> None:
        self._num_shards, self._seed = num_shards, seed
        # large pieces spilled as gzip members, copied as they are into the shard; not for an
        # indexed output, whose members stay small (files.block_compressor)
        pack = seed is None and compression == "gzip" and member_bytes is None
        self._compress = gzip_compressor(level, backend) if pack else None
        self._buckets = buckets if seed is not None else 1
        self._spill = SpillWriter(temp_dir, split)

    def _by_group(self, batch: EncodedBatch, groups: np.ndarray, count: int) -> tuple:
        """The batch's records ordered by group id (stably), their offsets, the record bounds
        of each group and the order."""
        # numpy sorts 16-bit integers stably by radix: 8x faster than int64 for a batch
        small = groups.astype(np.uint16) if count <= 1 << 16 else groups
        order = np.argsort(small, kind="stable")
        buffer, offsets = gather_records(batch.buffer, batch.offsets, order)
        bounds = np.searchsorted(groups[order], np.arange(count + 1), side="left")
        return buffer, offsets, bounds, order

    def _pieces(self, batch: EncodedBatch) -> Iterator[tuple[int, PieceRef]]:
        origin = (batch.source, batch.first_row, batch.task)
        ids = shard_ids(batch, self._num_shards, None)
        buffer, offsets, bounds, _ = self._by_group(batch, ids, self._num_shards)
        for shard in range(self._num_shards):
            r0, r1 = int(bounds[shard]), int(bounds[shard + 1])
            if r0 == r1:
                continue
            piece = buffer[offsets[r0] : offsets[r1]]
            size = int(piece.nbytes)
            packed = self._compress is not None and size >= PACK_MIN_BYTES
            data = self._compress(memoryview(piece)) if packed else memoryview(piece)
            path, at = self._spill.write([data])
            stop = at + (len(data) if packed else size)
            yield shard, PieceRef(path, at, stop, r1 - r0, size, packed, origin)

    def _buckets_of(self, batch: EncodedBatch) -> Iterator[tuple[int, BucketRef]]:
        origin = (batch.source, batch.first_row, batch.task)
        k = self._buckets
        keys = shuffle_keys(batch, self._seed)
        ids = bucket_ids(keys, self._num_shards, k)
        buffer, offsets, bounds, order = self._by_group(batch, ids, self._num_shards * k)
        keys = keys[order]
        for shard in range(self._num_shards):
            rec = bounds[shard * k : (shard + 1) * k + 1]
            r0, r1 = int(rec[0]), int(rec[-1])
            if r0 == r1:
                continue
            byte_bounds = offsets[rec]
            data = buffer[byte_bounds[0] : byte_bounds[-1]]
            path, at = self._spill.write([memoryview(data), memoryview(keys[r0:r1]).cast("B")])
            yield (
                shard,
                BucketRef(
                    path,
                    at,
                    at + int(data.nbytes),
                    (byte_bounds - byte_bounds[0]).astype(np.int64),
                    (rec - r0).astype(np.int32),
                    origin,
                ),
            )

    def spill(self, batch: EncodedBatch) -> list[tuple[int, SpillRef]]:
        """Spill the batch's framed records; (shard index, where they lie) per shard."""
        if not batch.framed:
            raise ValueError("the shard writer needs framed records (EncodeExamples(framed=True))")
        if batch.num_records == 0:
            return []
        refs = self._pieces(batch) if self._seed is None else self._buckets_of(batch)
        return list(refs)

    def close(self) -> None:
        self._spill.close()


def _read_into(reader: SpillReader, ranges: list[tuple[str, int, int]], dtype: type) -> np.ndarray:
    """The byte ranges (path, start, stop) read one after the other into one array."""
    out = np.empty(sum(stop - start for _, start, stop in ranges), dtype=np.uint8)
    view, pos = memoryview(out), 0
    for path, start, stop in ranges:
        reader.read_into(path, start, view[pos : pos + stop - start])
        pos += stop - start
    return out.view(dtype)


def _write_pieces(runs: BlockRuns, out: BlockFile, refs: Sequence[PieceRef]) -> None:
    reader = SpillReader()
    try:
        for ref in refs:
            data = reader.read(ref.path, ref.start, ref.stop)
            if ref.packed:  # a gzip member ends the run of framed pieces before it
                runs.end_run()
                out.write_compressed(data, ref.rows, ref.framed_bytes)
            else:
                buffer = np.frombuffer(data, np.uint8)
                runs.add(buffer, framed_offsets(buffer, ref.rows))
    finally:
        reader.close()


def shard_bucket_bytes(refs: Sequence[BucketRef]) -> np.ndarray:
    """The framed bytes of each bucket of a shard, over all its refs."""
    return sum(np.diff(ref.byte_bounds) for ref in refs)


def sorted_groups(
    reader: SpillReader, refs: Sequence[BucketRef], groups: Sequence[tuple[int, int]]
) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """The records of each group of buckets [a, b) of a shard in key order: (buffer, offsets),
    a group at a time. `refs` in origin order: the sort is stable, so records of equal keys
    keep the order of their origin."""

    def load(a: int, b: int) -> tuple[np.ndarray, np.ndarray]:
        data, keys = [], []
        for ref in refs:
            lo, hi = int(ref.byte_bounds[a]), int(ref.byte_bounds[b])
            if lo < hi:
                data.append((ref.path, ref.data_at + lo, ref.data_at + hi))
                ra, rb = int(ref.record_bounds[a]), int(ref.record_bounds[b])
                keys.append((ref.path, ref.keys_at + 8 * ra, ref.keys_at + 8 * rb))
        return _read_into(reader, data, np.uint8), _read_into(reader, keys, np.uint64)

    # the next group is read while this one is sorted and written
    with closing(read_ahead(lambda a=a, b=b: load(a, b) for a, b in groups)) as loaded:
        for buffer, keys in loaded:
            order = np.argsort(keys, kind="stable")
            yield gather_records(buffer, framed_offsets(buffer, order.size), order)
            del buffer, keys, order


def _write_sorted(runs: BlockRuns, refs: Sequence[BucketRef]) -> None:
    reader = SpillReader()
    try:
        for buffer, offsets in sorted_groups(reader, refs, bucket_groups(shard_bucket_bytes(refs))):
            runs.add(buffer, offsets)
    finally:
        reader.close()


def write_shard(
    shard: int,
    refs: Sequence[SpillRef],
    split: str,
    temp_dir: str,
    compression: str,
    compress: Callable[[memoryview], bytes] | None,
    seed: int | None,
    told: Callable[[int, int], None] | None = None,
) -> ShardPart:
    """Shard `shard`'s records from its spilled `refs` into one temp file: the pieces in the
    order of their origin (the same file on every run), or with a seed every record in the order
    of its shuffle key, a group of buckets at a time. `compress`: the block compressor
    (files.block_compressor); `told`: told (records, bytes) as blocks are written."""
    order_key = (shard, 0)
    path = temp_path(temp_dir, split, order_key, compression)
    out = BlockFile(path, compression, compress, order_key, split, told)
    runs = BlockRuns(out)
    ordered = sorted(refs, key=lambda ref: ref.origin)
    if seed is None:
        _write_pieces(runs, out, ordered)
    else:
        _write_sorted(runs, ordered)
    runs.end_run()
    return out.close()
