"""Shard files while they are written: `BlockFile` (blocks of framed records in, compressed as
configured), the temp file it leaves (`ShardPart`) and the final shard (`ShardFile`)."""

from __future__ import annotations

import dataclasses
import uuid
import zlib
from collections.abc import Callable, Iterable
from typing import BinaryIO

import numpy as np

from transforms.fs import CompressionTypes, FileSystems, is_local
from transforms.write.compression import ZLIB_LEVEL, file_suffix, gzip_compressor
from transforms.write.direct import DirectWriter, direct_wanted
from transforms.write.frames import framed_offsets

__all__ = ["BlockFile", "ShardFile", "ShardPart", "block_compressor", "shard_name", "temp_path"]

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
    none: the framed bytes. `bytes` counts what reached the file so far. `on_write` is told the
    records and bytes of each block written (not of a file appended: they were told already).
    """

    def __init__(
        self,
        path: str,
        compression: str,
        compress: Callable[[memoryview], bytes] | None,
        order: tuple[int, int],
        split: str,
        on_write: Callable[[int, int], None] | None = None,
    ) -> None:
        self.path, self.order, self.split = path, order, split
        self._on_write = on_write  # (records, bytes) as each block reaches the file
        self._compression = compression
        self._compress = compress
        self._deflate = zlib.compressobj(ZLIB_LEVEL) if compression == "zlib" else None
        self._file: BinaryIO | DirectWriter | None = None  # created at its first bytes
        self._held: list[bytes] | None = None  # the bytes held in memory (`hold`), or None
        self._hold_bytes = 0
        self.rows = 0
        self.bytes = 0
        self.framed = 0  # framed bytes written (before compression)

    def hold(self, nbytes: int) -> None:
        """Keep the file's first bytes in memory, nothing on disk, as long as it holds at most
        `nbytes`: a file `fold`ed into another while it does was never written, read back and
        deleted. Before anything is written."""
        if self._file is None and not self.bytes and nbytes > 0:
            self._held, self._hold_bytes = [], nbytes

    def _out(self) -> BinaryIO | DirectWriter:
        if self._file is None:
            self._file = _create(self.path)
        return self._file

    def _holds(self, nbytes: int) -> bool:
        """Whether `nbytes` more stay in memory; else the held bytes go to the file now."""
        if self._held is None:
            return False
        if self.bytes + nbytes <= self._hold_bytes:
            return True
        out = self._out()
        for chunk in self._held:
            out.write(chunk)
        self._held = None
        return False

    def _put(self, data: bytes | memoryview) -> None:
        if data:
            if self._holds(len(data)):  # the caller's buffer is not ours to keep
                self._held.append(data if isinstance(data, bytes) else bytes(data))
            else:
                self._out().write(data)
            self.bytes += len(data)

    def _told(self, rows: int, nbytes: int) -> None:
        if self._on_write is not None:
            self._on_write(rows, nbytes)

    def write(self, buffer: np.ndarray, rows: int) -> None:
        data: bytes | memoryview = memoryview(buffer)
        if self._deflate is not None:  # a sync flush per block: `bytes` is then what it holds
            data = self._deflate.compress(data) + self._deflate.flush(zlib.Z_SYNC_FLUSH)
        elif self._compress is not None:
            data = self._compress(data)
        self._put(data)
        self.rows += rows
        self.framed += int(buffer.nbytes)
        self._told(rows, len(data))

    def write_compressed(self, data: bytes, rows: int, framed_bytes: int) -> None:
        """A block compressed already (a gzip member of `framed_bytes` of framed records)."""
        self._put(data)
        self.rows += rows
        self.framed += framed_bytes
        self._told(rows, len(data))

    def write_copied(
        self,
        copy: Callable[[BinaryIO], None],
        size: int,
        rows: int,
        framed: int,
        read: Callable[[], bytes] | None = None,
    ) -> None:
        """A block as stored (a gzip member, or framed records without compression), appended
        by `copy(file)` (blocks.py: copied in the kernel), or held as `read()` gives it while
        the file is held (`hold`): `size` bytes, `rows` records of `framed` framed bytes."""
        if read is not None and self._holds(size):
            self._held.append(read())
        else:
            self._holds(size)  # a file held so far gets its bytes first
            copy(self._out())
        self.bytes += size
        self.rows += rows
        self.framed += framed
        self._told(rows, size)

    def fold(self, other: BlockFile) -> None:
        """Append the records of `other`, a later file of the same compression not closed yet,
        and drop it: from memory while it is held (`hold`: it never reached the disk), else
        from its closed temp file (`append`)."""
        if other._held is None:
            self.append(other.close())
            return
        chunks = other._held
        if other._deflate is not None:
            chunks.append(other._deflate.flush())
        other._held = None
        self._append_chunks(chunks)
        self.rows += other.rows

    def append(self, other: ShardPart) -> None:
        """Append the records of a closed temp file of the same compression, and delete it."""
        with FileSystems.open(other.temp_path, compression_type=CompressionTypes.UNCOMPRESSED) as f:
            self._append_chunks(iter(lambda: f.read(_COPY_BYTES), b""))
        self.rows += other.rows
        FileSystems.delete([other.temp_path])

    def _append_chunks(self, chunks: Iterable[bytes]) -> None:
        """Another file's bytes of the same compression, appended: gzip and none as they are
        (gzip members concatenate); zlib re-deflated."""
        inflate = zlib.decompressobj() if self._deflate is not None else None
        for chunk in chunks:
            if inflate is not None:
                self._put(self._deflate.compress(inflate.decompress(chunk)))
            else:
                self._put(chunk)

    def close(self) -> ShardPart:
        if self._deflate is not None:
            tail = self._deflate.flush()
            self._put(tail)
            self._told(0, len(tail))
        if self._held is not None:  # held to the end: written now
            self._holds(self._hold_bytes + 1)
        self._out().close()
        return ShardPart(self.split, self.order, self.path, self.rows, self.bytes)


def _create(path: str) -> BinaryIO | DirectWriter:
    """A new shard file: a local one around the page cache (transforms/write/direct.py: on a VM
    the kernel's copy into fresh page-cache pages took a third of a keep-bytes job's CPU), any
    other through Beam's filesystems."""
    if is_local(path) and direct_wanted("OUTPUT_IO"):
        return DirectWriter(path, direct=True)
    return FileSystems.create(path, compression_type=CompressionTypes.UNCOMPRESSED)


