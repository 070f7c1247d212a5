"""Reading SequenceExample outputs (a manifest with a `sequence` section) with tf.data.

`load_dataset` (pipeline/reader/dataset.py) parses each batch with `tf.io.parse_sequence_example`
and the two specs of `sequence_spec`: the context's (the manifest's `features`, the same spec as an
Example output's) and the feature lists' (every step feature a `RaggedFeature`, so a batch is
[batch, time, values]). `restore_sequences` then gives:

- each context feature as `restore` gives an Example feature (dtype, shape, `__present` mask);
- each step feature as a `tf.RaggedTensor` [batch, time, *shape] in its dtype: a scalar per step
  is [batch, time], a fixed array [batch, time, *shape], a variable-length list
  [batch, time, None]. A step whose value was null holds 0 / 0.0 / "" / False, and for a
  scalar or fixed array the bool RaggedTensor [batch, time] `NAME__present` is False exactly
  there (a variable-length list per step: a null and an empty list both read as empty);
- `__length`: int64 [batch], the steps of each sequence.

The step values are restored by the same code as an Example's rows (`restore` on the flat
steps, [steps, values]), then given back their time dimension.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import tensorflow as tf

from pipeline.output.manifest import Manifest, StoredFeature
from pipeline.reader.spec import FLOAT64_BYTES, PRESENT_SUFFIX, ParseSpec, parse_spec, restore
from transforms.encode.schema import BYTES, FLOAT, INT64

__all__ = ["LENGTH_KEY", "restore_sequences", "sequence_parser", "sequence_spec"]

LENGTH_KEY = "__length"
_KIND_DTYPES = {INT64: tf.int64, FLOAT: tf.float32, BYTES: tf.string}


def _step_feature(f: StoredFeature) -> tf.io.RaggedFeature:
    spec = f.spec
    if spec.kind not in _KIND_DTYPES:
        raise ValueError(
            f"feature list {spec.name!r}: kind {spec.kind!r} is not one this reader knows"
        )
    dtype = tf.string if spec.encoding == FLOAT64_BYTES else _KIND_DTYPES[spec.kind]
    return tf.io.RaggedFeature(dtype, row_splits_dtype=tf.int64)


def sequence_spec(manifest: Manifest) -> tuple[ParseSpec, ParseSpec]:
    """(context spec, feature list spec): the `context_features` and `sequence_features` of
    `tf.io.parse_sequence_example` for a SequenceExample output."""
    if manifest.sequence is None:
        raise ValueError("the output holds tf.train.Examples, not SequenceExamples")
    steps = {f.name: _step_feature(f) for f in manifest.sequence.features}
    return parse_spec(manifest.features), steps


def _as_row_parse(flat: tf.RaggedTensor, f: StoredFeature) -> Any:
    """The flat steps [steps, values] as `tf.io.parse_example` gives a feature of that many
    rows with `parse_spec`'s spec (dense where it is a FixedLenFeature)."""
    if f.nullable or f.ragged:
        return flat
    shape = f.spec.shape
    if f.spec.encoding == FLOAT64_BYTES or shape == ():
        return flat.flat_values
    return tf.reshape(flat.flat_values, [-1, math.prod(shape)])


def _check_names(manifest: Manifest, null_masks: bool) -> None:
    """ValueError when a mask key or the length key is also the name of a feature."""
    steps = manifest.sequence.features
    names = [f.name for f in (*manifest.features, *steps)]
    keys = [LENGTH_KEY]
    if null_masks:
        keys += [f.name + PRESENT_SUFFIX for f in (*manifest.features, *steps) if f.has_mask]
    clash = sorted(set(keys) & set(names))
    if clash:
        raise ValueError(
            f"the keys {clash} that the reader adds are names of features; rename the columns"
            + (", or read with null_masks=False" if null_masks else "")
        )


def restore_sequences(
    context: dict[str, Any], lists: dict[str, Any], manifest: Manifest, null_masks: bool = True
) -> dict[str, Any]:
    """A batched `tf.io.parse_sequence_example(records, *sequence_spec(manifest))` result
    (its context and feature lists) -> the user-facing tensors (see the module docstring)."""
    out = restore(context, manifest.features, null_masks=null_masks)
    steps = [f for f in manifest.sequence.features if f.name in lists]
    flat = {f.name: _as_row_parse(lists[f.name].values, f) for f in steps}
    restored = restore(flat, steps, null_masks=null_masks)
    for key, value in restored.items():
        name = key[: -len(PRESENT_SUFFIX)] if key not in lists else key
        splits = lists[name].row_splits
        out[key] = tf.RaggedTensor.from_row_splits(value, splits, validate=False)
    if steps:
        out[LENGTH_KEY] = lists[steps[0].name].row_lengths()
    return out


def sequence_parser(manifest: Manifest, null_masks: bool = True) -> Callable[[tf.Tensor], dict]:
    """The function `load_dataset` maps over batches of serialized SequenceExamples."""
    _check_names(manifest, null_masks)
    context_spec, list_spec = sequence_spec(manifest)

    def parse_batch(records: tf.Tensor) -> dict[str, Any]:
        context, lists, _ = tf.io.parse_sequence_example(records, context_spec, list_spec)
        return restore_sequences(context, lists, manifest, null_masks)

    return parse_batch
