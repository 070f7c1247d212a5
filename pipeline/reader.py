"""Reading a conversion output back with tf.data, using only its manifest.

`load_dataset(output_dir)` is the one-call entry point: it lists the split's shards from the
manifest, reads them with interleaved parallel reads, optionally shuffles and repeats, batches
the serialized records, then parses each batch with `tf.io.parse_example` and `restore`s it.

The two steps are public for use in other input pipelines:

- `feature_spec(output_dir)` (or `parse_spec(features)`) is the `tf.io.parse_example` spec of the
  Example lists as they are stored: int64 / float32 / string per the feature's kind.
  Scalars and fixed arrays without nulls are `FixedLenFeature`s (fixed arrays flattened to
  `[prod(shape)]`); nullable features, variable-length lists and arrays with a variable outer
  dimension are `RaggedFeature`s with int64 row splits. A float64 column written with
  keep_float64 is stored as one bytes value per row, so it is a `FixedLenFeature([], string)`
  when it has no nulls, whatever its shape.
- `restore(parsed, features)` turns a batched parse result into the user-facing tensors:
  the original dtype, fixed arrays as `[batch, *shape]`, variable-length lists as
  `tf.RaggedTensor` `[batch, None]` (`[batch, None, *inner]` for a variable outer dimension),
  and for a nullable scalar or fixed array a dense tensor that holds 0 / 0.0 / "" / False
  where the row is null, plus a bool `[batch]` mask under the key `f"{name}__present"`.

What comes back as what:

- Timestamps are int64 counts in the manifest's `unit`, dates int64 days since 1970-01-01,
  decimals their decimal text, binary and text columns `tf.string`.
- A float64 column written without keep_float64 was narrowed to float32 by the writer: it is
  cast back to float64 here, but holds float32 precision. With keep_float64 it is exact.
- For a variable-length list column (and a variable outer dimension) a null row and an empty
  list both come back as an empty row: parse_example cannot tell an absent feature from a
  present one with no values. The records themselves keep the difference, and the manifest's
  `null_count` says how many rows were null.
- A nullable fixed array with no elements at all (a zero in its shape) reads as null in every row.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import tensorflow as tf

from pipeline.manifest import Manifest, StoredFeature, read_manifest
from transforms.encode.schema import BYTES, FLOAT, FLOAT64_BYTES, INT64, VALUES
from transforms.fs import FileSystems

__all__ = [
    "FLOAT64_BYTES",
    "PRESENT_SUFFIX",
    "StoredFeature",
    "feature_spec",
    "load_dataset",
    "parse_spec",
    "read_features",
    "restore",
]

PRESENT_SUFFIX = "__present"
_READ_BUFFER = 1 << 20  # bytes each shard reader buffers
_READ_BLOCK = 1024  # records a shard reader hands over at a time when shards are interleaved

_KIND_DTYPES = {INT64: tf.int64, FLOAT: tf.float32, BYTES: tf.string}
_KIND_DEFAULTS: dict[str, Any] = {INT64: 0, FLOAT: 0.0, BYTES: b""}

ParseSpec = dict[str, tf.io.FixedLenFeature | tf.io.RaggedFeature]


def _as_stored(features: Sequence[StoredFeature | Mapping[str, Any]]) -> list[StoredFeature]:
    """Manifest features, typed (entries of a manifest's JSON are accepted too)."""
    return [f if isinstance(f, StoredFeature) else StoredFeature.from_json(f) for f in features]


def read_features(output_dir: str) -> list[StoredFeature]:
    """The features of an output, from its manifest (FileNotFoundError when there is none)."""
    return list(read_manifest(output_dir).features)


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
    if f.nullable or f.ragged:
        return tf.io.RaggedFeature(dtype, row_splits_dtype=tf.int64)
    shape = [] if spec.shape == () else [math.prod(spec.shape)]
    return tf.io.FixedLenFeature(shape, dtype)


def parse_spec(features: Sequence[StoredFeature | Mapping[str, Any]]) -> ParseSpec:
    """The `tf.io.parse_example` spec of `features` (StoredFeatures or manifest entries)."""
    return {f.name: _raw_feature(f) for f in _as_stored(features)}


def feature_spec(output_dir: str) -> ParseSpec | tuple[ParseSpec, ParseSpec]:
    """The `tf.io.parse_example` spec of the output in `output_dir`, from its manifest alone;
    for SequenceExamples both specs of `tf.io.parse_sequence_example`, (context, feature
    lists) (pipeline/sequence_reader.py)."""
    manifest = read_manifest(output_dir)
    if manifest.sequence is not None:
        from pipeline.sequence_reader import sequence_spec  # it builds on this module

        return sequence_spec(manifest)
    return parse_spec(manifest.features)


def _check_mask_names(features: Sequence[StoredFeature], names: set[str]) -> None:
    """ValueError when the null mask key of one of `features` is a feature name in `names`."""
    for f in features:
        key = f.name + PRESENT_SUFFIX
        if f.has_mask and key in names:
            raise ValueError(
                f"feature {f.name!r} is nullable, and its null mask key {key!r} is also the "
                "name of a feature; rename one of the columns, or read with null_masks=False"
            )


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
) -> dict[str, Any]:
    """Turn a batched `tf.io.parse_example(records, parse_spec(features))` result into the
    user-facing tensors (see the module docstring for what comes back as what).

    `features` are StoredFeatures or manifest feature entries; `parsed` may hold a subset of
    them (a parse of some columns only). Each feature comes back in its original dtype (bool,
    int8 .. uint64, float16, float32, float64, string); float64 written without keep_float64
    holds float32 precision. Fixed arrays are [batch, *shape]; variable-length lists are
    RaggedTensors [batch, None]. A nullable scalar or fixed array is dense with 0 / 0.0 / "" /
    False where null, and with `null_masks` its bool mask [batch] is under f"{name}__present"
    (ValueError when that key is the name of a feature). For a variable-length list a null and
    an empty list both come back as an empty row.
    """
    stored = {f.name: f for f in _as_stored(features)}
    unknown = sorted(set(parsed) - set(stored))
    if unknown:
        raise KeyError(f"parsed features {unknown} are not among the features to restore")
    wanted = [stored[name] for name in sorted(parsed)]
    if null_masks:
        _check_mask_names(wanted, set(stored))
    out: dict[str, Any] = {}
    for f in wanted:
        if f.spec.encoding == FLOAT64_BYTES:
            value, present = _restore_float64_bytes(parsed[f.name], f)
        else:
            value, present = _restore_values(parsed[f.name], f)
        out[f.name] = _cast(value, f.spec.dtype)
        if null_masks and present is not None:
            out[f.name + PRESENT_SUFFIX] = present
    return out


