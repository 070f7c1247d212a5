"""A shuffled shard written by several workers at once, byte for byte what `write_shard` writes.

`write_shard` writes a shard's records in key order, a group of buckets at a time, into blocks
cut at the first record end at or past each multiple of BLOCK_BYTES from the shard's start
(`BlockRuns`). Where the cuts fall depends only on where the records lie in the shard, and the
framed bytes of each bucket group are known before a record is read (the references' bucket
bounds). So a shard's groups are cut into slices of about SLICE_BYTES (`plan_slices`) that
workers write at once (`write_slice`): each knows where its first record lies in the shard,
cuts its records where `BlockRuns` would, compresses and spills the blocks that begin and end
inside it, and spills framed the records before its first cut (the end of a block begun in an
earlier slice) and after its last (the start of one that ends in a later slice).
`assemble_shard` then writes the shard file: each slice's whole blocks copied as they are (in
the kernel), each block that crosses slices joined and compressed.

Without this a shuffled split is written one shard per worker: 3 shards on 2 workers take two
rounds, and a shard's sort and compression, most of the grouped write's work, stay on one core.
zlib (one deflate stream per file) cannot be cut: its shards are written whole.
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Callable, Sequence
from typing import BinaryIO

import numpy as np

from transforms.fs import CompressionTypes, FileSystems
from transforms.write.files import BlockFile, ShardPart, temp_path
from transforms.write.grouped import records
from transforms.write.grouped.pieces import shard_bucket_bytes, sorted_groups
from transforms.write.grouped.spill import BucketRef, SpillReader, bucket_groups
from transforms.write.rolling.blocks import BlockReader, BlockRef

__all__ = [
    "SLICE_BYTES",
    "Slice",
    "SliceOut",
    "assemble_shard",
    "can_slice",
    "plan_slices",
    "write_slice",
]

SLICE_BYTES = 32 << 20  # framed bytes of a slice, about: a 400 MiB shard is a dozen work items

Told = Callable[[int, int], None]


def can_slice(compression: str) -> bool:
    """Whether a shard of this compression can be written in slices (not zlib's one stream)."""
    return compression in ("gzip", "none")


@dataclasses.dataclass(frozen=True)
class Slice:
    """Consecutive bucket groups of one shard: the `index`-th slice, whose first record lies
    `start` framed bytes into the shard. `refs`: the shard's references, in origin order."""

    split: str
    shard: int
    index: int
    refs: tuple[BucketRef, ...]
    groups: tuple[tuple[int, int], ...]
    start: int
    framed_bytes: int


@dataclasses.dataclass(frozen=True)
class SliceOut:
    """What a slice spilled: `first`, framed records that end the block open before the slice
    (None when the slice starts the shard, or holds no cut); `blocks`, whole blocks as the
    shard stores them; `rest`, framed records that begin a block ending in a later slice."""

    first: BlockRef | None
    blocks: tuple[BlockRef, ...]
    rest: BlockRef | None


def plan_slices(
    split: str, shard: int, refs: Sequence[BucketRef], limit: int | None = None
) -> list[Slice]:
    """The shard's bucket groups cut into slices of about `limit` (SLICE_BYTES) framed bytes, a
    group never cut. A shard with no records has no slice."""
    limit = limit or SLICE_BYTES
    ordered = tuple(sorted(refs, key=lambda ref: ref.origin))
    if not ordered:
        return []
    sizes = shard_bucket_bytes(ordered)
    slices: list[Slice] = []
    held: list[tuple[int, int]] = []
    start = held_bytes = 0

    def close() -> None:
        nonlocal start, held_bytes
        slices.append(Slice(split, shard, len(slices), ordered, tuple(held), start, held_bytes))
        start += held_bytes
        held.clear()
        held_bytes = 0

    for a, b in bucket_groups(sizes):
        if held and held_bytes >= limit:
            close()
        held.append((a, b))
        held_bytes += int(sizes[a:b].sum())
    if held:
        close()
    return slices


class _Segments:
    """Appends a slice's blocks and framed runs to one spill file `<split>-blocks-<uuid>` in
    the temp directory (finalize_shards removes what is left there)."""

    def __init__(self, temp_dir: str, split: str, compression: str) -> None:
        self._path = FileSystems.join(temp_dir, f"{split}-blocks-{uuid.uuid4().hex}")
        self._compression = compression
        self._file: BinaryIO | None = None
        self._pos = 0

    def add(self, data: bytes | memoryview, rows: int, framed: int, stored: bool) -> BlockRef:
        """`data` spilled: a block as stored (`stored`), or framed records."""
        if self._file is None:
            self._file = FileSystems.create(
                self._path, compression_type=CompressionTypes.UNCOMPRESSED
            )
        self._file.write(data)
        size = data.nbytes if isinstance(data, memoryview) else len(data)
        kind = self._compression if stored else "none"
        ref = BlockRef(self._path, self._pos, size, rows, framed, kind, "", 0, 0)
        self._pos += size
        return ref

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


def write_slice(
    item: Slice,
    temp_dir: str,
    compression: str,
    compress: Callable[[memoryview], bytes] | None,
    told: Told | None = None,
) -> SliceOut:
    """The slice's records in key order, cut into blocks where `BlockRuns` cuts the whole
    shard, spilled (see the module's docstring). `compress`: the block compressor
    (files.block_compressor; None: blocks stored framed); `told`: told (records, bytes) as
    records are spilled (0 bytes for framed runs: `assemble_shard` tells their bytes)."""
    block_bytes = records.BLOCK_BYTES
    segments = _Segments(temp_dir, item.split, compression)
    first: BlockRef | None = None
    blocks: list[BlockRef] = []
    pending: list[np.ndarray] = []
    rows, pos, cut_seen = 0, item.start, False
    reader = SpillReader()
    try:
        for buffer, offsets in sorted_groups(reader, item.refs, item.groups):
            n = len(offsets) - 1
            if n <= 0:
                continue
            rel = offsets - offsets[0] + pos  # where each record starts in the shard
            cuts = np.flatnonzero(rel[1:] // block_bytes > rel[:-1] // block_bytes) + 1
            prev = 0
            for cut in cuts.tolist():
                pending.append(buffer[offsets[prev] : offsets[cut]])
                rows += cut - prev
                block = pending[0] if len(pending) == 1 else np.concatenate(pending)
                if not cut_seen and item.start > 0:  # ends a block begun before the slice
                    first = segments.add(memoryview(block), rows, block.nbytes, stored=False)
                    _tell(told, rows, 0)
                else:
                    data = memoryview(block) if compress is None else compress(memoryview(block))
                    stored = segments.add(data, rows, block.nbytes, stored=True)
                    blocks.append(stored)
                    _tell(told, rows, stored.size)
                cut_seen = True
                pending, rows, prev = [], 0, cut
            if prev < n:  # a copy: the rest must not keep the whole group alive
                pending.append(buffer[offsets[prev] : offsets[n]].copy())
                rows += n - prev
            pos = int(rel[-1])
        rest = None
        if pending:
            block = pending[0] if len(pending) == 1 else np.concatenate(pending)
            rest = segments.add(memoryview(block), rows, block.nbytes, stored=False)
            _tell(told, rows, 0)
    finally:
        reader.close()
        segments.close()
    return SliceOut(first, tuple(blocks), rest)


def _tell(told: Told | None, rows: int, nbytes: int) -> None:
    if told is not None:
        told(rows, nbytes)


def assemble_shard(
    split: str,
    shard: int,
    outs: Sequence[SliceOut],
    temp_dir: str,
    compression: str,
    compress: Callable[[memoryview], bytes] | None,
    told: Told | None = None,
) -> ShardPart:
    """The shard's temp file from its slices, in order: the same bytes `write_shard` writes.
    `told`: told (0, bytes) for each block joined here (the slices told their records)."""
    order_key = (shard, 0)
    out = BlockFile(temp_path(temp_dir, split, order_key, compression), compression, compress,
                    order_key, split)  # fmt: skip
    reader = BlockReader()
    pending: list[bytes] = []
    rows = 0

    def flush() -> None:
        nonlocal pending, rows
        if pending:
            before = out.bytes
            out.write(np.frombuffer(b"".join(pending), np.uint8), rows)
            _tell(told, 0, out.bytes - before)
        pending, rows = [], 0

    try:
        for piece in outs:
            if piece.first is not None:  # the open block ends in this slice
                pending.append(reader.read(piece.first))
                rows += piece.first.rows
                flush()
            for ref in piece.blocks:
                out.write_copied(
                    lambda f, ref=ref: reader.copy(ref, f), ref.size, ref.rows, ref.framed_bytes
                )
            if piece.rest is not None:
                pending.append(reader.read(piece.rest))
                rows += piece.rest.rows
        flush()
    finally:
        reader.close()
    return out.close()
