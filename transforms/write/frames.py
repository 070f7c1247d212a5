"""The TFRecord frames of a decompressed buffer, found by compiled walks: `walk_frames` checks both
crcs of every frame (google-crc32c's C library through its address, or the table loop), no
Python per record: the one walk `verify` and the TensorFlow-free reader use; `framed_offsets`
finds the frames of records this job framed itself, from their lengths alone (the writers).
The format's layout is in tfrecord.py."""

from __future__ import annotations

import numpy as np
from numba import njit

from transforms.encode.kernel.crc import (
    CRC_TABLE,
    crc_of_range,
    hardware_crc32c_address,
    mask_crc,
)
from transforms.encode.kernel.memory import call_u32_of_bytes
from transforms.write import tfrecord

__all__ = ["BAD_DATA", "BAD_LENGTH", "MORE", "OK", "framed_offsets", "frames_of", "walk_frames"]

CRC_FN = hardware_crc32c_address()
OK, BAD_DATA = 0, 1  # a frame's state
MORE, BAD_LENGTH = 0, 1  # why a walk stopped: the block ends inside a frame / a bad length crc


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
def walk_frames(buf, addr, crc_fn, table):  # noqa: ANN001, ANN201
    """Every whole frame of buf: (frame starts, data starts, data ends, states, where the walk
    stopped, why)."""
    size = buf.shape[0]
    cap = size // tfrecord.FRAME_OVERHEAD + 1
    frames = np.empty(cap, np.int64)
    starts = np.empty(cap, np.int64)
    ends = np.empty(cap, np.int64)
    states = np.empty(cap, np.int8)
    n, p, why = 0, 0, MORE
    while size - p >= tfrecord.HEADER_BYTES:
        length = _u64(buf, p)
        stored = _u32(buf, p + tfrecord.LENGTH_BYTES)
        if mask_crc(_crc(buf, addr, p, p + tfrecord.LENGTH_BYTES, crc_fn, table)) != stored:
            why = BAD_LENGTH
            break
        start = p + tfrecord.HEADER_BYTES
        if length > np.uint64(size - start):
            break
        end = start + np.int64(length)
        if end + tfrecord.FOOTER_BYTES > size:
            break
        good = mask_crc(_crc(buf, addr, start, end, crc_fn, table)) == _u32(buf, end)
        frames[n], starts[n], ends[n] = p, start, end
        states[n] = OK if good else BAD_DATA
        n += 1
        p = end + tfrecord.FOOTER_BYTES
    return frames[:n], starts[:n], ends[:n], states[:n], p, why


def frames_of(buf: np.ndarray) -> tuple[np.ndarray, ...]:
    """walk_frames over a uint8 array: (frame starts, data starts, data ends, states, where
    the walk stopped, why)."""
    return walk_frames(buf, buf.ctypes.data, CRC_FN, CRC_TABLE)


@njit(cache=True)
def _frame_ends(buffer: np.ndarray, records: int) -> np.ndarray:  # pragma: no cover
    """[0, end of frame 1, end of frame 2, ...]. With the number of records known (records >= 0:
    one walk) the ends are noted as the walk goes; a frame past that many ends the walk and
    is reported by the caller. Else a first walk counts the frames and a second notes them."""
    n = buffer.shape[0]
    sweeps = 1 if records >= 0 else 2
    ends = np.empty(records + 1 if records >= 0 else 1, dtype=np.int64)
    ends[0] = 0
    for sweep in range(2 - sweeps, 2):  # (count the frames), then note where each ends
        pos, count = 0, 0
        while pos + 8 <= n:
            length = np.int64(0)
            for i in range(8):
                length |= np.int64(buffer[pos + i]) << np.int64(8 * i)
            pos += length + tfrecord.HEADER_BYTES + tfrecord.FOOTER_BYTES
            count += 1
            if sweep == 1:
                if count >= ends.shape[0]:
                    return ends[:1]  # more frames than records: not the expected buffer
                ends[count] = pos
        if sweep == 0:
            ends = np.empty(count + 1, dtype=np.int64)
            ends[0] = 0
        elif count + 1 < ends.shape[0]:
            return ends[:1]  # fewer frames than records
    return ends


def framed_offsets(buffer: np.ndarray, records: int | None = None) -> np.ndarray:
    """Offsets of the TFRecord frames that make up `buffer` (from each frame's length);
    `records`: how many there are, when the caller knows (one walk instead of two)."""
    offsets = _frame_ends(buffer, -1 if records is None else records)
    if int(offsets[-1]) != buffer.shape[0] or (records is not None and len(offsets) != records + 1):
        raise ValueError(
            "the spilled records do not match the spill's index: the spill file does not hold "
            f"{'' if records is None else f'{records} '}whole TFRecord frames in its "
            f"{buffer.shape[0]} bytes (written by another version?)"
        )
    return offsets
