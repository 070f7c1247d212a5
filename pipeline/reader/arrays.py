"""An output read as numpy arrays, without TensorFlow: `iter_batches` gives dicts of numpy arrays,
value for value what `load_dataset` gives as tensors, from the manifest alone.

    from pipeline.reader.arrays import iter_batches
    for batch in iter_batches("out", split="train", batch_size=256, shuffle_buffer=10_000, seed=1):
        batch["fare"]             # float64 [256] (0.0 where null)
        batch["fare__present"]    # bool [256]
        batch["tags"]             # Ragged(values=object array of bytes, row_lengths=int64 [256])

What comes back as what (the same as `restore` in pipeline/reader/spec.py, in numpy):

- each feature in its original dtype (bool, int8 .. uint64, float16, float32, float64); text and
  binary as numpy object arrays of `bytes` (what `.numpy()` of a tf.string tensor gives);
- a fixed array as [batch, *shape]; a nullable scalar or fixed array dense, 0 / 0.0 / b"" /
  False where null, with its bool mask [batch] under `NAME__present` (`null_masks`);
- a variable-length list, or an array with a variable outer dimension, as a `Ragged`:
  `values` [total, *inner] and `row_lengths` int64 [batch] (a null list an empty row with
  `NAME__present` False, an empty list True, as in `load_dataset`); `Ragged.rows()` cuts it
  into a list of arrays;
- a list whose items held nulls: 0 / 0.0 / b"" / False (or an empty list) there, and per
  such level K the bool mask `NAME__present_K`, nested as the value's first K levels;
- a list ragged below its first level as `Ragged`s nested as deep as its ragged levels (the
  `values` of each a `Ragged` again, the innermost fixed dims array dims), as the
  `tf.RaggedTensor` of `load_dataset`; `Ragged.tolist()` gives the nested lists;
- SequenceExamples: the context as above; each step feature a `Ragged` over the steps
  (`row_lengths`: steps per sequence) whose `values` are the steps as one feature of that many
  rows would be (a `Ragged` again for a variable-length list per step), `NAME__present` the
  same over the steps, and `__length` int64 [batch].

Records are decoded a batch at a time by a compiled parse (transforms/encode/kernel/parse.py);
shards are read a decompressed block at a time with both crcs checked (records.py). A shard is
reached through the filesystem facade (transforms/fs.py): local paths without Beam, gs:// and
other schemes through Beam's filesystems.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from pipeline.output.dataset import read_output_manifest
from pipeline.output.manifest import Manifest, StoredFeature
from pipeline.reader.decode import Keys, Raw, decode_records
from pipeline.reader.records import (
    RecordBlock,
    ShuffleBuffer,
    gather,
    partition,
    read_records,
    split_shards,
)
from pipeline.reader.values import PRESENT_SUFFIX, Ragged, restore_feature
from transforms.encode.features import BYTES, FLOAT64_BYTES, INT64, nulls_key, row_lengths_key

__all__ = ["LENGTH_KEY", "PRESENT_SUFFIX", "Layout", "Ragged", "decode_batch", "iter_batches"]

LENGTH_KEY = "__length"


def _check_names(features: Sequence[StoredFeature], extra: Sequence[str], lists: bool) -> None:
    names = {f.name for f in features}
    keys = [key for f in features for key in f.mask_keys(lists)] + list(extra)
    clash = sorted(set(keys) & names)
    if clash:
        raise ValueError(
            f"the keys {clash} that the reader adds are names of features; rename the columns, "
            "or read with null_masks=False"
        )


class Layout:
    """What a batch is decoded with: the wanted features and feature lists, their keys."""

    def __init__(self, manifest: Manifest, columns: Sequence[str] | None, null_masks: bool) -> None:
        features = list(manifest.features)
        steps = list(manifest.sequence.features) if manifest.sequence is not None else []
        if columns is not None:
            known = {f.name for f in (*features, *steps)}
            unknown = [c for c in columns if c not in known]
            if unknown:
                raise ValueError(f"columns {unknown} are not features of the output")
            wanted = set(columns)
            features = [f for f in features if f.name in wanted]
            steps = [f for f in steps if f.name in wanted]
        self.features, self.steps, self.null_masks = features, steps, null_masks
        self.sequence = manifest.sequence is not None
        if null_masks:
            extra = [LENGTH_KEY] if self.sequence else []
            _check_names([*features, *steps], extra, lists=not self.sequence)
        kind = lambda f: BYTES if f.spec.encoding == FLOAT64_BYTES else f.spec.kind  # noqa: E731
        # the features' values first, then the row lengths of those ragged below their first
        # level, then (with the masks) the null positions of those whose items held nulls
        lengths = [(f, k) for f in features for k in f.spec.partition_levels]
        self.partitions = lengths
        self.nulls = [(f, k) for f in features for k in f.null_levels] if null_masks else []
        self.keys = Keys.of(
            [f.name for f in features]
            + [row_lengths_key(f.name, k) for f, k in lengths]
            + [nulls_key(f.name, k) for f, k in self.nulls],
            [kind(f) for f in features] + [INT64] * (len(lengths) + len(self.nulls)),
        )
        self.lists = Keys.of([f.name for f in steps], [kind(f) for f in steps])


def decode_batch(block: RecordBlock, layout: Layout, where: str = "") -> dict[str, Any]:
    """The records of `block` as one batch of numpy arrays (see the module docstring)."""
    raws, lists = decode_records(
        block.buffer, block.starts, block.stops, layout.keys, layout.lists, where
    )
    out: dict[str, Any] = {}
    n_values, n_lengths = len(layout.features), len(layout.partitions)
    values, lengths = raws[:n_values], raws[n_values : n_values + n_lengths]
    partitions: dict[str, dict[int, Raw]] = {}
    for raw, (f, k) in zip(lengths, layout.partitions, strict=True):
        partitions.setdefault(f.name, {})[k] = raw
    nulls: dict[str, dict[int, Raw]] = {}
    for raw, (f, k) in zip(raws[n_values + n_lengths :], layout.nulls, strict=True):
        nulls.setdefault(f.name, {})[k] = raw
    lists_masks = None if layout.sequence else {}
    for raw, f in zip(values, layout.features, strict=True):
        inner = nulls.get(f.name, lists_masks)
        restore_feature(raw, f, layout.null_masks, out, partitions.get(f.name), inner, where)
    for steps, f in zip(lists, layout.steps, strict=True):
        flat: dict[str, Any] = {}
        restore_feature(steps.raw, f, layout.null_masks, flat)
        for key, value in flat.items():
            out[key] = Ragged(value, steps.steps)
    if layout.sequence:
        out[LENGTH_KEY] = lists[0].steps if lists else np.zeros(len(block), np.int64)
    return out


def _taken(pending: list[RecordBlock], n: int) -> RecordBlock:
    """The first `n` records of the pending blocks (removed from them), as one block."""
    parts = []
    while n > 0:
        block = pending[0]
        if len(block) <= n:
            parts.append(block)
            pending.pop(0)
            n -= len(block)
        else:
            parts.append(RecordBlock(block.buffer, block.starts[:n], block.stops[:n]))
            pending[0] = RecordBlock(block.buffer, block.starts[n:], block.stops[n:])
            n = 0
    if len(parts) == 1:
        return parts[0]
    gathered = [gather(p) for p in parts]
    bases = np.cumsum([0] + [g.buffer.shape[0] for g in gathered[:-1]])
    return RecordBlock(
        np.concatenate([g.buffer for g in gathered]),
        np.concatenate([g.starts + b for g, b in zip(gathered, bases, strict=True)]),
        np.concatenate([g.stops + b for g, b in zip(gathered, bases, strict=True)]),
    )


def iter_batches(
    output: str,
    split: str = "train",
    batch_size: int = 128,
    columns: Sequence[str] | None = None,
    shuffle_buffer: int = 0,
    seed: int | None = None,
    repeat: bool | int = False,
    shard_index: int = 0,
    num_shards: int = 1,
    drop_remainder: bool = False,
    null_masks: bool = True,
) -> Iterator[dict[str, Any]]:
    """Batches (dicts of numpy arrays) of one split of an output, from its manifest alone.

    `columns`: the features to decode (default all). `shuffle_buffer` > 0: the shards' order is
    shuffled and the records go through a buffer of that many, each out drawn at random from it
    (`seed` makes it repeatable; each pass is shuffled anew, passes do not mix). `repeat`: False
    (one pass), True (forever) or a number of passes. `shard_index` of `num_shards`: the part of
    the split this reader reads (data-parallel ranks, loader workers): contiguous, equal ranges
    of its records, together every record once. A last batch smaller than `batch_size` is
    given unless `drop_remainder`.

    FileNotFoundError without a manifest; ValueError for a split or column the manifest does
    not list, a bad argument, or a record that does not check out (naming shard and record).
    """
    if batch_size < 1:
        raise ValueError(f"batch_size must be at least 1, not {batch_size}")
    if shuffle_buffer < 0:
        raise ValueError(f"shuffle_buffer must be 0 (no shuffle) or more, not {shuffle_buffer}")
    if not isinstance(repeat, bool) and repeat < 1:
        raise ValueError(f"repeat must be a bool or a count of at least 1, not {repeat}")
    manifest = read_output_manifest(output)
    layout = Layout(manifest, columns, null_masks)
    parts = partition(split_shards(output, manifest, split), shard_index, num_shards)
    rng = np.random.default_rng(seed)
    epoch = 0
    while repeat is True or epoch < (1 if repeat is False else repeat):
        epoch += 1
        order = list(parts)
        if shuffle_buffer > 0 and len(order) > 1:
            order = [order[i] for i in rng.permutation(len(order))]
        yield from _one_pass(order, layout, batch_size, shuffle_buffer, rng, drop_remainder, split)


def _one_pass(
    parts: Sequence[Any],
    layout: Layout,
    batch_size: int,
    shuffle_buffer: int,
    rng: np.random.Generator,
    drop_remainder: bool,
    split: str,
) -> Iterator[dict[str, Any]]:
    where = f"split {split}"
    if shuffle_buffer > 0:
        buffer = ShuffleBuffer(shuffle_buffer, rng)
        for shard, first, stop in parts:
            for block in read_records(shard, first, stop):
                buffer.add(block)
                while len(buffer) >= shuffle_buffer + batch_size:
                    yield decode_batch(buffer.take(batch_size), layout, where)
        while len(buffer) >= batch_size or (len(buffer) and not drop_remainder):
            yield decode_batch(buffer.take(batch_size), layout, where)
        return
    pending: list[RecordBlock] = []
    held = 0
    for shard, first, stop in parts:
        for block in read_records(shard, first, stop):
            pending.append(block)
            held += len(block)
            while held >= batch_size:
                yield decode_batch(_taken(pending, batch_size), layout, where)
                held -= batch_size
    if held and not drop_remainder:
        yield decode_batch(_taken(pending, held), layout, where)
