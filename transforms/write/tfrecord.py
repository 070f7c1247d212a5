"""The TFRecord format, in one place: the frame layout, the masked crc32c, and a frame reader.

A TFRecord file is a sequence of frames:

    uint64 length (little endian) | uint32 masked crc32c of the length bytes
    data (length bytes)           | uint32 masked crc32c of the data

compressed as a whole (gzip: any number of concatenated members; zlib: one stream, TensorFlow's
ZLIB) or not at all. The writer side is the compiled kernel (transforms/encode/kernel), which
takes the sizes and the mask from here; the reader side (`read_frames`) is what `inspect` and
`verify` use. Beam's `_TFRecordUtil` holds the same knowledge for its own sink.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Iterator

import google_crc32c
from isal import isal_zlib

from transforms import fs

__all__ = [
    "FOOTER_BYTES",
    "FRAME_OVERHEAD",
    "HEADER_BYTES",
    "LENGTH_BYTES",
    "MASK_DELTA",
    "Frame",
    "StreamError",
    "compression_of",
    "decompressed_chunks",
    "mask_crc",
    "masked_crc",
    "read_frames",
    "read_records",
]

LENGTH_BYTES = 8  # uint64 length
HEADER_BYTES = LENGTH_BYTES + 4  # ... and the masked crc32c of those 8 bytes
FOOTER_BYTES = 4  # masked crc32c of the data
FRAME_OVERHEAD = HEADER_BYTES + FOOTER_BYTES
MASK_DELTA = 0xA282EAD8

_CHUNK = 1 << 20
_DECOMPRESS_ERRORS = (isal_zlib.error, zlib.error, OSError, EOFError)
_SUFFIXES = {".gz": "gzip", ".deflate": "zlib", ".zz": "zlib", ".zlib": "zlib"}

# (record index in the file, byte offset in the decompressed stream, data or None,
#  fault or None: (check, message) with check one of "framing", "crc", "compression")
Frame = tuple[int, int, bytes | None, tuple[str, str] | None]


def mask_crc(crc: int) -> int:
    """TFRecord's masked crc: rotate the 32-bit crc right by 15, add MASK_DELTA (mod 2**32).
    Plain arithmetic on ints, so the compiled kernel can compile this very function."""
    return ((((crc >> 15) | (crc << 17)) & 0xFFFFFFFF) + MASK_DELTA) & 0xFFFFFFFF


def masked_crc(data: bytes) -> int:
    """The masked crc32c that a frame stores for `data` (google-crc32c's C library)."""
    return mask_crc(google_crc32c.value(data))


def compression_of(path: str) -> str:
    """A file's compression by its suffix: gzip (.gz), zlib (.deflate, .zz, .zlib) or none."""
    for suffix, compression in _SUFFIXES.items():
        if path.endswith(suffix):
            return compression
    return "none"


class StreamError(Exception):
    """The compressed stream is corrupt or truncated (the message says where)."""


def decompressed_chunks(path: str, compression: str) -> Iterator[bytes]:
    """The decompressed bytes of a file, a chunk at a time."""
    raw = fs.open_read(path)
    with raw:
        if compression == "none":
            while chunk := raw.read(_CHUNK):
                yield chunk
            return
        kind, wbits = ("gzip member", 31) if compression == "gzip" else ("zlib stream", 15)
        fed = member_start = 0  # compressed bytes read; where the current member starts
        inside = False  # part of a member fed, its end not yet seen
        d = isal_zlib.decompressobj(wbits=wbits)
        while chunk := raw.read(_CHUNK):
            fed += len(chunk)
            while chunk:
                inside = True
                try:
                    out = d.decompress(chunk)
                except _DECOMPRESS_ERRORS as err:
                    raise StreamError(
                        f"the {kind} at compressed byte {member_start} does not decompress: {err}"
                    ) from err
                if out:
                    yield out
                if not d.eof:
                    break
                chunk, inside = d.unused_data, False  # the next member, if any
                member_start = fed - len(chunk)
                d = isal_zlib.decompressobj(wbits=wbits)
        if inside:
            raise StreamError(
                f"the file ends inside the {kind} at compressed byte {member_start} (truncated)"
            )


def read_frames(path: str, compression: str) -> Iterator[Frame]:
    """Every frame of the file at `path`, crcs checked: (index, offset, data, fault).

    A frame with a bad data crc comes with its fault and no data; a fault that ends the file
    (bad length crc, truncated record, corrupt compression) is the last frame, with no data.
    """
    buf = b""
    base = index = 0  # decompressed offset of buf[0]; the next record's index
    header, footer = struct.Struct("<QI").unpack_from, struct.Struct("<I").unpack_from

    def where(at: int, text: str) -> str:
        return f"{path}: record {index} (byte {at}): {text}"

    try:
        for chunk in decompressed_chunks(path, compression):
            buf = buf + chunk if buf else chunk
            size, p = len(buf), 0
            while size - p >= HEADER_BYTES:
                length, stored = header(buf, p)
                if masked_crc(buf[p : p + LENGTH_BYTES]) != stored:
                    text = "the length's crc does not match; the rest of the file cannot be read"
                    yield index, base + p, None, ("framing", where(base + p, text))
                    return
                start = p + HEADER_BYTES
                end = start + length
                if end + FOOTER_BYTES > size:
                    break
                data = buf[start:end]
                if masked_crc(data) != footer(buf, end)[0]:
                    text = f"the data's crc does not match ({length} bytes)"
                    yield index, base + p, None, ("crc", where(base + p, text))
                else:
                    yield index, base + p, data, None
                index += 1
                p = end + FOOTER_BYTES
            buf, base = buf[p:], base + p
    except StreamError as err:
        text = f"{err}; {index} record(s) before it"
        yield index, base, None, ("compression", where(base, text))
        return
    if buf:
        if len(buf) < HEADER_BYTES:
            text = f"truncated: {len(buf)} byte(s) at the end, less than a record header"
        else:
            (length,) = struct.unpack_from("<Q", buf, 0)
            need = HEADER_BYTES + length + FOOTER_BYTES
            text = f"truncated: the record needs {need} bytes, {len(buf)} remain"
        yield index, base, None, ("framing", where(base, text))


def read_records(path: str, limit: int, compression: str | None = None) -> Iterator[bytes]:
    """The first `limit` records of a TFRecord file (compression from its suffix when None);
    raises ValueError at the first frame that is corrupt."""
    if limit <= 0:
        return
    for index, _, data, fault in read_frames(path, compression or compression_of(path)):
        if fault is not None:
            raise ValueError(fault[1])
        yield data
        if index + 1 >= limit:
            return
