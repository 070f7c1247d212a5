"""A shard's TFRecord frames a decompressed block at a time, for `verify` at scale: a compiled
walk finds every frame of the block and checks both crcs (google-crc32c's C library through its
address, or the table loop), so no Python runs per record.

`frame_blocks` gives, per block, the intact records as one buffer with start and end offsets,
their record indices in the file, and each fault as (intact records before it, Finding) with the
very messages of the format's frame reader (transforms/write/tfrecord.py `read_frames`, which
`inspect` and the record-by-record path use): a bad data crc spoils one record; a bad length
crc, a record cut short or a stream that does not decompress ends the file.
"""

from __future__ import annotations

import dataclasses
import struct
from collections.abc import Iterator

import numpy as np
from numba import njit

from pipeline.verify.report import Finding
from transforms.encode.kernel.crc import (
    CRC_TABLE,
    crc_of_range,
    hardware_crc32c_address,
    mask_crc,
)
from transforms.encode.kernel.memory import call_u32_of_bytes
from transforms.write import tfrecord

__all__ = ["FrameBlock", "frame_blocks"]

_CRC_FN = hardware_crc32c_address()
_OK, _BAD_DATA = 0, 1  # a frame's state
_MORE, _BAD_LENGTH = 0, 1  # why a walk stopped: the block ends inside a frame / a bad length crc


@njit(cache=True, inline="always")
def _crc(buf, addr, start, end, crc_fn, table):  # noqa: ANN001, ANN202
    if crc_fn != 0:
        return np.int64(call_u32_of_bytes(crc_fn, addr + start, end - start))
    return crc_of_range(buf, start, end, table)


@njit(cache=True, inline="always")
def _u64(buf, p):  # noqa: ANN001, ANN202
    value = np.uint64(0)
    for j in range(8):
        value |= np.uint64(buf[p + j]) << np.uint64(8 * j)
    return value


@njit(cache=True, inline="always")
def _u32(buf, p):  # noqa: ANN001, ANN202
    value = np.int64(0)
    for j in range(4):
        value |= np.int64(buf[p + j]) << (8 * j)
    return value


@njit(cache=True)
def walk_frames(buf, addr, crc_fn, table):  # noqa: ANN001, ANN202
    """Every whole frame of buf: (frame starts, data starts, data ends, states, where the walk
    stopped, why)."""
    size = buf.shape[0]
    cap = size // tfrecord.FRAME_OVERHEAD + 1
    frames = np.empty(cap, np.int64)
    starts = np.empty(cap, np.int64)
    ends = np.empty(cap, np.int64)
    states = np.empty(cap, np.int8)
    n, p, why = 0, 0, _MORE
    while size - p >= tfrecord.HEADER_BYTES:
        length = _u64(buf, p)
        stored = _u32(buf, p + tfrecord.LENGTH_BYTES)
        if mask_crc(_crc(buf, addr, p, p + tfrecord.LENGTH_BYTES, crc_fn, table)) != stored:
            why = _BAD_LENGTH
            break
        start = p + tfrecord.HEADER_BYTES
        if length > np.uint64(size - start):
            break
        end = start + np.int64(length)
        if end + tfrecord.FOOTER_BYTES > size:
            break
        good = mask_crc(_crc(buf, addr, start, end, crc_fn, table)) == _u32(buf, end)
        frames[n], starts[n], ends[n] = p, start, end
        states[n] = _OK if good else _BAD_DATA
        n += 1
        p = end + tfrecord.FOOTER_BYTES
    return frames[:n], starts[:n], ends[:n], states[:n], p, why


@dataclasses.dataclass(frozen=True)
class FrameBlock:
    """The intact records of one decompressed block (`data[starts[i]:ends[i]]`, record
    `indices[i]` of the file) and the faults met in it: (intact records of the file before
    the fault, Finding)."""

    data: bytes
    starts: np.ndarray
    ends: np.ndarray
    indices: np.ndarray
    faults: list[tuple[int, Finding]]


def frame_blocks(path: str, compression: str) -> Iterator[FrameBlock]:
    """The frames of the shard at `path`, a decompressed block at a time, crcs checked."""
    buf = b""
    base = index = intact = 0  # decompressed offset of buf[0]; next record index; intact ones

    def fault(check: str, at: int, text: str) -> tuple[int, Finding]:
        message = f"{path}: record {index} (byte {at}): {text}"
        return intact, Finding(check, message, file=path, record=index)

    empty = np.empty(0, np.int64)
    chunks = tfrecord.decompressed_chunks(path, compression)  # the format's own decompression
    while True:
        try:
            chunk = next(chunks, None)
        except tfrecord.StreamError as err:
            text = f"{err}; {index} record(s) before it"
            yield FrameBlock(b"", empty, empty, empty, [fault("compression", base, text)])
            return
        if chunk is None:
            break
        buf = buf + chunk if buf else chunk
        array = np.frombuffer(buf, np.uint8)
        frames, starts, ends, states, stop, why = walk_frames(
            array, array.ctypes.data, _CRC_FN, CRC_TABLE
        )
        faults = []
        for i in np.flatnonzero(states != _OK).tolist():
            index_of = index + i
            length = int(ends[i] - starts[i])
            before = intact + i - len(faults)
            at = base + int(frames[i])
            text = f"the data's crc does not match ({length} bytes)"
            message = f"{path}: record {index_of} (byte {at}): {text}"
            faults.append((before, Finding("crc", message, file=path, record=index_of)))
        good = states == _OK
        indices = index + np.flatnonzero(good)
        index += len(states)
        intact += int(good.sum())
        if why == _BAD_LENGTH:
            text = "the length's crc does not match; the rest of the file cannot be read"
            faults.append(fault("framing", base + stop, text))
            yield FrameBlock(buf, starts[good], ends[good], indices, faults)
            chunks.close()
            return
        yield FrameBlock(buf, starts[good], ends[good], indices, faults)
        buf, base = buf[stop:], base + stop
    if buf:
        if len(buf) < tfrecord.HEADER_BYTES:
            text = f"truncated: {len(buf)} byte(s) at the end, less than a record header"
        else:
            (length,) = struct.unpack_from("<Q", buf, 0)
            need = tfrecord.HEADER_BYTES + length + tfrecord.FOOTER_BYTES
            text = f"truncated: the record needs {need} bytes, {len(buf)} remain"
        yield FrameBlock(b"", empty, empty, empty, [fault("framing", base, text)])
