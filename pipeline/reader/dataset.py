"""Reading a conversion output back with tf.data, using only its manifest.

`load_dataset(output_dir)` is the one-call entry point: it lists the split's shards from the
manifest, reads them with interleaved parallel reads, optionally shuffles and repeats, batches
the serialized records, then parses each batch with `tf.io.parse_example` and `restore`s it.

The two steps are public for use in other input pipelines (pipeline/reader/spec.py):

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
- For a variable-length list column (and a variable outer dimension) a null row comes back as
  an empty row; parse_example cannot tell an absent feature from a present one with no values,
  so `load_dataset` reads each record's feature keys (`spec.record_keys`) and gives the list
  its `NAME__present` mask, False for a null row, True for an empty list.
- A list whose items held nulls (`NAME__nulls_K` in the records, `inner_nulls` in the
  manifest): the nulls hold 0 / 0.0 / "" / False (a null inner list: empty), and per such
  level K the bool mask `NAME__present_K`, nested as the value's first K levels, is False
  exactly at them.
- A nullable fixed array with no elements at all (a zero in its shape) reads as null in every row.
- An image feature (a `files:` image column) is its encoded bytes (`tf.string`); with
  `decode_images=True` its uint8 pixels, `[batch, H, W, C]` or ragged when the images differ
  in size (pipeline/reader/images.py).
"""

from __future__ import annotations

from typing import Any

import tensorflow as tf

from pipeline.output.dataset import read_output_manifest
from pipeline.output.entries import entry
from pipeline.output.manifest import Manifest
from pipeline.reader.images import decode_images as decode_image_features
from pipeline.reader.sequence import sequence_parser, sequence_spec
from pipeline.reader.spec import ParseSpec, check_mask_names, parse_spec, restore

__all__ = ["feature_spec", "load_dataset"]

_READ_BUFFER = 1 << 20  # bytes each shard reader buffers
_READ_BLOCK = 1024  # records a shard reader hands over at a time when shards are interleaved


def feature_spec(output_dir: str) -> ParseSpec | tuple[ParseSpec, ParseSpec]:
    """The `tf.io.parse_example` spec of the output in `output_dir`, from its manifest alone;
    for SequenceExamples both specs of `tf.io.parse_sequence_example`, (context, feature
    lists) (pipeline/reader/sequence.py)."""
    manifest = read_output_manifest(output_dir)
    if manifest.sequence is not None:
        return sequence_spec(manifest)
    return parse_spec(manifest.features)


def _split_files(manifest: Manifest, output_dir: str, split: str) -> list[str]:
    splits = manifest.splits
    if split not in splits:
        raise ValueError(
            f"{output_dir}: split {split!r} is not in the manifest (splits: {sorted(splits)})"
        )
    return [entry(output_dir, name) for name in splits[split].files]  # no link followed


def _check_arguments(batch_size: int, shuffle_buffer: int, repeat: bool | int) -> None:
    if batch_size < 1:
        raise ValueError(f"batch_size must be at least 1, not {batch_size}")
    if shuffle_buffer < 0:
        raise ValueError(f"shuffle_buffer must be 0 (no shuffle) or more, not {shuffle_buffer}")
    if not isinstance(repeat, bool) and repeat < 1:
        raise ValueError(f"repeat must be a bool or a count of at least 1, not {repeat}")


def _check_tensorflow_reads(files: list[str]) -> None:
    """ValueError now, not at the first batch, when TensorFlow has no filesystem for the
    shards' scheme (TensorFlow 2.21 has none for s3:// or azfs://; the manifest was read through
    Beam's)."""
    if not files or "://" not in files[0]:
        return
    try:
        tf.io.gfile.exists(files[0])
    except tf.errors.UnimplementedError as err:
        scheme = files[0].split("://", 1)[0]
        raise ValueError(
            f"{files[0]}: TensorFlow cannot read {scheme}:// ({err.message}); read this output "
            "with pipeline.reader.arrays.iter_batches (no TensorFlow), or register a TensorFlow "
            f"filesystem for {scheme}:// before calling load_dataset"
        ) from None


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
    decode_images: bool = False,
) -> tf.data.Dataset:
    """A tf.data.Dataset of restored batches (dicts, see `restore`) of one split of an output.

    Shards come from the manifest and are read interleaved (`num_parallel_reads` at a time,
    each handing over blocks of 1,024 records in turn; None reads them one after another).
    With `shuffle_buffer` > 0 the shard order is shuffled and the records go through a
    shuffle buffer of that size (`seed` makes both repeatable).
    `repeat` is False (one pass), True (forever) or a number of passes; each pass is shuffled
    anew. Records are batched first and each batch is parsed as a whole; SequenceExamples
    (a manifest with a `sequence` section) with `tf.io.parse_sequence_example`, their steps as
    RaggedTensors [batch, time, ...] (pipeline/reader/sequence.py). With `decode_images` the
    image features come back as uint8 pixels instead of their encoded bytes
    (pipeline/reader/images.py).

    Raises FileNotFoundError when `output_dir` has no manifest (not a complete output) and
    ValueError for a split the manifest does not list, a bad argument, or shards on a store
    TensorFlow has no filesystem for (s3:// and azfs:// on TensorFlow 2.21).
    """
    _check_arguments(batch_size, shuffle_buffer, repeat)
    manifest = read_output_manifest(output_dir)
    files = _split_files(manifest, output_dir, split)
    _check_tensorflow_reads(files)
    features = list(manifest.features)
    if manifest.sequence is not None:  # SequenceExamples
        parse_batch = sequence_parser(manifest, null_masks)
    else:
        if null_masks:
            check_mask_names(features, {f.name for f in features})
        spec = parse_spec(features)

        def parse_batch(records: tf.Tensor) -> dict[str, Any]:
            parsed = tf.io.parse_example(records, spec)
            parsed = restore(parsed, features, null_masks=null_masks, records=records)
            return decode_image_features(parsed, features) if decode_images else parsed

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
