"""Spill files of the grouped write: the records of each batch, cut by shard (and with a shuffle
by key range, "bucket"), go to a file under the job's temp directory, and only a small reference
to where they lie (`PieceRef`, `BucketRef`) crosses the GroupByKey. The shard writer then reads
its records back a bounded part at a time, so neither the shuffle nor the writer holds a shard.

A spill file is a run of chunks, one per batch. Without a shuffle a chunk holds the batch's piece
of each shard in shard order (framed records, or with gzip a large piece as one gzip member).
With a shuffle it holds, per shard, the shard's records ordered by bucket (the records of a bucket
in the batch's order), then their uint64 shuffle keys in the same order; the reference carries the
bucket bounds, so the writer reads any range of buckets with two reads.

Spill files are named `<split>-spill-<uuid>` in the temp directory, a new name per file: a failed
attempt's files are never referenced by a committed element, and finalize_shards deletes every
`<split>-*` file left in the temp directory once the shards are renamed (spill files are not
deleted by the writer: a retried writer must find them).
"""

from __future__ import annotations

import dataclasses
import math
import uuid
from typing import BinaryIO

import numpy as np

from transforms.fs import CompressionTypes, FileSystems, is_local
from transforms.write.direct import DirectReader, DirectWriter

__all__ = [
    "BUCKET_BYTES",
    "DEFAULT_BUCKETS",
    "SORT_BYTES",
    "SPILL_FILE_BYTES",
    "BucketRef",
    "PieceRef",
    "SpillReader",
    "SpillWriter",
    "bucket_groups",
    "buckets_per_shard",
]

SORT_BYTES = 16 << 20  # framed bytes the shard writer reads and sorts at once (a bucket group):
# a group the CPU's cache holds (32 MiB of L3 here) is gathered into key order 1.4x faster than
# a 64 MiB one, whose records come back from memory one cache miss at a time
BUCKET_BYTES = 16 << 20  # a bucket's framed bytes at the planned output size, at most
DEFAULT_BUCKETS = 256  # buckets per shard at least: shards up to 4 GiB framed need no estimate
# (small buckets also keep the writer's gather, bucket by bucket, within the CPU's cache)
MAX_BUCKETS = 1 << 16
SPILL_FILE_BYTES = 256 << 20  # a spill file is closed and a new one started past this size
FRAMED_PER_STORED = 4  # framed bytes per compressed output byte assumed from an estimate


@dataclasses.dataclass(frozen=True)
class PieceRef:
    """One batch's records for one shard (no shuffle): bytes [start, stop) of a spill file,
    framed records, or one gzip member of `framed_bytes` framed bytes when `packed`."""

    path: str
    start: int
    stop: int
    rows: int
    framed_bytes: int
    packed: bool
    origin: tuple[str, int, int]  # (source, first_row, task) of the batch


@dataclasses.dataclass(frozen=True)
class BucketRef:
    """One batch's records for one shard (a shuffle), by bucket: bucket b's records are the
    file's bytes [data_at + byte_bounds[b], data_at + byte_bounds[b + 1]) and their keys are
    uint64 number [record_bounds[b], record_bounds[b + 1]) from `keys_at`."""

    path: str
    data_at: int
    keys_at: int
    byte_bounds: np.ndarray  # int64, buckets + 1
    record_bounds: np.ndarray  # int32, buckets + 1
    origin: tuple[str, int, int]  # (source, first_row, task) of the batch


def buckets_per_shard(estimated_bytes: int, num_shards: int) -> int:
    """Buckets each shard's key range is cut into: enough that a bucket of a shard of the
    planned size (`estimated_bytes`: the whole output, as stored) holds about BUCKET_BYTES
    framed bytes or less; DEFAULT_BUCKETS at least."""
    framed = max(0, estimated_bytes) * FRAMED_PER_STORED / max(1, num_shards)
    return int(min(MAX_BUCKETS, max(DEFAULT_BUCKETS, math.ceil(framed / BUCKET_BYTES))))