def block_compressor(
    compression: str, level: int | None, backend: str, member_bytes: int | None = None
) -> Callable[[memoryview], bytes] | None:
    """What each block goes through: a gzip member per block, or None (zlib deflates per file).

    `member_bytes` (an indexed output, transforms/write/index.py): a block becomes members of
    about that many framed bytes, each ending at the first record end at or past each multiple
    of it from the block's start, so that one record is read back by inflating one small
    member. The cuts depend on the block alone: a block compressed ahead of its file
    (blocks.py) is the same bytes."""
    if compression != "gzip":
        return None
    compress = gzip_compressor(level, backend)
    if member_bytes is None:
        return compress

    def members(data: memoryview) -> bytes:
        buffer = np.frombuffer(data, np.uint8)
        offsets = framed_offsets(buffer)
        cuts = np.flatnonzero(offsets[1:] // member_bytes > offsets[:-1] // member_bytes) + 1
        ends = [int(offsets[c]) for c in cuts.tolist()]
        if not ends or ends[-1] != buffer.shape[0]:
            ends.append(buffer.shape[0])
        out, start = [], 0
        for end in ends:
            out.append(compress(data[start:end]))
            start = end
        return b"".join(out)

    return members


def temp_path(temp_dir: str, split: str, order: tuple[int, int], compression: str) -> str:
    """A temp file's unique path: an attempt that does not commit never shares one."""
    name = f"{split}-{order[0]:06d}-{order[1]:05d}-{uuid.uuid4().hex}{file_suffix(compression)}"
    return FileSystems.join(temp_dir, name)
