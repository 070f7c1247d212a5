"""`tfrecord-etl inspect PATH`: the manifest summary and the first records as readable JSON, for
an output directory (an incremental dataset: its spans read as one, and the list of spans) or a
single TFRecord file (also one this project did not write: the schema
is then inferred from the records). Records are decoded with protobuf's own classes of
tf.train.Example (pipeline/verify/example_pb.py): no TensorFlow, and no Beam for a local path.
An image feature (a `files:` image column) shows each value as its format and size, not its
bytes."""

from __future__ import annotations

import base64
from typing import Any

from pipeline.output.dataset import read_dataset, read_output_manifest
from pipeline.output.entries import entry
from pipeline.output.manifest import manifest_path
from pipeline.output.sections import with_derived
from pipeline.verify.example_pb import Example, SequenceExample
from transforms import fs
from transforms.write.tfrecord import read_records

__all__ = ["inspect_path"]


def _value(v: Any) -> Any:
    if isinstance(v, bytes):
        try:
            return v.decode("utf-8")
        except UnicodeDecodeError:
            return {"base64": base64.b64encode(v).decode("ascii")}
    return v


def _example(record: bytes, images: frozenset[str] = frozenset()) -> dict[str, Any]:
    """An Example as name -> values (`images`: features shown as format and size)."""
    example = Example.FromString(record)
    out = {}
    for name in sorted(example.features.feature):
        feature = example.features.feature[name]
        kind = feature.WhichOneof("kind")
        values = [] if kind is None else list(getattr(feature, kind).value)
        out[name] = [_image(v) if name in images else _value(v) for v in values]
    return out


def _image(data: bytes) -> dict[str, Any]:
    """An encoded image as its format (by its first bytes) and size."""
    kind = "png" if data.startswith(b"\x89PNG") else "jpeg" if data[:2] == b"\xff\xd8" else "?"
    return {"image": kind, "bytes": len(data)}


def _features(features: Any) -> dict[str, Any]:
    """A Features message as name -> values (an empty Feature: no values)."""
    out = {}
    for name in sorted(features.feature):
        feature = features.feature[name]
        kind = feature.WhichOneof("kind")
        out[name] = [] if kind is None else [_value(v) for v in getattr(feature, kind).value]
    return out


def _sequence_example(record: bytes) -> dict[str, Any]:
    """A SequenceExample: its context, and per feature list one entry per step (None for a
    step with no value, an empty Feature)."""
    example = SequenceExample.FromString(record)
    lists = {}
    for name in sorted(example.feature_lists.feature_list):
        steps = example.feature_lists.feature_list[name].feature
        lists[name] = [None if f.WhichOneof("kind") is None else _step_values(f) for f in steps]
    return {"context": _features(example.context), "feature_lists": lists}


def _step_values(feature: Any) -> list[Any]:
    return [_value(v) for v in getattr(feature, feature.WhichOneof("kind")).value]


def _inferred_schema(records: list[dict[str, Any]], raw: list[bytes]) -> dict[str, Any]:
    schema: dict[str, dict[str, Any]] = {}
    for record in raw:
        example = Example.FromString(record)
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
    dataset = None if fs.exists(manifest_path(path)) else read_dataset(path)
    if fs.exists(manifest_path(path)) or dataset is not None:
        manifest = read_output_manifest(path)
        files = [entry(path, f) for f in manifest.files()]  # no link followed
        records: list[bytes] = []
        for f in files:
            records += list(read_records(f, limit - len(records)))
            if len(records) >= limit:
                break
        summary = {
            "rows": manifest.rows,
            "compression": manifest.compression,
            "splits": manifest.to_json()["splits"],
            "bad_rows": manifest.bad_row_count,
            "features": {
                f.name: {k: f.to_json()[k] for k in ("kind", "dtype", "shape", "null_count")}
                for f in with_derived(manifest.features, manifest.rows or 0)
            },
        }
        for f in manifest.features:  # a list's nulls inside: the rows per level that hold them
            if f.inner_nulls:
                summary["features"][f.name]["inner_nulls"] = f.to_json()["inner_nulls"]
        if dataset is not None:  # an incremental dataset: its spans, read as one above
            summary["spans"] = [
                {
                    "span": s.span,
                    "dir": s.name,
                    "rows": s.rows,
                    "bad": s.bad,
                    "inputs": len(s.inputs),
                    "created": s.created,
                }
                for s in dataset.spans
            ]
            summary["retired_spans"] = [s.span for s in dataset.retired]
        images = frozenset(f.name for f in manifest.features if f.spec.image is not None)
        for name in images:
            image = next(f.spec.image for f in manifest.features if f.name == name)
            summary["features"][name]["image"] = image.to_json()

        def parse(record: bytes) -> dict[str, Any]:
            return _example(record, images)

        if manifest.sequence is not None:  # SequenceExamples: `features` is the context
            summary["sequence"] = {
                k: v for k, v in manifest.sequence.to_json().items() if k != "features"
            }
            summary["feature_lists"] = {
                f.name: {k: f.to_json()[k] for k in ("kind", "dtype", "shape", "null_count")}
                for f in manifest.sequence.features
            }
            parse = _sequence_example
        return {"path": path, "manifest": summary, "records": [parse(r) for r in records]}
    if not fs.exists(path):
        raise FileNotFoundError(f"{path}: no such file, and no output directory with a manifest")
    raw = list(read_records(path, limit))
    records = [_example(r) for r in raw]
    return {"path": path, "inferred_schema": _inferred_schema(records, raw), "records": records}
