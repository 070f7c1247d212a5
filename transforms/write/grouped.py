"""The grouped write (`num_shards` > 0, or a shuffle): every batch is cut into one piece per
shard, the pieces of a shard meet on one worker (a GroupByKey), which writes them in a stable
order, or, with a seed, in the order of a seeded hash of each record (a global shuffle)."""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Iterable, Iterator, Sequence

import apache_beam as beam
import numpy as np
from numba import njit

from transforms.encode.records import EncodedBatch, concat_batches
from transforms.hashing import hash_ranges
from transforms.split.assign import partition_records
from transforms.write.compression import gzip_compressor
from transforms.write.files import BlockFile, ShardPart, block_compressor, temp_path
from transforms.write.tfrecord import FOOTER_BYTES, HEADER_BYTES

__all__ = [
    "BLOCK_BYTES",
    "PACK_MIN_BYTES",
    "PackedPiece",
    "ToShardsFn",
    "WriteShardFn",
    "gather_records",
    "shard_ids",
    "shuffle_keys",
]

BLOCK_BYTES = 4 << 20  # a grouped write compresses its records in blocks of about this size


def shuffle_keys(batch: EncodedBatch, seed: int) -> np.ndarray:
    """uint64 key of each record: the project's hash of its Example bytes, salted with the seed.
    Sorting by it is a seeded pseudo-random order that depends only on the records."""
    starts, ends = batch.offsets[:-1], batch.offsets[1:]
    if batch.framed:
        starts, ends = starts + HEADER_BYTES, ends - FOOTER_BYTES
    return hash_ranges(starts, ends, batch.buffer, f"shuffle:{seed}")


def shard_ids(batch: EncodedBatch, num_shards: int, seed: int | None) -> np.ndarray:
    """The shard of each record of `batch`: with a seed, by range of its shuffle key (so that
    shards, each sorted by key, make one global order); else dealt round-robin from an offset
    that depends on the batch's origin, so every shard takes an even share of every batch."""
    n = batch.num_records
    if seed is not None:
        keys = shuffle_keys(batch, seed)
        return ((keys >> np.uint64(32)) * np.uint64(num_shards) >> np.uint64(32)).astype(np.int64)
    origin = np.frombuffer(f"{batch.source}\0{batch.first_row}".encode(), np.uint8)
    offset = int(hash_ranges(np.array([0]), np.array([origin.size]), origin, "")[0] % num_shards)
    return (offset + np.arange(n, dtype=np.int64)) % num_shards