def _split_files(manifest: Manifest, output_dir: str, split: str) -> list[str]:
    splits = manifest.splits
    if split not in splits:
        raise ValueError(
            f"{output_dir}: split {split!r} is not in the manifest (splits: {sorted(splits)})"
        )
    return [FileSystems.join(output_dir, name) for name in splits[split].files]


def _check_arguments(batch_size: int, shuffle_buffer: int, repeat: bool | int) -> None:
    if batch_size < 1:
        raise ValueError(f"batch_size must be at least 1, not {batch_size}")
    if shuffle_buffer < 0:
        raise ValueError(f"shuffle_buffer must be 0 (no shuffle) or more, not {shuffle_buffer}")
    if not isinstance(repeat, bool) and repeat < 1:
        raise ValueError(f"repeat must be a bool or a count of at least 1, not {repeat}")


def load_dataset(
    output_dir: str,
    split: str = "train",
    batch_size: int = 128,
    shuffle_buffer: int = 0,
    repeat: bool | int = False,
    seed: int | None = None,
    drop_remainder: bool = False,
    num_parallel_reads: int | None = tf.data.AUTOTUNE,
    null_masks: bool = True,
) -> tf.data.Dataset:
    """A tf.data.Dataset of restored batches (dicts, see `restore`) of one split of an output.

    Shards come from the manifest and are read interleaved (`num_parallel_reads` at a time,
    each handing over blocks of 1,024 records in turn; None reads them one after another).
    With `shuffle_buffer` > 0 the shard order is shuffled and the records go through a
    shuffle buffer of that size (`seed` makes both repeatable).
    `repeat` is False (one pass), True (forever) or a number of passes; each pass is shuffled
    anew. Records are batched first and each batch is parsed as a whole; SequenceExamples
    (a manifest with a `sequence` section) with `tf.io.parse_sequence_example`, their steps as
    RaggedTensors [batch, time, ...] (pipeline/sequence_reader.py).

    Raises FileNotFoundError when `output_dir` has no manifest (not a complete output) and
    ValueError for a split the manifest does not list or a bad argument.
    """
    _check_arguments(batch_size, shuffle_buffer, repeat)
    manifest = read_manifest(output_dir)
    files = _split_files(manifest, output_dir, split)
    features = list(manifest.features)
    if manifest.sequence is not None:  # SequenceExamples
        from pipeline.sequence_reader import sequence_parser  # it builds on this module

        parse_batch = sequence_parser(manifest, null_masks)
    else:
        if null_masks:
            _check_mask_names(features, {f.name for f in features})
        spec = parse_spec(features)

        def parse_batch(records: tf.Tensor) -> dict[str, Any]:
            return restore(tf.io.parse_example(records, spec), features, null_masks=null_masks)

    names = tf.data.Dataset.from_tensor_slices(tf.constant(files, dtype=tf.string))
    if shuffle_buffer > 0 and len(files) > 1:
        names = names.shuffle(len(files), seed=seed, reshuffle_each_iteration=True)
    compression = manifest.tf_compression_type
    blocks = len(files) > 1 and num_parallel_reads is not None
    if blocks:
        # Shards read side by side hand over blocks of records, not single records: an
        # interleave pays a cross-thread hand-off per element, which made a record-level
        # interleave (TFRecordDataset's num_parallel_reads) 2.8x slower than this (bench/).
        def read_blocks(name: tf.Tensor) -> tf.data.Dataset:
            records = tf.data.TFRecordDataset(name, compression, _READ_BUFFER)
            return records.batch(_READ_BLOCK)

        ds = names.interleave(
            read_blocks,
            cycle_length=num_parallel_reads,
            num_parallel_calls=tf.data.AUTOTUNE,
            deterministic=True,
        )
    else:  # one shard, or reads one after another: a plain reader
        ds = tf.data.TFRecordDataset(names, compression, _READ_BUFFER)
    if shuffle_buffer > 0:
        if blocks:
            ds = ds.unbatch()
            blocks = False
        ds = ds.shuffle(shuffle_buffer, seed=seed, reshuffle_each_iteration=True)
    if repeat is True:
        ds = ds.repeat()
    elif repeat is not False and repeat > 1:
        ds = ds.repeat(repeat)
    if blocks:  # blocks end where shards end: cut again into batches of batch_size
        ds = ds.rebatch(batch_size, drop_remainder=drop_remainder)
    else:
        ds = ds.batch(batch_size, drop_remainder=drop_remainder)
    ds = ds.map(parse_batch, num_parallel_calls=tf.data.AUTOTUNE)
    return ds.prefetch(tf.data.AUTOTUNE)
