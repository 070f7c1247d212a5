"""Shard files: blocks of framed records written to temp files, then renamed into place.

Three ways to fill the temp files, one way to finish them (`finalize_shards`):
- rolling (`_RollingWriteDoFn`, the default): each worker writes the rows of its ReadTask as
  they come, per split into files of the target size; no record crosses the network.
- grouped (`_ToShardsDoFn` -> GroupByKey -> `_WriteShardDoFn`): every batch is cut into one
  piece per shard, the pieces of a shard meet on one worker, which writes them in a stable
  order, or, with a seed, in the order of a seeded hash of each record (a global shuffle).
- finalize: when every temp file is written, they are renamed to
  `<split>-SSSSS-of-NNNNN<suffix>`; a retried finalize finds them renamed and goes on.
A file never holds half a record, and a temp file an attempt did not commit is never renamed.
"""

from __future__ import annotations

import dataclasses
import itertools
import uuid
import zlib
from collections.abc import Callable, Iterable, Iterator, Sequence

import apache_beam as beam
import numpy as np
from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems
from apache_beam.transforms.window import GlobalWindow
from apache_beam.utils.timestamp import MIN_TIMESTAMP
from apache_beam.utils.windowed_value import WindowedValue
from numba import njit

from transforms.compression import ZLIB_LEVEL, file_suffix, gzip_compressor
from transforms.encode import EncodedBatch, concat_batches
from transforms.split import FOOTER_BYTES, HEADER_BYTES, hash_ranges, partition_records

__all__ = [
    "BLOCK_BYTES",
    "BlockFile",
    "PackedPiece",
    "ShardFile",
    "ShardPart",
    "finalize_shards",
    "gather_records",
    "shard_ids",
    "shard_name",
    "shuffle_keys",
]

BLOCK_BYTES = 4 << 20  # a grouped write compresses its records in blocks of about this size
_COPY_BYTES = 8 << 20


@dataclasses.dataclass(frozen=True)
class ShardPart:
    """One temp file, written and closed. `order` ranks it among its split's files: (task, part)
    for a rolling write, (shard, 0) for a grouped one."""

    split: str
    order: tuple[int, int]
    temp_path: str
    rows: int
    bytes: int


@dataclasses.dataclass(frozen=True)
class ShardFile:
    """One final shard; rows and bytes are None when Beam's own TFRecord sink wrote it."""

    split: str
    path: str
    rows: int | None
    bytes: int | None


def shard_name(prefix: str, index: int, count: int, suffix: str) -> str:
    return f"{prefix}-{index:05d}-of-{count:05d}{suffix}"


class BlockFile:
    """One shard file being written: blocks of framed records in, compressed as configured.

    gzip: each block is one gzip member; zlib: one zlib stream for the file (TensorFlow's ZLIB);
    none: the framed bytes. `bytes` counts what reached the file so far.
    """

    def __init__(
        self,
        path: str,
        compression: str,
        compress: Callable[[memoryview], bytes] | None,
        order: tuple[int, int],
        split: str,
    ) -> None:
        self.path, self.order, self.split = path, order, split
        self._compression = compression
        self._compress = compress
        self._deflate = zlib.compressobj(ZLIB_LEVEL) if compression == "zlib" else None
        self._file = FileSystems.create(path, compression_type=CompressionTypes.UNCOMPRESSED)
        self.rows = 0
        self.bytes = 0
        self.framed = 0  # framed bytes written (before compression)

    def _put(self, data: bytes | memoryview) -> None:
        if data:
            self._file.write(data)
            self.bytes += len(data)

    def write(self, buffer: np.ndarray, rows: int) -> None:
        data: bytes | memoryview = memoryview(buffer)
        if self._deflate is not None:  # a sync flush per block: `bytes` is then what it holds
            data = self._deflate.compress(data) + self._deflate.flush(zlib.Z_SYNC_FLUSH)
        elif self._compress is not None:
            data = self._compress(data)
        self._put(data)
        self.rows += rows
        self.framed += int(buffer.nbytes)

    def write_compressed(self, data: bytes, rows: int, framed_bytes: int) -> None:
        """A block compressed already (a gzip member of `framed_bytes` of framed records)."""
        self._put(data)
        self.rows += rows
        self.framed += framed_bytes

    def append(self, other: ShardPart) -> None:
        """Append the records of a closed temp file of the same compression, and delete it.
        gzip and none: its bytes as they are (gzip members concatenate); zlib: re-deflated."""
        inflate = zlib.decompressobj() if self._deflate is not None else None
        with FileSystems.open(other.temp_path, compression_type=CompressionTypes.UNCOMPRESSED) as f:
            while chunk := f.read(_COPY_BYTES):
                if inflate is not None:
                    self._put(self._deflate.compress(inflate.decompress(chunk)))
                else:
                    self._put(chunk)
        self.rows += other.rows
        FileSystems.delete([other.temp_path])

    def close(self) -> ShardPart:
        if self._deflate is not None:
            self._put(self._deflate.flush())
        self._file.close()
        return ShardPart(self.split, self.order, self.path, self.rows, self.bytes)


