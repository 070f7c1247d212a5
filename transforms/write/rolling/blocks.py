"""Batches compressed ahead of their file: how the rolling write runs on many workers with the
bytes one worker would write.

The rolling write (task_files.py) writes a read task's batches in order into files of the target
size: each batch is one block (a gzip member, or the framed bytes), except where a file fills
up, where the batch is cut at a record and its two parts are blocks of their own. Only that cut
depends on what the file holds so far; compressing a batch does not. So the work of a task can
be spread over workers by work item: each worker encodes its item's batches and compresses each
one whole, as the block it most likely is (`BlockSpill`: the blocks go to a spill file of the
item, and a `BlockRef` says where each lies). The task's files are then assembled in order
(`TaskFiles.write_block`): a block that fits whole is copied as it is; the rare block the file's
end cuts is read back, decompressed and cut as `TaskFiles.write` would cut it. The files are
byte for byte what one worker writes (tests/test_workers.py).

zlib (one deflate stream per file) cannot be compressed ahead of its file: its blocks are
spilled framed, and the assembly compresses them.
"""

from __future__ import annotations

import dataclasses
import errno
import os
import uuid
from collections.abc import Callable
from typing import BinaryIO

import numpy as np

from transforms.encode.records import EncodedBatch
from transforms.fs import CompressionTypes, FileSystems
from transforms.write.frames import framed_offsets

__all__ = ["BlockReader", "BlockRef", "BlockSpill", "block_batch"]


@dataclasses.dataclass(frozen=True)
class BlockRef:
    """One batch of one split as a block in a spill file: bytes [start, start + size) of `path`,
    `rows` records of `framed_bytes` framed bytes, as the shard holds them for `compression`
    "gzip" (a gzip member) and "none" (the framed records); for "zlib" the framed records, which
    the shard's deflate stream compresses. `source`, `first_row`, `task`: the batch's origin."""

    path: str
    start: int
    size: int
    rows: int
    framed_bytes: int
    compression: str
    source: str
    first_row: int
    task: int

    @property
    def as_stored(self) -> bool:
        """Whether the block's bytes are what a shard file holds (gzip, none), not zlib's."""
        return self.compression != "zlib"


class BlockSpill:
    """The blocks of one work item's batches of one split, appended to one spill file
    `<split>-blocks-<uuid>` in `temp_dir` (finalize_shards removes what is left there).
    `compression`: the output's; `compress`: its block compressor (files.block_compressor)."""

    def __init__(
        self,
        temp_dir: str,
        split: str,
        compression: str,
        compress: Callable[[memoryview], bytes] | None,
    ) -> None:
        self._path = FileSystems.join(temp_dir, f"{split}-blocks-{uuid.uuid4().hex}")
        self._compression = compression
        self._compress = compress if compression == "gzip" else None
        self._file: BinaryIO | None = None
        self._pos = 0
        self.refs: list[BlockRef] = []

    def add(self, batch: EncodedBatch) -> BlockRef:
        """Spill one framed batch as one block; its reference."""
        if not batch.framed:
            raise ValueError("blocks are made of framed records (EncodeExamples(framed=True))")
        if self._file is None:
            self._file = FileSystems.create(
                self._path, compression_type=CompressionTypes.UNCOMPRESSED
            )
        framed = batch.buffer[batch.offsets[0] : batch.offsets[-1]]
        data = memoryview(framed) if self._compress is None else self._compress(memoryview(framed))
        self._file.write(data)
        size = data.nbytes if isinstance(data, memoryview) else len(data)
        ref = BlockRef(
            self._path, self._pos, size, batch.num_records, int(framed.nbytes),
            self._compression, batch.source, batch.first_row, batch.task,
        )  # fmt: skip
        self._pos += size
        self.refs.append(ref)
        return ref

    def close(self) -> list[BlockRef]:
        """Close the file; the references (whole from now on)."""
        if self._file is not None:
            self._file.close()
            self._file = None
        return self.refs


class BlockReader:
    """Reads spilled blocks, keeping each spill file open until `close`: `copy` appends a
    block's bytes to a shard file in the kernel (os.copy_file_range, where there is one), `read`
    returns them."""

    def __init__(self) -> None:
        self._files: dict[str, BinaryIO] = {}

    def _open(self, path: str) -> BinaryIO:
        f = self._files.get(path)
        if f is None:
            f = self._files[path] = FileSystems.open(
                path, compression_type=CompressionTypes.UNCOMPRESSED
            )
        return f

    def read(self, ref: BlockRef) -> bytes:
        f = self._open(ref.path)
        f.seek(ref.start)
        data = f.read(ref.size)
        if len(data) != ref.size:
            raise OSError(
                f"{ref.path}: block spill file ends before byte {ref.start + ref.size}; it was "
                "truncated or removed while the job ran"
            )
        return data

    def copy(self, ref: BlockRef, out: BinaryIO) -> None:
        """Append the block's bytes to `out` (a local file open for writing): copied in the
        kernel (copy_file_range, or sendfile across filesystems), else read and written."""
        try:
            source, target = self._open(ref.path).fileno(), out.fileno()
        except (AttributeError, OSError, ValueError):  # not plain local files
            out.write(self.read(ref))
            return
        out.flush()  # what is buffered goes first
        done = 0
        while done < ref.size:
            n = _copy_range(source, target, ref.size - done, ref.start + done)
            if n == 0:
                raise OSError(
                    f"{ref.path}: block spill file ends before byte {ref.start + ref.size}; "
                    "it was truncated or removed while the job ran"
                )
            done += n

    def close(self) -> None:
        for f in self._files.values():
            f.close()
        self._files = {}


def _copy_range(source: int, target: int, count: int, offset: int) -> int:
    """Copy up to `count` bytes at `offset` of `source` to `target`'s position; bytes copied."""
    copy_file_range = getattr(os, "copy_file_range", None)
    if copy_file_range is not None:
        try:
            return copy_file_range(source, target, count, offset)
        except OSError as err:  # another filesystem (EXDEV), or not supported there
            if err.errno not in (errno.EXDEV, errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP):
                raise
    return os.sendfile(target, source, offset, count)


def _gunzip(data: bytes) -> bytes:
    """The data of a block's gzip members (one, or several for an indexed output, whose
    blocks are cut into small members): ISA-L's inflate, about twice zlib's speed here."""
    from isal import igzip

    return igzip.decompress(data)


def block_batch(ref: BlockRef, data: bytes) -> EncodedBatch:
    """The framed records of a spilled block, as the batch they came from."""
    raw = _gunzip(data) if ref.compression == "gzip" else data
    buffer = np.frombuffer(raw, dtype=np.uint8)
    offsets = framed_offsets(buffer)
    if len(offsets) - 1 != ref.rows:
        raise ValueError(f"{ref.path}: a block holds {len(offsets) - 1} records, not {ref.rows}")
    return EncodedBatch(buffer, offsets, True, ref.task, ref.source, ref.first_row)
