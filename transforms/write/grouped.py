"""The grouped write (`num_shards` > 0, or a shuffle): every batch is cut into one piece per shard,
the pieces of a shard meet on one worker, which writes them in a stable order (their origin), or,
with a seed, in the order of a seeded hash of each record (a global shuffle).

The records do not cross the GroupByKey: `ToShardsFn` writes them to spill files in the temp
directory (spill.py) and sends (shard, where they lie). With a shuffle each shard's key range is
cut into buckets and a batch's records are spilled by bucket, so `WriteShardFn` reads, sorts and
writes a group of buckets (about SORT_BYTES) at a time, in key order: memory is bounded by the
group, not by the shard, and the output is the same as sorting the whole shard by key.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Union

import apache_beam as beam
import numpy as np
from apache_beam.transforms.window import GlobalWindow
from apache_beam.utils.timestamp import MIN_TIMESTAMP
from apache_beam.utils.windowed_value import WindowedValue
from numba import njit

from transforms.encode.kernel.memory import load_i64, load_u8, store_u8, store_u64
from transforms.encode.records import EncodedBatch
from transforms.hashing import hash_ranges
from transforms.write.compression import gzip_compressor
from transforms.write.files import BlockFile, ShardPart, block_compressor, temp_path
from transforms.write.progress import SinkProgress
from transforms.write.spill import (
    DEFAULT_BUCKETS,
    BucketRef,
    PieceRef,
    SpillReader,
    SpillWriter,
    bucket_groups,
)
from transforms.write.tfrecord import FOOTER_BYTES, HEADER_BYTES

__all__ = [
    "BLOCK_BYTES",
    "PACK_MIN_BYTES",
    "BlockRuns",
    "ToShardsFn",
    "WriteShardFn",
    "bucket_ids",
    "framed_offsets",
    "gather_records",
    "shard_ids",
    "shuffle_keys",
]

BLOCK_BYTES = 4 << 20  # a grouped write compresses its records in blocks of about this size
PACK_MIN_BYTES = 256 << 10  # without a shuffle, a gzip piece this large is spilled as one gzip
# member and copied as it is into the shard; a smaller one is spilled framed and joined with its
# neighbours into blocks (a gzip member of a few records compresses badly)

SpillRef = Union[PieceRef, BucketRef]  # noqa: UP007 (a Beam type hint)


def shuffle_keys(batch: EncodedBatch, seed: int) -> np.ndarray:
    """uint64 key of each record: the project's hash of its Example bytes, salted with the seed.
    Sorting by it is a seeded pseudo-random order that depends only on the records."""
    starts, ends = batch.offsets[:-1], batch.offsets[1:]
    if batch.framed:
        starts, ends = starts + HEADER_BYTES, ends - FOOTER_BYTES
    return hash_ranges(starts, ends, batch.buffer, f"shuffle:{seed}")


def bucket_ids(keys: np.ndarray, num_shards: int, buckets: int) -> np.ndarray:
    """The bucket of each key among num_shards x buckets equal key ranges, in key order: bucket
    g lies in shard g // buckets, the shard `shard_ids` gives (floor(floor(x) / k) is
    floor(x / k))."""
    count = np.uint64(num_shards * buckets)
    return ((keys >> np.uint64(32)) * count >> np.uint64(32)).astype(np.int64)


def shard_ids(batch: EncodedBatch, num_shards: int, seed: int | None) -> np.ndarray:
    """The shard of each record of `batch`: with a seed, by range of its shuffle key (so that
    shards, each sorted by key, make one global order); else dealt round-robin from an offset
    that depends on the batch's origin, so every shard takes an even share of every batch."""
    n = batch.num_records
    if seed is not None:
        return bucket_ids(shuffle_keys(batch, seed), num_shards, 1)
    origin = np.frombuffer(f"{batch.source}\0{batch.first_row}".encode(), np.uint8)
    offset = int(hash_ranges(np.array([0]), np.array([origin.size]), origin, "")[0] % num_shards)
    return (offset + np.arange(n, dtype=np.int64)) % num_shards


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
    # By address, 8 bytes at a time: a slice per record (a new array view each) cost 1.5x more.
    for i in range(order.shape[0]):
        r = order[i]
        s, d, n = src + offsets[r], dst + out_off[i], offsets[r + 1] - offsets[r]
        j = 0
        while j + 8 <= n:
            store_u64(d + j, load_i64(s + j))
            j += 8
        while j < n:
            store_u8(d + j, load_u8(s + j))
            j += 1


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