def bucket_groups(sizes: np.ndarray, limit: int | None = None) -> list[tuple[int, int]]:
    """Consecutive buckets [a, b) of about `limit` (SORT_BYTES) bytes in all (a larger bucket
    alone), so that the writer sorts one group at a time. Empty buckets join their neighbours."""
    limit = limit or SORT_BYTES
    groups, start, held = [], 0, 0
    for b, size in enumerate(sizes.tolist()):
        if held and held + size > limit:
            groups.append((start, b))
            start, held = b, 0
        held += size
    if held:
        groups.append((start, len(sizes)))
    return groups


class SpillWriter:
    """Appends chunks to spill files `<split>-spill-<uuid>` under `temp_dir`, a new file past
    SPILL_FILE_BYTES; on a local disk around the page cache (transforms/write/direct.py).
    `close` must run before the references leave the bundle."""

    def __init__(self, temp_dir: str, split: str) -> None:
        self._temp_dir, self._split = temp_dir, split
        self._file: BinaryIO | DirectWriter | None = None
        self._path = ""
        self._pos = 0

    def _target(self) -> tuple[str, int]:
        if self._file is not None and self._pos >= SPILL_FILE_BYTES:
            self.close()
        if self._file is None:
            name = f"{self._split}-spill-{uuid.uuid4().hex}"
            self._path = FileSystems.join(self._temp_dir, name)
            if is_local(self._path):
                self._file = DirectWriter(self._path)
            else:
                self._file = FileSystems.create(
                    self._path, compression_type=CompressionTypes.UNCOMPRESSED
                )
            self._pos = 0
        return self._path, self._pos

    def write(self, parts: list[bytes | memoryview]) -> tuple[str, int]:
        """Write `parts` one after the other; returns (path, offset of the first)."""
        path, start = self._target()
        for part in parts:
            n = len(part) if isinstance(part, bytes) else part.nbytes
            if n:
                self._file.write(part)
                self._pos += n
        return path, start

    def close(self) -> None:
        if self._file is not None:
            file, self._file = self._file, None
            file.close()


class SpillReader:
    """Reads ranges of spill files, keeping each file open until `close` (local files with
    O_DIRECT, as they were written)."""

    def __init__(self) -> None:
        self._files: dict[str, BinaryIO] = {}
        self._direct: DirectReader | None = None

    def _open(self, path: str) -> BinaryIO:
        f = self._files.get(path)
        if f is None:
            try:
                f = FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED)
            except OSError as err:
                raise _missing(path, err) from err
            self._files[path] = f
        return f

    def read(self, path: str, start: int, stop: int) -> bytes:
        """Bytes [start, stop) of the file."""
        out = bytearray(stop - start)
        self.read_into(path, start, memoryview(out))
        return bytes(out)

    def read_into(self, path: str, start: int, out: memoryview) -> None:
        """Fill `out` with the file's bytes from `start`."""
        want = out.nbytes
        if is_local(path):
            if self._direct is None:
                self._direct = DirectReader()
            try:
                done = self._direct.read_into(path, start, out)
            except FileNotFoundError as err:
                raise _missing(path, err) from err
        else:
            f = self._open(path)
            f.seek(start)
            done = 0
            while done < want:
                n = f.readinto(out[done:])
                if not n:
                    break
                done += n
        if done < want:
            raise OSError(
                f"{path}: spill file ends at byte {start + done}, expected {start + want}; "
                "it was truncated or overwritten after it was written"
            )

    def close(self) -> None:
        for f in self._files.values():
            f.close()
        self._files = {}
        if self._direct is not None:
            self._direct.close()
            self._direct = None


def _missing(path: str, err: OSError) -> FileNotFoundError:
    return FileNotFoundError(
        f"{path}: a spill file of the grouped write is missing ({err}); the temp "
        "directory must stay in place until the shards are finalized"
    )
