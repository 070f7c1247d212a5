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

from pipeline.verify.report import Finding
from transforms.write import tfrecord
from transforms.write.frames import BAD_DATA, BAD_LENGTH, OK, frames_of

__all__ = ["FrameBlock", "frame_blocks"]

_OK, _BAD_DATA, _BAD_LENGTH = OK, BAD_DATA, BAD_LENGTH


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
        frames, starts, ends, states, stop, why = frames_of(array)
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