@njit(cache=True)
def _frame_ends(buffer: np.ndarray) -> np.ndarray:  # pragma: no cover
    n = buffer.shape[0]
    ends = np.empty(1, dtype=np.int64)
    for sweep in range(2):  # count the frames, then note where each ends
        pos, count = 0, 0
        while pos + 8 <= n:
            length = np.int64(0)
            for i in range(8):
                length |= np.int64(buffer[pos + i]) << np.int64(8 * i)
            pos += length + HEADER_BYTES + FOOTER_BYTES
            count += 1
            if sweep == 1:
                ends[count] = pos
        if sweep == 0:
            ends = np.empty(count + 1, dtype=np.int64)
            ends[0] = 0
    return ends


def framed_offsets(buffer: np.ndarray) -> np.ndarray:
    """Offsets of the TFRecord frames that make up `buffer` (from each frame's length)."""
    offsets = _frame_ends(buffer)
    if int(offsets[-1]) != buffer.shape[0]:
        raise ValueError(
            f"spilled records end at byte {int(offsets[-1])} of {buffer.shape[0]}: the spill "
            "file does not hold whole TFRecord frames (written by another version?)"
        )
    return offsets


class BlockRuns:
    """Writes runs of records into `out` in blocks cut at record boundaries, where a block ends
    at the first record end at or past each multiple of BLOCK_BYTES from the run's start: the
    blocks of the run's records joined, however the run arrives. `end_run` flushes the last
    block; the next records start a new run."""

    def __init__(self, out: BlockFile, block_bytes: int | None = None) -> None:
        self._out, self._block = out, block_bytes or BLOCK_BYTES
        self._pending: list[np.ndarray] = []
        self._rows = 0
        self._pos = 0  # bytes of the run so far

    def add(self, buffer: np.ndarray, offsets: np.ndarray) -> None:
        """Records (record i = buffer[offsets[i]:offsets[i+1]]) appended to the run."""
        n = len(offsets) - 1
        if n <= 0:
            return
        rel = offsets - offsets[0] + self._pos
        cuts = np.flatnonzero(rel[1:] // self._block > rel[:-1] // self._block) + 1
        prev = 0
        for cut in cuts.tolist():
            self._pending.append(buffer[offsets[prev] : offsets[cut]])
            self._rows += cut - prev
            self._flush()
            prev = cut
        if prev < n:  # a copy: the rest of a block must not keep the whole buffer alive
            self._pending.append(buffer[offsets[prev] : offsets[n]].copy())
            self._rows += n - prev
        self._pos = int(rel[-1])

    def _flush(self) -> None:
        if self._pending:
            block = self._pending[0] if len(self._pending) == 1 else np.concatenate(self._pending)
            self._out.write(block, self._rows)
        self._pending, self._rows = [], 0

    def end_run(self) -> None:
        self._flush()
        self._pos = 0


@beam.typehints.with_input_types(EncodedBatch)
@beam.typehints.with_output_types(tuple[int, SpillRef])
class ToShardsFn(beam.DoFn):
    """EncodedBatch -> (shard index, where the batch's records for that shard were spilled):
    a PieceRef (the piece framed, or with gzip a gzip member when large enough), or with a seed
    a BucketRef (the shard's records by bucket, with their keys)."""

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
    ) -> None:
        self._num_shards, self._seed = num_shards, seed
        self._temp_dir, self._split = temp_dir, split
        self._pack = seed is None and compression == "gzip"
        self._level, self._backend = level, backend
        self._buckets = buckets if seed is not None else 1

    def setup(self) -> None:
        self._compress = gzip_compressor(self._level, self._backend) if self._pack else None

    def start_bundle(self) -> None:
        self._spill = SpillWriter(self._temp_dir, self._split)
        self._out: list[tuple[int, SpillRef]] = []

    def _by_group(self, batch: EncodedBatch, groups: np.ndarray, count: int) -> tuple:
        """The batch's records ordered by group id (stably), their offsets, the record bounds
        of each group and the order."""
        order = np.argsort(groups, kind="stable")
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

    def process(self, batch: EncodedBatch) -> None:
        """Spills the batch; its references are emitted at the end of the bundle."""
        if not batch.framed:
            raise ValueError("the shard writer needs framed records (EncodeExamples(framed=True))")
        if batch.num_records == 0:
            return
        refs = self._pieces(batch) if self._seed is None else self._buckets_of(batch)
        self._out.extend(refs)

    def finish_bundle(self) -> Iterator[WindowedValue]:
        # The references leave the bundle only once their spill files are closed (complete).
        self._spill.close()
        for element in self._out:
            yield WindowedValue(element, MIN_TIMESTAMP, [GlobalWindow()])
        self._out = []


