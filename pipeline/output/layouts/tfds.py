"""TFDS's metadata for an output: `dataset_info.json` and `features.json`, so that
`tfds.builder_from_directory(output)` opens it and `as_dataset(split=...)` reads the shards as
they are (uncompressed, the flat names, found through each split's `filepathTemplate`).

What each feature becomes (a `tfds.features.Tensor` in a `FeaturesDict`, key = feature name):
- dtype: the manifest's dtype (the one `load_dataset` restores); TFDS casts the stored int64 /
  float32 values to it as the reader does.
- shape: the feature's shape, `-1` (None) for a variable length; a float64 written with
  keep_float64 is `encoding: bytes` (TFDS decodes the row's little-endian bytes, as the
  reader does).
- images (a `files:` image column, marked `image` in the manifest): TFDS's `Image` (uint8,
  `[height, width, channels]` with -1 where the images differ, the encoding format when there
  is one), so `as_dataset` decodes them. TFDS decodes every record's image, so the column must
  not write a null (`null_policy: fail`, checked at plan time).
- nulls: TFDS has no mask, and its `optional` fills a null with a sentinel that a real value
  can equal (0 for unsigned, False, "", the dtype's minimum). A feature that had nulls gets a
  leading dimension of length 0 (null) or 1 (present) instead: a scalar is `[]` or `[v]`, a
  fixed array `[0, *shape]` or `[1, *shape]`. Lists are as the reader gives them (a null list
  reads as an empty one). A keep_float64 column must not drop nulls (`check_tfds_features`).
- lists ragged below their first level (a -1 below the first dim, docs/types.md): TFDS's
  `Tensor` reads one variable dimension, and its own nested ragged encoding uses other keys
  than the records hold. So the column is declared as what the records hold: `NAME`, its
  values flat (`[-1]`, or `[-1, *fixed]` when fixed dims close the shape), and each
  `NAME__row_lengths_K` an int64 Tensor of shape [-1]; `tf.RaggedTensor.
  from_nested_row_lengths` (with the fixed dims between) rebuilds the nested value. Each
  description says which.
- nulls inside lists: a list whose items held nulls (the manifest's `inner_nulls`) writes their
  positions under `NAME__nulls_K` (docs/types.md, "Nulls inside lists"), each declared here as
  an int64 Tensor of shape [-1], empty in a row without such nulls, so that a TFDS user can
  tell a null item from the zero written in its place.

Shard lengths come from the manifest (the blocks sink counts each shard's records), so TFDS's
split slicing (`train[:10%]`) lands on the right records.
"""

from __future__ import annotations

import json
import posixpath
import re
from collections.abc import Sequence
from typing import Any

from pipeline.output.manifest import Manifest, StoredFeature
from transforms.encode.features import nulls_specs
from transforms.encode.schema import FeatureSpec, SchemaError
from transforms.fs import FileSystems

__all__ = [
    "DATASET_INFO",
    "FEATURES",
    "TFDS_FILES",
    "check_tfds_features",
    "dataset_info",
    "dataset_name",
    "tfds_features",
    "write_tfds_metadata",
]

DATASET_INFO = "dataset_info.json"
FEATURES = "features.json"
TFDS_FILES = (DATASET_INFO, FEATURES)
VERSION = "1.0.0"
# The flat layout's shard names (transforms/write/layout.py), uncompressed.
FILEPATH_TEMPLATE = "{SPLIT}-{SHARD_X_OF_Y}.tfrecord"
_CLASS = "tensorflow_datasets.core.features.{}"
_DICT = _CLASS.format("features_dict.FeaturesDict")
_TENSOR = _CLASS.format("tensor_feature.Tensor")
_IMAGE = _CLASS.format("image_feature.Image")


def check_tfds_features(specs: Sequence[FeatureSpec]) -> None:
    """SchemaError for a feature TFDS cannot read from the shards as written: a name with "/"
    (TFDS's separator of nested features), a keep_float64 column whose nulls are dropped
    (TFDS needs the row's bytes in every record), an image column that may write a null (TFDS
    decodes an image from every record)."""
    for spec in specs:
        if "/" in spec.name:
            raise SchemaError(
                f"column {spec.name!r}: layout tfds: TFDS reads '/' in a feature name as "
                "nesting; rename the column"
            )
        if spec.encoding == "float64_bytes" and spec.null_policy == "omit":
            raise SchemaError(
                f"column {spec.name!r}: layout tfds: a keep_float64 column needs "
                "null_policy default or fail (TFDS decodes its bytes only when every record "
                "has them)"
            )
        if spec.image is not None and spec.null_policy != "fail":
            raise SchemaError(
                f"column {spec.name!r}: layout tfds: TFDS decodes an image from every record; "
                f"set columns.{spec.name}.null_policy: fail (a row without a file reference "
                "is then a bad row)"
            )


def _flat_values_shape(shape: Sequence[int]) -> list[int]:
    """The shape of a list ragged below its first level as its records hold it: its values
    flat, but for the fixed dims after its last varying one."""
    last = max(k for k, d in enumerate(shape) if d < 0)
    return [-1, *shape[last + 1 :]]


def _shape(feature: StoredFeature) -> list[int]:
    shape = feature.spec.shape
    if feature.spec.partition_levels:
        return _flat_values_shape(shape)
    dims = [-1] if shape is None else list(shape)
    if feature.nullable and not feature.ragged:
        dims = [-1, *dims]  # length 0: null; 1: present
    return dims


