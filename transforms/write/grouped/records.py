"""The records of the grouped write, in numpy and compiled loops (no Beam): each record's shard
(`shard_ids`: round-robin from the batch's origin, or by range of its seeded shuffle key),
finding TFRecord frames in a spilled buffer (`framed_offsets`), and `BlockRuns`, which cuts runs
of records into the blocks a shard file is written in. Records are gathered into a new order by
`gather_records` (transforms/encode/records.py), which the split of a batch uses too.
"""

from __future__ import annotations

import numpy as np

from transforms.encode.records import EncodedBatch
from transforms.hashing import hash_ranges
from transforms.write.files import BlockFile
from transforms.write.frames import framed_offsets
from transforms.write.tfrecord import FOOTER_BYTES, HEADER_BYTES

__all__ = [
    "BLOCK_BYTES",
    "PACK_MIN_BYTES",
    "BlockRuns",
    "bucket_ids",
    "framed_offsets",
    "shard_ids",
    "shuffle_keys",
]

BLOCK_BYTES = 4 << 20  # a grouped write compresses its records in blocks of about this size
PACK_MIN_BYTES = 256 << 10  # without a shuffle, a gzip piece this large is spilled as one gzip
# member and copied as it is into the shard; a smaller one is spilled framed and joined with its
# neighbours into blocks (a gzip member of a few records compresses badly)


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
