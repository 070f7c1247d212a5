"""The parse spec of an output's Examples and the restore of a parsed batch, from the manifest's
features alone (TensorFlow's `tf.io` types; no reading of files here).

- `parse_spec(features)` is the `tf.io.parse_example` spec of the Example lists as they are
  stored: int64 / float32 / string per the feature's kind. Scalars and fixed arrays without
  nulls are `FixedLenFeature`s (fixed arrays flattened to `[prod(shape)]`); nullable features,
  variable-length lists and arrays with a variable outer dimension are `RaggedFeature`s with
  int64 row splits; a list ragged below its first level is a `RaggedFeature` with a partition
  per level (`RowLengths` of its row-lengths feature where the level varies,
  `UniformRowLength` where it is fixed). A float64 column written with keep_float64 is stored
  as one bytes value per row, so it is a `FixedLenFeature([], string)` when it has no nulls,
  whatever its shape.
- `restore(parsed, features)` turns a batched parse result into the user-facing tensors (what
  comes back as what: pipeline/reader/dataset.py).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import tensorflow as tf

from pipeline.output.dataset import read_output_manifest
from pipeline.output.manifest import StoredFeature
from transforms.encode.features import nulls_key, row_lengths_key
from transforms.encode.schema import BYTES, FLOAT, FLOAT64_BYTES, INT64, VALUES

__all__ = [
    "FLOAT64_BYTES",
    "PRESENT_SUFFIX",
    "ParseSpec",
    "StoredFeature",
    "check_mask_names",
    "parse_spec",
    "read_features",
    "record_keys",
    "restore",
]

PRESENT_SUFFIX = "__present"

_KIND_DTYPES = {INT64: tf.int64, FLOAT: tf.float32, BYTES: tf.string}
_KIND_DEFAULTS: dict[str, Any] = {INT64: 0, FLOAT: 0.0, BYTES: b""}

ParseSpec = dict[str, tf.io.FixedLenFeature | tf.io.RaggedFeature]


def _as_stored(features: Sequence[StoredFeature | Mapping[str, Any]]) -> list[StoredFeature]:
    """Manifest features, typed (entries of a manifest's JSON are accepted too)."""
    return [f if isinstance(f, StoredFeature) else StoredFeature.from_json(f) for f in features]


def read_features(output_dir: str) -> list[StoredFeature]:
    """The features of an output, from its manifest (FileNotFoundError when there is none)."""
    return list(read_output_manifest(output_dir).features)


def _raw_feature(f: StoredFeature) -> tf.io.FixedLenFeature | tf.io.RaggedFeature:
    spec = f.spec
    if spec.encoding not in (VALUES, FLOAT64_BYTES) or spec.kind not in _KIND_DTYPES:
        raise ValueError(
            f"feature {spec.name!r}: kind {spec.kind!r} / encoding {spec.encoding!r} is not one "
            "this reader knows (a manifest from a newer writer?)"
        )
    if spec.encoding == FLOAT64_BYTES:  # one bytes value per present row, whatever the shape
        if f.nullable:
            return tf.io.RaggedFeature(tf.string, row_splits_dtype=tf.int64)
        return tf.io.FixedLenFeature([], tf.string)
    dtype = _KIND_DTYPES[spec.kind]
    if spec.partition_levels:  # ragged below its first level: the lengths of each level
        partitions = [
            tf.io.RaggedFeature.RowLengths(row_lengths_key(spec.name, k))
            if d < 0
            else tf.io.RaggedFeature.UniformRowLength(d)
            for k, d in enumerate(spec.shape)
            if k > 0
        ]
        return tf.io.RaggedFeature(
            dtype, value_key=spec.name, partitions=partitions, row_splits_dtype=tf.int64
        )
    if f.nullable or f.ragged:
        return tf.io.RaggedFeature(dtype, row_splits_dtype=tf.int64)
    shape = [] if spec.shape == () else [math.prod(spec.shape)]
    return tf.io.FixedLenFeature(shape, dtype)


def parse_spec(features: Sequence[StoredFeature | Mapping[str, Any]]) -> ParseSpec:
    """The `tf.io.parse_example` spec of `features` (StoredFeatures or manifest entries): each
    feature, and the null positions (`NAME__nulls_K`, int64 RaggedFeatures) of each list
    level whose items held nulls."""
    spec: ParseSpec = {}
    for f in _as_stored(features):
        spec[f.name] = _raw_feature(f)
        for k in f.null_levels:
            spec[nulls_key(f.name, k)] = tf.io.RaggedFeature(tf.int64, row_splits_dtype=tf.int64)
    return spec


def check_mask_names(
    features: Sequence[StoredFeature], names: set[str], lists: bool = True
) -> None:
    """ValueError when a null mask key of one of `features` (`StoredFeature.mask_keys`) is a
    feature name in `names`."""
    for f in features:
        for key in f.mask_keys(lists):
            if key in names:
                raise ValueError(
                    f"feature {f.name!r} holds nulls, and its null mask key {key!r} is also the "
                    "name of a feature; rename one of the columns, or read with null_masks=False"
                )


def record_keys(records: tf.Tensor) -> tf.RaggedTensor:
    """The feature keys of each serialized Example of `records` ([batch] strings), as a
    [batch, None] RaggedTensor: what tells a null list (no feature) from an empty one (a
    feature with no value), which `tf.io.parse_example` reads alike. Three
    `tf.io.decode_proto` passes over the wire format (Example, Features, map entry)."""
    source = "local://"
    _, (features,) = tf.io.decode_proto(
        records, "tensorflow.Example", ["features"], [tf.string], descriptor_source=source
    )
    sizes, (entries,) = tf.io.decode_proto(
        features[:, 0], "tensorflow.Features", ["feature"], [tf.string], descriptor_source=source
    )
    entries = tf.RaggedTensor.from_tensor(entries, lengths=tf.cast(sizes[:, 0], tf.int64))
    _, (keys,) = tf.io.decode_proto(
        entries.flat_values,
        "tensorflow.Features.FeatureEntry",
        ["key"],
        [tf.string],
        descriptor_source=source,
    )
    return entries.with_flat_values(keys[:, 0])


def _peel(value: Any, levels: int) -> tuple[tf.Tensor, list[Any]]:
    """The first `levels` list levels of a restored value (a RaggedTensor, or a tensor
    [batch, *shape]): per batch row, where its items of level `levels` start and end among
    the batch's (n + 1 bounds), and each level as a RaggedTensor holds it (its row splits and
    uniform row length) or an array dim (an int), outermost first."""
    if isinstance(value, tf.RaggedTensor):
        n = value.nrows()
    else:
        n = tf.shape(value, out_type=tf.int64)[0]
    bounds = tf.range(n + 1, dtype=tf.int64)
    peeled: list[Any] = []
    t = value
    for _ in range(levels):
        if isinstance(t, tf.RaggedTensor):
            bounds = tf.gather(t.row_splits, bounds)
            peeled.append((t.row_splits, t.uniform_row_length))
            t = t.values
        else:
            size = int(t.shape[1])
            bounds = bounds * size
            peeled.append(size)
            t = tf.reshape(t, [-1, *t.shape[2:]])
    return bounds, peeled


def _inner_mask(value: Any, positions: tf.RaggedTensor, level: int, key: str) -> Any:
    """The bool mask of a list's level-`level` items, nested as the value's first `level`
    levels, False at the record's null positions (counted among the row's items). A position
    outside the row's items (a record changed after it was written) fails the read with an
    error naming `key`, the positions' feature, instead of marking another row's item (the
    order of a row's positions does not matter to the mask; verify checks it)."""
    bounds, peeled = _peel(value, level)
    rows = positions.value_rowids()
    found = positions.values
    start, stop = tf.gather(bounds[:-1], rows), tf.gather(bounds[1:], rows)
    at = start + found
    check = tf.debugging.Assert(
        tf.reduce_all(tf.logical_and(found >= 0, at < stop)),
        [f"{key}: a null position lies outside its row's level-{level} items (the record "
         "was changed after it was written; `tfrecord-etl verify` names it)"],
    )  # fmt: skip
    with tf.control_dependencies([check]):
        mask = tf.tensor_scatter_nd_update(
            tf.ones(bounds[-1:], tf.bool), at[:, None], tf.zeros_like(at, tf.bool)
        )
    mask = tf.ensure_shape(mask, [None])
    dims: list[int] = []  # the array dims the mask has so far, after its first
    for step in reversed(peeled):
        if isinstance(step, int):
            mask = tf.reshape(mask, [-1, step, *dims])
            dims = [step, *dims]
            continue
        splits, uniform = step
        if uniform is not None:
            rows = tf.shape(splits, out_type=tf.int64)[0] - 1
            mask = tf.RaggedTensor.from_uniform_row_length(mask, uniform, rows, validate=False)
        else:
            mask = tf.RaggedTensor.from_row_splits(mask, splits, validate=False)
    return mask


def _with_shape(dense: tf.Tensor, shape: tuple[int, ...]) -> tf.Tensor:
    """[batch, prod(shape)] -> [batch, *shape] (or [batch] for a scalar)."""
    if shape == ():
        return dense[:, 0]
    return tf.reshape(
        dense, tf.concat([tf.shape(dense, out_type=tf.int64)[:1], tf.constant(shape, tf.int64)], 0)
    )


def _fill_nulls(raw: tf.RaggedTensor, size: int, default: Any) -> tuple[tf.Tensor, tf.Tensor]:
    """A [batch, 0-or-size] ragged tensor -> [batch, size] filled with `default`, and presence."""
    present = raw.row_lengths() > 0
    dense = raw.to_tensor(default_value=default, shape=[None, size])
    return dense, present


def _restore_values(raw: Any, f: StoredFeature) -> tuple[Any, tf.Tensor | None]:
    """Encoding "values": (tensor in the stored dtype, presence mask or None)."""
    shape = f.spec.shape
    if shape is None:
        return raw, None
    if f.spec.partition_levels:  # parsed with its row lengths: nested already
        return raw, None
    if f.ragged:  # [-1, *inner]: the row's values are whole inner arrays
        inner = shape[1:]
        values = tf.reshape(raw.values, [-1, *inner])
        lengths = raw.row_lengths() // math.prod(inner)
        return tf.RaggedTensor.from_row_lengths(values, lengths, validate=False), None
    if not f.nullable:
        return (raw if shape == () else _with_shape(raw, shape)), None
    dense, present = _fill_nulls(raw, math.prod(shape), _KIND_DEFAULTS[f.spec.kind])
    return _with_shape(dense, shape), present


def _restore_float64_bytes(raw: Any, f: StoredFeature) -> tuple[Any, tf.Tensor | None]:
    """Encoding "float64_bytes": decode each row's little-endian bytes to float64."""
    shape = f.spec.shape
    present = None
    if f.nullable:
        dense, present = _fill_nulls(raw, 1, b"")
        raw = dense[:, 0]  # a null row: no bytes
    if f.ragged:
        inner = () if shape is None else shape[1:]
        flat = tf.io.decode_raw(tf.strings.reduce_join(raw), tf.float64, little_endian=True)
        values = tf.reshape(flat, [-1, *inner]) if inner else flat
        lengths = tf.cast(tf.strings.length(raw), tf.int64) // (8 * math.prod(inner))
        return tf.RaggedTensor.from_row_lengths(values, lengths, validate=False), None
    size = math.prod(shape)
    if size == 0:
        dense = tf.zeros(tf.stack([tf.size(raw, out_type=tf.int64), 0]), tf.float64)
    else:  # fixed_length pads a null row's empty bytes with zeros
        dense = tf.io.decode_raw(raw, tf.float64, little_endian=True, fixed_length=8 * size)
    return _with_shape(dense, shape), present


def _cast(value: Any, dtype_name: str) -> Any:
    target = tf.as_dtype(dtype_name)
    if value.dtype == target:
        return value
    if isinstance(value, tf.RaggedTensor):
        return value.with_flat_values(tf.cast(value.flat_values, target))
    return tf.cast(value, target)  # int64 -> bool is `!= 0`


def restore(
    parsed: Mapping[str, Any],
    features: Sequence[StoredFeature | Mapping[str, Any]],
    null_masks: bool = True,
    records: tf.Tensor | None = None,
) -> dict[str, Any]:
    """Turn a batched `tf.io.parse_example(records, parse_spec(features))` result into the
    user-facing tensors (see the module docstring for what comes back as what).

    `features` are StoredFeatures or manifest feature entries; `parsed` may hold a subset of
    them (a parse of some columns only). Each feature comes back in its original dtype (bool,
    int8 .. uint64, float16, float32, float64, string); float64 written without keep_float64
    holds float32 precision. Fixed arrays are [batch, *shape]; variable-length lists are
    RaggedTensors [batch, None]. A nullable scalar or fixed array is dense with 0 / 0.0 / "" /
    False where null, and with `null_masks` its bool mask [batch] is under f"{name}__present"
    (ValueError when that key is the name of a feature). A list that comes back ragged is an
    empty row where null; given the batch's serialized `records`, its `__present` mask tells
    the null rows (no feature in the record) from the empty lists (`record_keys`); without
    them it has none. A list level K whose items held nulls (the parse's `NAME__nulls_K`) has
    the bool mask `NAME__present_K`, nested as the value's first K levels and False exactly
    at its null items (whose values hold 0 / 0.0 / "" / False or an empty list).
    """
    stored = {f.name: f for f in _as_stored(features)}
    positions = {nulls_key(f.name, k): f for f in stored.values() for k in f.null_levels}
    unknown = sorted(set(parsed) - set(stored) - set(positions))
    if unknown:
        raise KeyError(f"parsed features {unknown} are not among the features to restore")
    wanted = [stored[name] for name in sorted(parsed) if name in stored]
    if null_masks:
        check_mask_names(wanted, set(stored), lists=records is not None)
    keys = None
    if null_masks and records is not None and any(f.list_mask for f in wanted):
        keys = record_keys(records)
    out: dict[str, Any] = {}
    for f in wanted:
        if f.spec.encoding == FLOAT64_BYTES:
            value, present = _restore_float64_bytes(parsed[f.name], f)
        else:
            value, present = _restore_values(parsed[f.name], f)
        out[f.name] = _cast(value, f.spec.dtype)
        if not null_masks:
            continue
        if present is None and keys is not None and f.list_mask:
            present = tf.reduce_any(tf.equal(keys, f.name), axis=1)
        if present is not None:
            out[f.name + PRESENT_SUFFIX] = present
        for k in f.null_levels:
            if nulls_key(f.name, k) not in parsed:
                continue
            mask = _inner_mask(value, parsed[nulls_key(f.name, k)], k, nulls_key(f.name, k))
            if not isinstance(value, tf.RaggedTensor) and present is not None:
                shape = tf.concat([tf.shape(present), tf.ones([k], tf.int32)], 0)
                mask = tf.logical_and(mask, tf.reshape(present, shape))
            out[f"{f.name}{PRESENT_SUFFIX}_{k}"] = mask
    return out
