"""An output's records without TensorFlow: a split's shards (from the manifest), the records of
a shard a decompressed block at a time (both crcs checked by the compiled frame walk), a
partition of a split for one of several readers, and a shuffle buffer.

Records stay in numpy buffers as (buffer, starts, stops) ranges from the shard to the decoder:
no Python object per record.

Partitions: a split's records, numbered across its shards in the manifest's order, are cut into
`count` contiguous ranges of equal size (within one record); partition `index` reads its range,
skipping the records before it in its first shard by their frames alone. The shards' record
counts come from the manifest, or from a scan of the frames where the manifest has none (Beam's
own sink). So N readers (data-parallel ranks, DataLoader workers) read every record once.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Sequence

import numpy as np
from numba import njit

from pipeline.output.entries import entry
from pipeline.output.manifest import Manifest
from transforms.write import tfrecord
from transforms.write.frames import BAD_LENGTH, OK, frames_of

__all__ = [
    "CorruptShardError",
    "RecordBlock",
    "Shard",
    "ShuffleBuffer",
    "partition",
    "read_records",
    "split_shards",
]


@dataclasses.dataclass(frozen=True)
class Shard:
    """One shard of a split: its path, compression and records (None: not known)."""

    path: str
    compression: str
    rows: int | None


@dataclasses.dataclass(frozen=True)
class RecordBlock:
    """Records buffer[starts[i]:stops[i]], in order."""

    buffer: np.ndarray
    starts: np.ndarray
    stops: np.ndarray

    def __len__(self) -> int:
        return int(self.starts.shape[0])


def split_shards(output: str, manifest: Manifest, split: str) -> list[Shard]:
    """The shards of `split`, in the manifest's order (never reached through a link)."""
    if split not in manifest.splits:
        raise ValueError(
            f"{output}: split {split!r} is not in the manifest (splits: {sorted(manifest.splits)})"
        )
    entry_of = manifest.splits[split]
    rows = {s.file: s.rows for s in entry_of.shards}
    return [
        Shard(entry(output, name), manifest.compression, rows.get(name)) for name in entry_of.files
    ]


class CorruptShardError(ValueError):
    """A shard whose frames do not check out (a crc, a truncated record, a corrupt stream)."""


def read_records(shard: Shard, first: int = 0, stop: int | None = None) -> Iterator[RecordBlock]:
    """Records [first, stop) of the shard, a decompressed block at a time, crcs checked."""
    carry = np.zeros(0, np.uint8)
    index = 0  # the file's record number of the next frame
    try:
        for chunk in tfrecord.decompressed_chunks(shard.path, shard.compression):
            data = np.frombuffer(chunk, np.uint8)
            buf = np.concatenate((carry, data)) if carry.size else data
            _, starts, stops, states, end, why = frames_of(buf)
            if (states != OK).any():
                bad = index + int(np.flatnonzero(states != OK)[0])
                raise CorruptShardError(
                    f"{shard.path}: record {bad}: the data's crc does not match"
                )
            if why == BAD_LENGTH:
                raise CorruptShardError(
                    f"{shard.path}: record {index + len(starts)}: the length's crc does not match"
                )
            a = max(0, first - index)
            b = len(starts) if stop is None else max(0, min(len(starts), stop - index))
            if a < b:
                yield RecordBlock(buf, starts[a:b], stops[a:b])
            index += len(starts)
            carry = buf[end:].copy() if end < buf.shape[0] else np.zeros(0, np.uint8)
            if stop is not None and index >= stop:
                return
    except tfrecord.StreamError as err:
        raise CorruptShardError(f"{shard.path}: {err}") from err
    if carry.size:
        raise CorruptShardError(
            f"{shard.path}: record {index}: truncated ({carry.size} byte(s) at the end)"
        )


def _count(shard: Shard) -> int:
    return shard.rows if shard.rows is not None else sum(len(b) for b in read_records(shard))


def partition(shards: Sequence[Shard], index: int, count: int) -> list[tuple[Shard, int, int]]:
    """(shard, first, stop) record ranges of partition `index` of `count`: the split's records
    numbered across its shards, cut into `count` contiguous ranges within one of each other."""
    if not 0 <= index < count:
        raise ValueError(f"partition {index} of {count}: expected 0 <= index < count")
    if count == 1:
        return [(s, 0, _count(s)) for s in shards]
    sizes = [_count(s) for s in shards]
    total = sum(sizes)
    lo, hi = index * total // count, (index + 1) * total // count
    out, at = [], 0
    for shard, size in zip(shards, sizes, strict=True):
        a, b = max(lo, at), min(hi, at + size)
        if a < b:
            out.append((shard, a - at, b - at))
        at += size
    return out


@njit(cache=True)
def _gather(buf, starts, stops):  # noqa: ANN001, ANN202
    """The records buf[starts[i]:stops[i]] side by side in a new buffer; their new ranges."""
    n = starts.shape[0]
    size = 0
    for i in range(n):
        size += stops[i] - starts[i]
    out = np.empty(size, np.uint8)
    new_starts = np.empty(n, np.int64)
    new_stops = np.empty(n, np.int64)
    p = 0
    for i in range(n):
        new_starts[i] = p
        for j in range(starts[i], stops[i]):
            out[p] = buf[j]
            p += 1
        new_stops[i] = p
    return out, new_starts, new_stops


def gather(block: RecordBlock, order: np.ndarray | None = None) -> RecordBlock:
    """The block's records (in `order`, if given) in a buffer of their own."""
    starts, stops = block.starts, block.stops
    if order is not None:
        starts, stops = starts[order], stops[order]
    buf, new_starts, new_stops = _gather(block.buffer, starts, stops)
    return RecordBlock(buf, new_starts, new_stops)


class ShuffleBuffer:
    """Records in, records out in random order, as tf.data's shuffle: each record out is drawn
    uniformly from the `size` records held, and its place taken by the next one in. Records
    are kept as ranges of one numpy buffer (compacted when half of it is spent)."""

    def __init__(self, size: int, rng: np.random.Generator) -> None:
        self.size, self._rng = size, rng
        self._buf = np.zeros(0, np.uint8)
        self._starts = np.zeros(0, np.int64)
        self._stops = np.zeros(0, np.int64)
        self._spent = 0  # bytes of records taken out, still in the buffer

    def __len__(self) -> int:
        return int(self._starts.shape[0])

    def add(self, block: RecordBlock) -> None:
        own = gather(block)
        base = self._buf.shape[0]
        self._buf = np.concatenate((self._buf, own.buffer))
        self._starts = np.concatenate((self._starts, own.starts + base))
        self._stops = np.concatenate((self._stops, own.stops + base))

    def full(self) -> bool:
        return len(self) >= self.size

    def take(self, n: int) -> RecordBlock:
        """`n` records drawn at random (fewer when fewer are held), gathered."""
        n = min(n, len(self))
        picked = self._rng.choice(len(self), n, replace=False)
        out = gather(RecordBlock(self._buf, self._starts, self._stops), picked)
        keep = np.ones(len(self), np.bool_)
        keep[picked] = False
        self._spent += int((self._stops[picked] - self._starts[picked]).sum())
        self._starts, self._stops = self._starts[keep], self._stops[keep]
        if self._spent * 2 > self._buf.shape[0]:  # compact
            kept = gather(RecordBlock(self._buf, self._starts, self._stops))
            self._buf, self._starts, self._stops = kept.buffer, kept.starts, kept.stops
            self._spent = 0
        return out
