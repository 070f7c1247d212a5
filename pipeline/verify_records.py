"""The record side of `tfrecord-etl verify`: a shard's frames with every crc checked, and each
record checked against the manifest's features.

`read_frames` decompresses a shard as a stream (gzip: any number of concatenated members; zlib:
TensorFlow's ZLIB) and walks its TFRecord frames: uint64 length, masked crc32c of the length,
data, masked crc32c of the data. A bad data crc spoils one record; a bad length crc, a record cut
short or a stream that does not decompress ends the file (nothing after it can be trusted).

`RecordChecker` parses batches of records with `tf.io.parse_example` and the manifest's own spec
(`pipeline.reader.parse_spec`): a wrong kind, a fixed-length feature of another length or a
missing non-nullable feature fail the parse; the lengths of ragged features are checked against
the shapes; each record's feature keys (`verify_keys.feature_presence`) give the features the
manifest does not list and, per feature, the records it is absent from (its null count).
"""

from __future__ import annotations

import collections
import re
import struct
import zlib
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import google_crc32c
import numpy as np
import tensorflow as tf
from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems
from isal import isal_zlib

from pipeline.reader import FLOAT64_BYTES, StoredFeature, parse_spec
from pipeline.verify_keys import feature_presence
from pipeline.verify_report import Finding, Findings

__all__ = ["Frame", "RecordChecker", "masked_crc", "read_frames"]

_CHUNK = 1 << 20
_HEADER, _FOOTER = 12, 4
_WBITS = {"gzip": 31, "zlib": 15}
_TF_NOISE = re.compile(r"\{\{function_node [^}]*\}\}|\[Op:\w+\]")  # op names in TF's errors
_DECOMPRESS_ERRORS = (isal_zlib.error, zlib.error, OSError, EOFError)

# (record index in the file, byte offset in the decompressed stream, data or None, fault or None)
Frame = tuple[int, int, bytes | None, Finding | None]


def masked_crc(data: bytes) -> int:
    """The masked crc32c that TFRecord frames store."""
    crc = google_crc32c.value(data)
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


class _StreamError(Exception):
    """The compressed stream is corrupt or truncated (the message says where)."""