def _read_into(reader: SpillReader, ranges: list[tuple[str, int, int]], dtype: type) -> np.ndarray:
    """The byte ranges (path, start, stop) read one after the other into one array."""
    out = np.empty(sum(stop - start for _, start, stop in ranges), dtype=np.uint8)
    view, pos = memoryview(out), 0
    for path, start, stop in ranges:
        reader.read_into(path, start, view[pos : pos + stop - start])
        pos += stop - start
    return out.view(dtype)


@beam.typehints.with_input_types(tuple[int, Iterable[SpillRef]])
@beam.typehints.with_output_types(ShardPart)
class WriteShardFn(beam.DoFn):
    """(shard index, where its pieces were spilled) -> ShardPart: the pieces in the order of
    their origin (the same file on every run), or with a seed every record in the order of its
    shuffle key, a group of buckets at a time. `progress_dir`: where it reports what it has
    written (write/progress.py); None: nowhere."""

    def __init__(
        self, split: str, temp_dir: str, compression: str, level: int | None, backend: str,
        seed: int | None, progress_dir: str | None = None,
    ) -> None:  # fmt: skip
        self._split, self._temp_dir = split, temp_dir
        self._compression, self._level, self._backend = compression, level, backend
        self._seed = seed
        self._progress_dir = progress_dir

    def setup(self) -> None:
        self._compress = block_compressor(self._compression, self._level, self._backend)
        self._progress = None
        if self._progress_dir is not None:
            self._progress = SinkProgress(self._progress_dir, self._split)

    def _write_pieces(self, runs: BlockRuns, out: BlockFile, refs: list[PieceRef]) -> None:
        reader = SpillReader()
        try:
            for ref in refs:
                data = reader.read(ref.path, ref.start, ref.stop)
                if ref.packed:  # a gzip member ends the run of framed pieces before it
                    runs.end_run()
                    out.write_compressed(data, ref.rows, ref.framed_bytes)
                else:
                    buffer = np.frombuffer(data, np.uint8)
                    runs.add(buffer, framed_offsets(buffer))
        finally:
            reader.close()

    def _write_sorted(self, runs: BlockRuns, refs: list[BucketRef]) -> None:
        sizes = sum(np.diff(ref.byte_bounds) for ref in refs)
        reader = SpillReader()
        try:
            for a, b in bucket_groups(sizes):
                data, keys = [], []
                for ref in refs:  # in origin order: the sort below is stable
                    lo, hi = int(ref.byte_bounds[a]), int(ref.byte_bounds[b])
                    if lo < hi:
                        data.append((ref.path, ref.data_at + lo, ref.data_at + hi))
                        ra, rb = int(ref.record_bounds[a]), int(ref.record_bounds[b])
                        keys.append((ref.path, ref.keys_at + 8 * ra, ref.keys_at + 8 * rb))
                buffer = _read_into(reader, data, np.uint8)
                order = np.argsort(_read_into(reader, keys, np.uint64), kind="stable")
                runs.add(*gather_records(buffer, framed_offsets(buffer), order))
                del buffer, order
        finally:
            reader.close()

    def process(self, element: tuple[int, Iterable[SpillRef]]) -> Iterator[ShardPart]:
        shard, refs = element
        order_key = (shard, 0)
        path = temp_path(self._temp_dir, self._split, order_key, self._compression)
        told = None if self._progress is None else self._progress.add
        out = BlockFile(path, self._compression, self._compress, order_key, self._split, told)
        runs = BlockRuns(out)
        ordered = sorted(refs, key=lambda ref: ref.origin)
        if self._seed is None:
            self._write_pieces(runs, out, ordered)
        else:
            self._write_sorted(runs, ordered)
        runs.end_run()
        yield out.close()

    def finish_bundle(self) -> None:
        if self._progress is not None:
            self._progress.flush()