@njit(cache=True)
def gather_records(
    buffer: np.ndarray, offsets: np.ndarray, order: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:  # pragma: no cover
    """Records `order[0], order[1], ...` of (buffer, offsets), as a new (buffer, offsets)."""
    out_off = np.empty(order.shape[0] + 1, dtype=np.int64)
    out_off[0] = 0
    for i in range(order.shape[0]):
        r = order[i]
        out_off[i + 1] = out_off[i] + offsets[r + 1] - offsets[r]
    out = np.empty(out_off[-1], dtype=np.uint8)
    for i in range(order.shape[0]):
        r = order[i]
        src, dst, n = offsets[r], out_off[i], offsets[r + 1] - offsets[r]
        out[dst : dst + n] = buffer[src : src + n]
    return out, out_off


@dataclasses.dataclass(frozen=True)
class PackedPiece:
    """A shard's piece of one batch, already compressed into one gzip member (what crosses the
    shuffle for `num_shards` with gzip: about a third of the framed bytes)."""

    data: bytes
    rows: int
    framed_bytes: int
    source: str
    first_row: int
    task: int


PACK_MIN_BYTES = 256 << 10  # a smaller piece crosses uncompressed and is joined at the writer
# (a gzip member of a few records compresses badly)


def _origin(piece: EncodedBatch | PackedPiece) -> tuple[str, int, int]:
    return piece.source, piece.first_row, piece.task


@beam.typehints.with_input_types(EncodedBatch)
class ToShardsFn(beam.DoFn):
    """EncodedBatch -> (shard index, the records of the batch for that shard): an EncodedBatch,
    or with `compress` (gzip, no shuffle order to keep) a PackedPiece when large enough."""

    def __init__(
        self,
        num_shards: int,
        seed: int | None,
        compression: str = "none",
        level: int | None = None,
        backend: str = "isal",
    ) -> None:
        self._num_shards = num_shards
        self._seed = seed
        self._pack = seed is None and compression == "gzip"
        self._level, self._backend = level, backend

    def setup(self) -> None:
        self._compress = gzip_compressor(self._level, self._backend) if self._pack else None

    def process(self, batch: EncodedBatch) -> Iterator[tuple[int, EncodedBatch | PackedPiece]]:
        ids = shard_ids(batch, self._num_shards, self._seed)
        parts = partition_records(batch.buffer, batch.offsets, ids, self._num_shards)
        for shard, part in enumerate(parts):
            if part is None:
                continue
            piece = dataclasses.replace(batch, buffer=part[0], offsets=part[1])
            size = int(part[0].nbytes)
            if self._compress is not None and size >= PACK_MIN_BYTES:
                data = self._compress(memoryview(part[0]))
                yield (
                    shard,
                    PackedPiece(
                        data, piece.num_records, size, batch.source, batch.first_row, batch.task
                    ),
                )
            else:
                yield shard, piece


def _blocks(buffer: np.ndarray, offsets: np.ndarray) -> Iterator[tuple[np.ndarray, int]]:
    """(block, records) cut at record boundaries, each about BLOCK_BYTES."""
    total = int(offsets[-1])
    cuts = np.searchsorted(offsets, np.arange(BLOCK_BYTES, total, BLOCK_BYTES), side="left")
    bounds = [0, *sorted(set(cuts.tolist()) - {0, len(offsets) - 1}), len(offsets) - 1]
    for a, b in itertools.pairwise(bounds):
        yield buffer[offsets[a] : offsets[b]], b - a


@beam.typehints.with_output_types(ShardPart)
class WriteShardFn(beam.DoFn):
    """(shard index, its pieces) -> ShardPart: pieces in the order of their origin (the same
    file on every run), or with a seed every record in the order of its shuffle key."""

    def __init__(
        self, split: str, temp_dir: str, compression: str, level: int | None, backend: str,
        seed: int | None,
    ) -> None:  # fmt: skip
        self._split, self._temp_dir = split, temp_dir
        self._compression, self._level, self._backend = compression, level, backend
        self._seed = seed

    def setup(self) -> None:
        self._compress = block_compressor(self._compression, self._level, self._backend)

    def _write(self, out: BlockFile, pieces: Sequence[EncodedBatch]) -> None:
        if not pieces:
            return
        merged = concat_batches(pieces)
        buffer, offsets = merged.buffer, merged.offsets
        if self._seed is not None:
            order = np.argsort(shuffle_keys(merged, self._seed), kind="stable")
            buffer, offsets = gather_records(buffer, offsets, order.astype(np.int64))
        for block, rows in _blocks(buffer, offsets):
            out.write(block, rows)

    def process(
        self, element: tuple[int, Iterable[EncodedBatch | PackedPiece]]
    ) -> Iterator[ShardPart]:
        shard, pieces = element
        order_key = (shard, 0)
        path = temp_path(self._temp_dir, self._split, order_key, self._compression)
        out = BlockFile(path, self._compression, self._compress, order_key, self._split)
        pending: list[EncodedBatch] = []  # small pieces, joined into blocks between packed ones
        for piece in sorted(pieces, key=_origin):
            if isinstance(piece, PackedPiece):
                self._write(out, pending)
                pending = []
                out.write_compressed(piece.data, piece.rows, piece.framed_bytes)
            else:
                pending.append(piece)
        self._write(out, pending)
        yield out.close()