def _compressor(
    compression: str, level: int | None, backend: str
) -> Callable[[memoryview], bytes] | None:
    return gzip_compressor(level, backend) if compression == "gzip" else None


def _temp_path(temp_dir: str, split: str, order: tuple[int, int], compression: str) -> str:
    name = f"{split}-{order[0]:06d}-{order[1]:05d}-{uuid.uuid4().hex}{file_suffix(compression)}"
    return FileSystems.join(temp_dir, name)


class _TaskFiles:
    """The files one task writes for one split: a file is full at `limit` bytes (a batch is cut
    at the record where it fills, its bytes guessed from the file's compression so far); at the
    end a last file smaller than `limit` is appended to the one before. Every file of the task
    then holds `limit` to 2 x `limit` bytes, or the task has a single file.

    One limit for every task (the target size), not one per task fitted to its estimate: the
    estimate can be off for some files (a Parquet file whose strings are dictionary-encoded
    reads small), and per-task sizes would then differ by that error and the last-file fold.
    """

    def __init__(self, new_file: Callable[[int], BlockFile], limit: int) -> None:
        self._new_file = new_file
        self._limit = limit
        self._prev: BlockFile | None = None
        self._cur: BlockFile | None = None
        self._seq = 0
        self._ratio = 1.0  # bytes in the file per framed byte, from the last file

    def _full(self) -> bool:
        return self._cur.bytes >= self._limit

    def _room(self, offsets: np.ndarray, start: int) -> int:
        """How many records from `start` fit in the current file (at least one)."""
        cur = self._cur
        ratio = cur.bytes / cur.framed if cur.framed and cur.bytes else self._ratio
        # aim 2% past the limit: a guess a little short would leave a tiny block to top up
        room = (self._limit * 1.02 - cur.bytes) / max(ratio, 1e-6)
        fit = int(np.searchsorted(offsets[start:] - offsets[start], room, side="right")) - 1
        return max(1, fit)

    def write(self, batch: EncodedBatch) -> list[ShardPart]:
        done = []
        offsets, n, start = batch.offsets, batch.num_records, 0
        while start < n:
            if self._cur is None:
                self._cur = self._new_file(self._seq)
                self._seq += 1
            stop = min(n, start + self._room(offsets, start))
            self._cur.write(batch.buffer[offsets[start] : offsets[stop]], stop - start)
            start = stop
            if self._full():
                if self._cur.framed:
                    self._ratio = self._cur.bytes / self._cur.framed
                if self._prev is not None:
                    done.append(self._prev.close())
                self._prev, self._cur = self._cur, None
        return done

    def close(self) -> list[ShardPart]:
        prev, cur = self._prev, self._cur
        if prev is not None and cur is not None and not self._full():
            prev.append(cur.close())
            cur = None
        self._prev = self._cur = None
        return [f.close() for f in (prev, cur) if f is not None]