def _chunks(path: str, compression: str) -> Iterator[bytes]:
    """The decompressed bytes of a shard, a chunk at a time."""
    raw = FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED)
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
                    raise _StreamError(
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
            raise _StreamError(
                f"the file ends inside the {kind} at compressed byte {member_start} (truncated)"
            )


def read_frames(path: str, compression: str) -> Iterator[Frame]:
    """Every frame of the shard at `path`, crcs checked: (index, offset, data, fault).

    A frame with a bad data crc comes with its fault and no data; a fault that ends the file
    (bad length crc, truncated record, corrupt compression) is the last frame, with no data.
    """
    buf = b""
    base = index = 0  # decompressed offset of buf[0]; the next record's index
    header, footer, crc = (
        struct.Struct("<QI").unpack_from,
        struct.Struct("<I").unpack_from,
        masked_crc,
    )

    def fault(check: str, at: int, text: str) -> Finding:
        return Finding(
            check, f"{path}: record {index} (byte {at}): {text}", file=path, record=index
        )

    try:
        for chunk in _chunks(path, compression):
            buf = buf + chunk if buf else chunk
            size, p = len(buf), 0
            while size - p >= _HEADER:
                length, stored = header(buf, p)
                if crc(buf[p : p + 8]) != stored:
                    text = "the length's crc does not match; the rest of the file cannot be read"
                    yield index, base + p, None, fault("framing", base + p, text)
                    return
                start = p + _HEADER
                end = start + length
                if end + _FOOTER > size:
                    break
                data = buf[start:end]
                if crc(data) != footer(buf, end)[0]:
                    text = f"the data's crc does not match ({length} bytes)"
                    yield index, base + p, None, fault("crc", base + p, text)
                else:
                    yield index, base + p, data, None
                index += 1
                p = end + _FOOTER
            buf, base = buf[p:], base + p
    except _StreamError as err:
        yield index, base, None, fault("compression", base, f"{err}; {index} record(s) before it")
        return
    if buf:
        if len(buf) < _HEADER:
            text = f"truncated: {len(buf)} byte(s) at the end, less than a record header"
        else:
            (length,) = struct.unpack_from("<Q", buf, 0)
            text = (
                f"truncated: the record needs {_HEADER + length + _FOOTER} bytes, {len(buf)} remain"
            )
        yield index, base, None, fault("framing", base, text)


def _allowed_lengths(f: StoredFeature) -> tuple[str, Any] | None:
    """How many values a row of a ragged parse of `f` may hold: ("in", {..}), ("multiple", k)
    or None (any)."""
    shape = f.spec.shape
    if f.spec.encoding == FLOAT64_BYTES:
        return ("in", {0, 1}) if f.nullable else None
    if shape is None:
        return None
    if f.ragged:
        return "multiple", int(np.prod(shape[1:], dtype=np.int64))
    return "in", {0, int(np.prod(shape, dtype=np.int64))}  # nullable fixed: absent or whole


def _bytes_per_value(f: StoredFeature) -> tuple[str, int] | None:
    """For float64_bytes: each value's byte length, exactly or as a multiple."""
    if f.spec.encoding != FLOAT64_BYTES:
        return None
    shape = f.spec.shape
    if shape is None:
        return "multiple", 8
    if f.ragged:
        return "multiple", 8 * int(np.prod(shape[1:], dtype=np.int64))
    return "exactly", 8 * int(np.prod(shape, dtype=np.int64))


class RecordChecker:
    """Checks records against the manifest's features and counts each feature's absences."""

    def __init__(self, features: Sequence[Mapping[str, Any]], findings: Findings) -> None:
        self.features = [StoredFeature.from_json(f) for f in features]
        self.spec = parse_spec(self.features)
        self.order = [f.name for f in self.features]
        self.findings = findings
        self.records = 0  # records checked
        self.present: collections.Counter[str] = collections.Counter()
        self.first_absent: dict[str, str] = {}  # feature -> "file: record i"
        self.unknown: dict[str, list] = {}  # key not in the manifest -> [count, first place]

    def check(self, path: str, records: Sequence[bytes], indices: Sequence[int]) -> None:
        """Check one batch of records of the shard `path` (record indices in that file)."""
        self.records += len(records)
        self._parse(path, list(records), list(indices))
        self._keys(path, records, indices)

    def _parse(self, path: str, records: list[bytes], indices: list[int]) -> None:
        try:
            parsed = tf.io.parse_example(tf.constant(records, tf.string), self.spec)
        except tf.errors.InvalidArgumentError as err:
            if len(records) == 1:
                reason = _TF_NOISE.sub("", err.message.split("\n")[0]).strip()
                self.findings.add(
                    Finding(
                        "parse",
                        f"{path}: record {indices[0]}: does not parse as the manifest's "
                        f"features: {reason}",
                        file=path,
                        record=indices[0],
                    )
                )
                return
            half = len(records) // 2
            self._parse(path, records[:half], indices[:half])
            self._parse(path, records[half:], indices[half:])
            return
        for f in self.features:
            self._shape(path, f, parsed[f.name], indices)

    def _shape(self, path: str, f: StoredFeature, value: Any, indices: list[int]) -> None:
        problems: list[tuple[int, str]] = []
        if isinstance(value, tf.RaggedTensor):
            lengths = value.row_lengths().numpy()
            rule = _allowed_lengths(f)
            if rule is not None:
                kind, allowed = rule
                bad = ~np.isin(lengths, list(allowed)) if kind == "in" else lengths % allowed != 0
                words = f"one of {sorted(allowed)}" if kind == "in" else f"a multiple of {allowed}"
                problems += [
                    (i, f"{lengths[i]} values, expected {words}") for i in np.flatnonzero(bad)
                ]
            strings = value.flat_values
            rows = np.repeat(np.arange(len(lengths)), lengths)
        else:
            strings, rows = value, np.arange(len(indices))
        rule = _bytes_per_value(f)
        if rule is not None:
            sizes = tf.strings.length(tf.reshape(strings, [-1])).numpy()
            kind, size = rule
            bad = sizes != size if kind == "exactly" else sizes % size != 0
            words = f"{size}" if kind == "exactly" else f"a multiple of {size}"
            problems += [
                (rows[i], f"a float64 value of {sizes[i]} bytes, expected {words}")
                for i in np.flatnonzero(bad)
            ]
        for i, text in problems:
            self.findings.add(
                Finding(
                    "parse",
                    f"{path}: record {indices[i]}: feature {f.name!r}: {text} "
                    f"(shape {f.spec.shape}, encoding {f.spec.encoding})",
                    file=path,
                    record=indices[i],
                )
            )

    def _keys(self, path: str, records: Sequence[bytes], indices: Sequence[int]) -> None:
        present, unknown = feature_presence(records, self.order)
        for name, count in zip(self.order, present.sum(axis=0).tolist(), strict=True):
            self.present[name] += count
            if count < len(records) and name not in self.first_absent:
                first = int(np.argmin(present[:, self.order.index(name)]))
                self.first_absent[name] = f"{path}: record {indices[first]}"
        for key, rows in unknown.items():
            entry = self.unknown.setdefault(key, [0, f"{path}: record {indices[int(rows[0])]}"])
            entry[0] += len(rows)

    def finish(self) -> None:
        """Report unknown features and null counts that differ from the manifest's."""
        for key, (count, first) in sorted(self.unknown.items()):
            self.findings.add(
                Finding(
                    "features",
                    f"feature {key!r} is in {count} record(s) but not in the manifest "
                    f"(first: {first})",
                )
            )
        for f in self.features:
            absent = self.records - self.present[f.name]
            if absent != f.null_count:
                first = self.first_absent.get(f.name)
                where = f" (first: {first})" if first else ""
                self.findings.add(
                    Finding(
                        "nulls",
                        f"feature {f.name!r} is absent from {absent} record(s){where}; the "
                        f"manifest's null_count is {f.null_count}",
                    )
                )
