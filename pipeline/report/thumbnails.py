"""The report's thumbnails: the first few images of each split, for every feature the manifest
marks as an image (a `files:` image column).

The records are read from the split's shards in their order (the frames' crcs checked,
transforms/write/tfrecord.py), the feature's bytes taken out of each `tf.train.Example` by a
walk of its protobuf wire format (no TensorFlow), and each image decoded and shrunk into a new
PNG by Pillow (transforms/files/image.py): the page embeds only those PNGs, never a record's
own bytes. A record whose image does not decode is shown as such.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

from pipeline.output.manifest import Manifest
from pipeline.report.files import join
from transforms.write.tfrecord import read_records

__all__ = ["THUMBNAILS", "THUMBNAIL_SIDE", "Thumbnail", "feature_bytes", "read_thumbnails"]

THUMBNAILS = 6  # per split and image feature
THUMBNAIL_SIDE = 96  # pixels, the longer side at most


@dataclasses.dataclass(frozen=True)
class Thumbnail:
    """One record's image: its PNG thumbnail and size (`png` None: it did not decode, `error`
    says why)."""

    record: int  # the record's place in its split
    png: bytes | None
    width: int = 0
    height: int = 0
    error: str = ""


def _varint(buf: memoryview, i: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if i >= len(buf) or shift > 63:
            raise ValueError("a truncated varint")
        byte = buf[i]
        value |= (byte & 0x7F) << shift
        i += 1
        if byte < 0x80:
            return value, i
        shift += 7


def _fields(buf: memoryview) -> Iterator[tuple[int, int, memoryview | int]]:
    """(field number, wire type, value) of each field of a message: a slice for a
    length-delimited field, the number for a varint or fixed one."""
    i = 0
    while i < len(buf):
        key, i = _varint(buf, i)
        number, kind = key >> 3, key & 7
        if kind == 0:
            value, i = _varint(buf, i)
            yield number, kind, value
        elif kind == 2:
            length, i = _varint(buf, i)
            if i + length > len(buf):
                raise ValueError("a truncated field")
            yield number, kind, buf[i : i + length]
            i += length
        elif kind in (1, 5):
            size = 8 if kind == 1 else 4
            yield number, kind, int.from_bytes(buf[i : i + size], "little")
            i += size
        else:
            raise ValueError(f"wire type {kind} is not one an Example holds")


def feature_bytes(record: bytes, name: str) -> bytes | None:
    """The first bytes value of feature `name` of a serialized `tf.train.Example` (None when the
    record does not have it). Example.features = 1, Features.feature = 1 (map entries: key = 1,
    value = 2), Feature.bytes_list = 1, BytesList.value = 1."""
    key = name.encode("utf-8")
    for number, kind, features in _fields(memoryview(record)):
        if number != 1 or kind != 2:
            continue
        for n, k, entry in _fields(features):
            if n != 1 or k != 2:
                continue
            parts = {f: v for f, w, v in _fields(entry) if w == 2}
            if bytes(parts.get(1, b"")) != key or 2 not in parts:
                continue
            for f, w, values in _fields(parts[2]):
                if f == 1 and w == 2:
                    for v, vw, value in _fields(values):
                        if v == 1 and vw == 2:
                            return bytes(value)
    return None


def _thumbnail(index: int, data: bytes | None) -> Thumbnail:
    from transforms.files.image import BadFileError, thumbnail  # Pillow, when there are images

    if not data:
        return Thumbnail(index, None, error="no image (a null row)")
    try:
        png, width, height = thumbnail(data, THUMBNAIL_SIDE)
    except BadFileError as err:
        return Thumbnail(index, None, error=str(err))
    return Thumbnail(index, png, width, height)


def read_thumbnails(output: str, manifest: Manifest) -> dict[str, dict[str, list[Thumbnail]]]:
    """feature -> split -> the thumbnails of its first THUMBNAILS records; empty when no
    feature is an image. ValueError names a shard whose frames are corrupt."""
    names = [f.name for f in manifest.features if f.spec.image is not None]
    if not names or manifest.sequence is not None:
        return {}
    out: dict[str, dict[str, list[Thumbnail]]] = {name: {} for name in names}
    for split, entry in manifest.splits.items():
        records: list[bytes] = []
        for file in entry.files:
            wanted = THUMBNAILS - len(records)
            if wanted <= 0:
                break
            records += read_records(join(output, file), wanted)
        for name in names:
            shown = []
            for index, record in enumerate(records):
                try:
                    data = feature_bytes(record, name)
                except ValueError as err:
                    shown.append(Thumbnail(index, None, error=f"not an Example: {err}"))
                    continue
                shown.append(_thumbnail(index, data))
            out[name][split] = shown
    return out
