"""Index files: where each record of a shard lies, so that record i is read with one seek.

`<shard>.idx`, beside each shard of an output written with `--index`, one text line per record
in the shard's order:

- an uncompressed shard: `offset size`, the byte where the record's frame starts and the frame's
  size (12 + data + 4): the format of NVIDIA DALI's `tfrecord2idx` and of the `tfrecord`
  package's index files, so both read these shards as they are;
- a gzip shard: `member_offset member_size offset size`: the gzip member that holds the record
  (its byte in the file, its compressed size), and the record's frame in the member once
  inflated. An indexed gzip output is written in members of about 32 KiB of records
  (files.block_compressor), so reading a record at random inflates one small member.

A zlib shard is one deflate stream that cannot be entered in the middle: it has no index.
The index is made from the finished shard (a scan of its frames; for gzip an inflate of each
member), so it says what the file holds, whatever wrote it.
"""

from __future__ import annotations

import numpy as np
from isal import isal_zlib

from transforms import fs
from transforms.write.frames import BAD_LENGTH, OK, frames_of

__all__ = ["INDEX_SUFFIX", "index_path", "make_index", "parse_index", "write_index"]

INDEX_SUFFIX = ".idx"
_CHUNK = 8 << 20
_WINDOW = 64 << 10  # compressed bytes fed at first: an indexed member is about a third of that


def index_path(shard: str) -> str:
    return shard + INDEX_SUFFIX


def _frames(data: np.ndarray, where: str) -> tuple[np.ndarray, np.ndarray]:
    """(frame starts, frame sizes) of a buffer that holds whole frames."""
    frames, _, ends, states, stop, why = frames_of(data)
    if why == BAD_LENGTH or (states != OK).any() or stop != data.shape[0]:
        raise ValueError(f"{where}: the records do not check out (a crc, or a record cut short)")
    return frames, ends + 4 - frames


def _member(view: memoryview, at: int, path: str) -> tuple[bytes, int]:
    """The gzip member at byte `at`: (its data inflated, its compressed size). Fed a window at
    a time (the rest of the file is never copied: members of an indexed output are small)."""
    d = isal_zlib.decompressobj(wbits=31)
    out, pos, window = [], at, _WINDOW
    while not d.eof:
        chunk = view[pos : pos + window]
        if not len(chunk):
            raise ValueError(f"{path}: the gzip member at byte {at} is cut short")
        out.append(d.decompress(chunk))
        pos += len(chunk)
        window = min(window * 2, _CHUNK)
    return b"".join(out), pos - len(d.unused_data) - at


def make_index(path: str, compression: str) -> np.ndarray:
    """The index of the shard at `path`: int64 rows (offset, size), or for gzip
    (member offset, member size, offset, size)."""
    if compression == "zlib":
        raise ValueError(f"{path}: a zlib shard is one deflate stream: it cannot be indexed")
    with fs.open_read(path) as f:
        raw = f.read()
    data = np.frombuffer(raw, np.uint8)
    if compression == "none":
        starts, sizes = _frames(data, path)
        return np.stack([starts, sizes], axis=1)
    rows = []
    at = 0
    view = memoryview(raw)
    while at < len(raw):
        inflated, size = _member(view, at, path)
        starts, sizes = _frames(np.frombuffer(inflated, np.uint8), f"{path}: member at {at}")
        member = np.tile(np.array([[at, size]], np.int64), (len(starts), 1))
        rows.append(np.concatenate([member, np.stack([starts, sizes], axis=1)], axis=1))
        at += size
    return np.concatenate(rows) if rows else np.zeros((0, 4), np.int64)


def write_index(path: str, compression: str) -> str:
    """Write `<path>.idx` for the shard at `path`; its path."""
    rows = make_index(path, compression)
    text = "".join(" ".join(str(v) for v in row) + "\n" for row in rows.tolist())
    target = index_path(path)
    with fs.FileSystems.create(target) as f:
        f.write(text.encode("ascii"))
    return target


def parse_index(text: bytes, path: str, compression: str) -> np.ndarray:
    """An index file's rows (as make_index gives them); ValueError naming the file and line."""
    width = 4 if compression == "gzip" else 2
    try:
        values = np.array(text.split(), dtype=np.int64)
    except ValueError as err:
        raise ValueError(f"{path}: not an index of this format: {err}") from err
    if values.size % width:
        raise ValueError(f"{path}: expected {width} numbers a line")
    rows = values.reshape(-1, width)
    if (rows < 0).any():
        line = int(np.flatnonzero((rows < 0).any(axis=1))[0]) + 1
        raise ValueError(f"{path}: line {line}: a negative offset or size")
    _check_order(rows, path)
    return rows


def _check_order(rows: np.ndarray, path: str) -> None:
    """ValueError unless the entries tile the shard: each record starts where the one before
    ends (in its member for gzip, a new member starting where the one before ends)."""
    if not rows.shape[0]:
        return
    if rows.shape[1] == 2:  # offset size
        starts, sizes = rows[:, 0], rows[:, 1]
        good = np.concatenate(([starts[0] == 0], starts[1:] == starts[:-1] + sizes[:-1]))
    else:  # member_offset member_size offset size
        member, member_size, starts, sizes = rows.T
        same = member[1:] == member[:-1]
        follows = np.where(
            same,
            (starts[1:] == starts[:-1] + sizes[:-1]) & (member_size[1:] == member_size[:-1]),
            (starts[1:] == 0) & (member[1:] == member[:-1] + member_size[:-1]),
        )
        good = np.concatenate(([member[0] == 0 and starts[0] == 0], follows))
    if not good.all():
        line = int(np.flatnonzero(~good)[0]) + 1
        raise ValueError(
            f"{path}: line {line}: the record does not start where the one before ends "
            "(not an index of this shard, or edited)"
        )