class _RollingWriteDoFn(beam.DoFn):
    """EncodedBatch of one split -> ShardPart, each task's rows in files of the target size."""

    def __init__(
        self,
        split: str,
        temp_dir: str,
        compression: str,
        level: int | None,
        backend: str,
        target_bytes: int,
    ) -> None:
        self._split = split
        self._temp_dir = temp_dir
        self._compression = compression
        self._level, self._backend = level, backend
        self._target = target_bytes

    def setup(self) -> None:
        self._compress = _compressor(self._compression, self._level, self._backend)

    def start_bundle(self) -> None:
        self._tasks: dict[int, _TaskFiles] = {}

    def _files(self, task: int) -> _TaskFiles:
        def new_file(seq: int) -> BlockFile:
            order = (task, seq)
            path = _temp_path(self._temp_dir, self._split, order, self._compression)
            return BlockFile(path, self._compression, self._compress, order, self._split)

        return _TaskFiles(new_file, self._target)

    def process(self, batch: EncodedBatch) -> Iterator[ShardPart]:
        if not batch.framed:
            raise ValueError("the shard writer needs framed records (EncodeExamples(framed=True))")
        for task in [t for t in self._tasks if t != batch.task]:  # a task's rows come together
            yield from self._tasks.pop(task).close()
        if batch.task not in self._tasks:
            self._tasks[batch.task] = self._files(batch.task)
        yield from self._tasks[batch.task].write(batch)

    def finish_bundle(self) -> Iterator[WindowedValue]:
        for files in self._tasks.values():
            for part in files.close():
                yield WindowedValue(part, MIN_TIMESTAMP, [GlobalWindow()])
        self._tasks = {}


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


class _ToShardsDoFn(beam.DoFn):
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


class _WriteShardDoFn(beam.DoFn):
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
        self._compress = _compressor(self._compression, self._level, self._backend)

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
        path = _temp_path(self._temp_dir, self._split, order_key, self._compression)
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


def _empty_file(split: str, path: str, compression: str) -> ShardFile:
    """A shard with no record: an empty file (gzip, none) or an empty zlib stream."""
    part = BlockFile(path, compression, None, (0, 0), split).close()
    return ShardFile(split, path, 0, part.bytes)


def finalize_shards(
    _: None,
    parts: Sequence[ShardPart],
    split: str,
    prefix: str,
    compression: str,
    num_shards: int,
    temp_dir: str,
    remove_temp_dir: bool = False,
) -> list[ShardFile]:
    """Rename the split's temp files into `prefix-SSSSS-of-NNNNN<suffix>` in their order and
    remove the temp directory; returns the final shards.

    `num_shards` > 0 (a grouped write): shard i keeps index i and a shard that got no record is
    written empty; otherwise every file gets the next index. A split with no row gets one empty
    shard, so every split the manifest lists can be read. Idempotent: a part already renamed
    (a retried finalize) is taken as it is. `remove_temp_dir`: the directory is this split's
    alone (else other splits may still write there; the job removes it at the end).
    """
    suffix = file_suffix(compression)
    ordered = sorted((p for p in parts if p.split == split), key=lambda p: p.order)
    count = num_shards if num_shards > 0 else max(1, len(ordered))
    index = {p.order: (p.order[0] if num_shards > 0 else i) for i, p in enumerate(ordered)}
    sources, targets, out = [], [], []
    for part in ordered:
        final = shard_name(prefix, index[part.order], count, suffix)
        out.append(ShardFile(split, final, part.rows, part.bytes))
        if FileSystems.exists(part.temp_path):
            sources.append(part.temp_path)
            targets.append(final)
        elif not FileSystems.exists(final):
            raise FileNotFoundError(f"{part.temp_path}: a written shard part is missing")
    if sources:
        FileSystems.rename(sources, targets)
    taken = {index[p.order] for p in ordered}
    for i in range(count):
        if i not in taken:
            out.append(_empty_file(split, shard_name(prefix, i, count, suffix), compression))
    leftovers = [m.path for r in FileSystems.match([FileSystems.join(temp_dir, f"{split}-*")])
                 for m in r.metadata_list]  # fmt: skip
    if leftovers:  # temp files of attempts that did not commit
        FileSystems.delete(leftovers)
    if remove_temp_dir and FileSystems.exists(temp_dir):
        FileSystems.delete([temp_dir])
    return sorted(out, key=lambda f: f.path)
