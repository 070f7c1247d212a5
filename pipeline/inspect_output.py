"""`tfrecord-etl inspect PATH`: the manifest summary and the first records as readable JSON, for
an output directory or a single TFRecord file (also one this project did not write: the schema
is then inferred from the records). Needs TensorFlow's protobuf for tf.train.Example."""

from __future__ import annotations

import base64
import gzip
import struct
import zlib
from collections.abc import Iterator
from typing import IO, Any

from apache_beam.io.filesystems import FileSystems

from pipeline.manifest import manifest_path, read_manifest

__all__ = ["inspect_path", "read_records"]


def _stream(path: str) -> IO[bytes]:
    raw = FileSystems.open(path, compression_type="uncompressed")
    if path.endswith(".gz"):
        return gzip.GzipFile(fileobj=raw)
    if path.endswith((".deflate", ".zz", ".zlib")):
        return _Inflated(raw)
    return raw


class _Inflated:
    """A zlib stream as a readable file (TensorFlow's ZLIB compression)."""

    def __init__(self, raw: IO[bytes]) -> None:
        self._raw, self._z, self._buf = raw, zlib.decompressobj(), b""

    def read(self, n: int) -> bytes:
        while len(self._buf) < n:
            chunk = self._raw.read(1 << 16)
            if not chunk:
                self._buf += self._z.flush()
                break
            self._buf += self._z.decompress(chunk)
        out, self._buf = self._buf[:n], self._buf[n:]
        return out


def read_records(path: str, limit: int) -> Iterator[bytes]:
    """The first `limit` records of a TFRecord file (compression from its suffix)."""
    f = _stream(path)
    for _ in range(limit):
        head = f.read(12)
        if len(head) < 12:
            return
        (length,) = struct.unpack("<Q", head[:8])
        data = f.read(length + 4)
        if len(data) < length + 4:
            raise ValueError(f"{path}: truncated record")
        yield data[:length]


def _value(v: Any) -> Any:
    if isinstance(v, bytes):
        try:
            return v.decode("utf-8")
        except UnicodeDecodeError:
            return {"base64": base64.b64encode(v).decode("ascii")}
    return v


def _example(record: bytes) -> dict[str, Any]:
    from tensorflow.core.example import example_pb2

    example = example_pb2.Example.FromString(record)
    out = {}
    for name in sorted(example.features.feature):
        feature = example.features.feature[name]
        kind = feature.WhichOneof("kind")
        values = [] if kind is None else list(getattr(feature, kind).value)
        out[name] = [_value(v) for v in values]
    return out


def _inferred_schema(records: list[dict[str, Any]], raw: list[bytes]) -> dict[str, Any]:
    from tensorflow.core.example import example_pb2

    schema: dict[str, dict[str, Any]] = {}
    for record in raw:
        example = example_pb2.Example.FromString(record)
        for name, feature in example.features.feature.items():
            entry = schema.setdefault(name, {"kind": None, "lengths": set(), "present": 0})
            kind = feature.WhichOneof("kind")
            if kind is not None:
                entry["kind"] = kind.removesuffix("_list")
                entry["lengths"].add(len(getattr(feature, kind).value))
            entry["present"] += 1
    return {
        name: {
            "kind": e["kind"],
            "lengths": sorted(e["lengths"]),
            "in_records": e["present"],
        }
        for name, e in sorted(schema.items())
    }


def inspect_path(path: str, limit: int = 5) -> dict[str, Any]:
    """A JSON-able report: for an output dir its manifest summary, else the schema inferred
    from the first records; and the first `limit` records of the file (or first shard)."""
    if FileSystems.exists(manifest_path(path)):
        manifest = read_manifest(path)
        files = [FileSystems.join(path, f) for s in manifest["splits"].values() for f in s["files"]]
        records: list[bytes] = []
        for f in files:
            records += list(read_records(f, limit - len(records)))
            if len(records) >= limit:
                break
        summary = {
            "rows": manifest["rows"],
            "compression": manifest["compression"],
            "splits": manifest["splits"],
            "bad_rows": manifest.get("bad_rows", {}).get("count", 0),
            "features": {
                f["name"]: {k: f.get(k) for k in ("kind", "dtype", "shape", "null_count")}
                for f in manifest["features"]
            },
        }
        return {"path": path, "manifest": summary, "records": [_example(r) for r in records]}
    if not FileSystems.exists(path):
        raise FileNotFoundError(f"{path}: no such file, and no output directory with a manifest")
    raw = list(read_records(path, limit))
    records = [_example(r) for r in raw]
    return {"path": path, "inferred_schema": _inferred_schema(records, raw), "records": records}