def _image(feature: StoredFeature) -> dict[str, Any]:
    image = feature.spec.image
    out: dict[str, Any] = {
        "shape": {"dimensions": [str(d) for d in image.shape]},
        "dtype": "uint8",
    }
    if len(image.formats) == 1:
        out["encodingFormat"] = image.formats[0]
    return {
        "pythonClassName": _IMAGE,
        "image": out,
        "description": f"encoded {' or '.join(image.formats)} images from {feature.name!r}",
    }


def _tensor(feature: StoredFeature) -> dict[str, Any]:
    spec = feature.spec
    if spec.image is not None:
        return _image(feature)
    encoding = "bytes" if spec.encoding == "float64_bytes" else "none"
    description = f"Arrow type {spec.source_type}" + (
        "; nullable: first dimension 0 where null, 1 where present"
        if feature.nullable and not feature.ragged
        else ""
    )
    if spec.partition_levels:
        lengths = ", ".join(spec.feature_keys[1:])
        description += (
            f"; shape {list(spec.shape)}, its values flat: tf.RaggedTensor."
            f"from_nested_row_lengths over {lengths} (the fixed dims between) rebuilds it"
        )
    return {
        "pythonClassName": _TENSOR,
        "tensor": {
            "shape": {"dimensions": [str(d) for d in _shape(feature)]},
            "dtype": spec.dtype,
            "encoding": encoding,
        },
        "description": description,
    }


def _row_lengths(feature: StoredFeature) -> dict[str, dict[str, Any]]:
    """The Tensors of a list's row lengths, one per level below the first that varies."""
    out = {}
    for k, key in zip(feature.spec.partition_levels, feature.spec.feature_keys[1:], strict=True):
        out[key] = {
            "pythonClassName": _TENSOR,
            "tensor": {"shape": {"dimensions": ["-1"]}, "dtype": "int64", "encoding": "none"},
            "description": f"the lengths of the level-{k} lists of {feature.name!r}, in order",
        }
    return out


def _null_positions(feature: StoredFeature) -> dict[str, dict[str, Any]]:
    """The Tensors of a list's null positions, one per level whose items held nulls."""
    out = {}
    for k, spec in zip(
        feature.null_levels, nulls_specs(feature.spec, feature.null_levels), strict=True
    ):
        out[spec.name] = {
            "pythonClassName": _TENSOR,
            "tensor": {"shape": {"dimensions": ["-1"]}, "dtype": "int64", "encoding": "none"},
            "description": (
                f"positions of the null items at list level {k} of {feature.name!r} (indexes "
                "into that level's items of the row, flattened; empty where none)"
            ),
        }
    return out


def tfds_features(features: Sequence[StoredFeature]) -> dict[str, Any]:
    """features.json: a FeaturesDict of one Tensor (or Image) per feature, one per level of
    row lengths of a list ragged below its first level, and one per level of null positions of
    a list that held nulls."""
    tensors: dict[str, Any] = {}
    for f in features:
        tensors[f.name] = _tensor(f)
        tensors.update(_row_lengths(f))
        tensors.update(_null_positions(f))
    return {"pythonClassName": _DICT, "featuresDict": {"features": tensors}}


def dataset_name(output: str) -> str:
    """A TFDS dataset name from the output directory's name: snake case, starting with a
    letter (TFDS names are `[a-zA-Z]\\w*`)."""
    base = posixpath.basename(output.rstrip("/")) or "output"
    name = re.sub(r"\W+", "_", base).strip("_").lower() or "output"
    return name if name[0].isalpha() else f"d_{name}"


def dataset_info(manifest: Manifest, name: str) -> dict[str, Any]:
    """dataset_info.json: the name, version, file format and, per split, its shard lengths and
    bytes in shard order (the proto's JSON form: int64 as strings)."""
    splits = []
    for split, entry in manifest.splits.items():
        shards = sorted(entry.shards, key=lambda s: s.file)
        if len(shards) != len(entry.files) or any(s.rows is None for s in shards):
            raise ValueError(f"split {split}: the manifest lacks the records of each shard")
        splits.append(
            {
                "name": split,
                "shardLengths": [str(s.rows) for s in shards],
                "numBytes": str(sum(s.bytes or 0 for s in shards)),
                "filepathTemplate": FILEPATH_TEMPLATE,
            }
        )
    sources = len(manifest.sources)
    return {
        "name": name,
        "description": f"tf.train.Example records converted by tfrecord-etl from {sources} "
        "source file(s); manifest.json beside this file describes them.",
        "version": VERSION,
        "fileFormat": "tfrecord",
        "splits": splits,
    }


def write_tfds_metadata(output: str, manifest: Manifest) -> list[str]:
    """Write dataset_info.json and features.json into `output`; their paths."""
    documents = {
        DATASET_INFO: dataset_info(manifest, dataset_name(output)),
        FEATURES: tfds_features(manifest.features),
    }
    paths = []
    for file, document in documents.items():
        path = FileSystems.join(output, file)
        with FileSystems.create(path, mime_type="application/json") as f:
            f.write(json.dumps(document, indent=2).encode("utf-8"))
        paths.append(path)
    return paths
