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

import math
from collections.abc import Iterator, Sequence
from typing import Any, NamedTuple

import numpy as np

from pipeline.output.dataset import read_output_manifest
from pipeline.output.manifest import Manifest, StoredFeature
from pipeline.reader.decode import Keys, Raw, RecordError, decode_records
from pipeline.reader.records import (
    RecordBlock,
    ShuffleBuffer,
    gather,
    partition,
    read_records,
    split_shards,
)
from transforms.encode.features import BYTES, FLOAT64_BYTES, INT64, nulls_key, row_lengths_key

__all__ = ["LENGTH_KEY", "PRESENT_SUFFIX", "Layout", "Ragged", "decode_batch", "iter_batches"]

PRESENT_SUFFIX = "__present"
LENGTH_KEY = "__length"

# tf.dtypes names the manifest uses -> numpy dtypes ("string": object arrays of bytes)
_DTYPES = {
    "bool": np.bool_,
    "int8": np.int8,
    "int16": np.int16,
    "int32": np.int32,
    "int64": np.int64,
    "uint8": np.uint8,
    "uint16": np.uint16,
    "uint32": np.uint32,
    "uint64": np.uint64,
    "float16": np.float16,
    "float32": np.float32,
    "float64": np.float64,
    "string": np.object_,
}


class Ragged(NamedTuple):
    """A ragged column: row i is values[sum(row_lengths[:i]) : sum(row_lengths[:i + 1])]."""

    values: Any  # numpy array [total, *inner], or a Ragged (a list per sequence step)
    row_lengths: np.ndarray

    def rows(self) -> list[Any]:
        """The rows, one array (or Ragged) each."""
        ends = np.cumsum(self.row_lengths)
        starts = ends - self.row_lengths
        if isinstance(self.values, Ragged):
            return [
                self.values.take(a, b) for a, b in zip(starts.tolist(), ends.tolist(), strict=True)
            ]
        return [self.values[a:b] for a, b in zip(starts.tolist(), ends.tolist(), strict=True)]

    def take(self, a: int, b: int) -> Ragged:
        """Rows a to b (not b) as a Ragged of their own."""
        lo = int(self.row_lengths[:a].sum())
        hi = lo + int(self.row_lengths[a:b].sum())
        values = self.values.take(lo, hi) if isinstance(self.values, Ragged) else self.values[lo:hi]
        return Ragged(values, self.row_lengths[a:b])

    def tolist(self) -> list[Any]:
        """Nested Python lists, as `tf.RaggedTensor.to_list()` gives them."""
        return [r.tolist() for r in self.rows()]


def _bytes_values(raw: Raw) -> np.ndarray:
    """A bytes feature's values as an object array of bytes (made in C by pyarrow)."""
    import pyarrow as pa

    offsets = raw.offsets
    n = offsets.shape[0] - 1
    if n == 0:
        return np.empty(0, np.object_)
    base = int(offsets[0])
    data = raw.data[base : int(offsets[-1])]
    array = pa.LargeBinaryArray.from_buffers(
        pa.large_binary(), n, [None, pa.py_buffer(offsets - base), pa.py_buffer(data)]
    )
    return array.to_numpy(zero_copy_only=False)


def _values(raw: Raw, f: StoredFeature) -> np.ndarray:
    """The stored values of a feature: int64, float32, bytes objects, or float64 decoded from
    the bytes of keep_float64 (one value per row, the row's float64s)."""
    if raw.values is not None:
        return raw.values
    if f.spec.encoding == FLOAT64_BYTES:
        base = int(raw.offsets[0])
        return raw.data[base : int(raw.offsets[-1])].view("<f8")
    return _bytes_values(raw)


def _cast(values: np.ndarray, dtype: str) -> np.ndarray:
    target = _DTYPES.get(dtype)
    if target is None:
        raise ValueError(f"dtype {dtype!r} is not one this reader knows (a newer writer?)")
    if values.dtype == target:
        return values
    if target is np.bool_:
        return values != 0
    return values.astype(target)


def _zero(kind: str, dtype: str) -> Any:
    return b"" if kind == BYTES and dtype == "string" else 0


def _nested(
    values: np.ndarray, counts: np.ndarray, shape: tuple[int, ...], partitions: dict[int, Raw]
) -> Ragged:
    """A list ragged below its first level, from the inside out: each level that varies cut
    by its row lengths, each fixed one by its size (the innermost fixed dims as array dims)."""
    inner: Any = values
    per_row = counts  # how many elements of the level being built each row holds
    for k in range(len(shape) - 1, 0, -1):
        if shape[k] >= 0 and not isinstance(inner, Ragged):
            inner = inner.reshape(-1, *shape[k:]) if k == len(shape) - 1 else inner
            per_row = per_row // max(shape[k], 1)
        elif shape[k] >= 0:
            groups = int(inner.row_lengths.shape[0]) // max(shape[k], 1)
            inner = Ragged(inner, np.full(groups, shape[k], np.int64))
            per_row = per_row // max(shape[k], 1)
        else:
            if not isinstance(inner, Ragged) and k < len(shape) - 1:
                inner = inner.reshape(-1, *shape[k + 1 :])
            inner = Ragged(inner, partitions[k].values)
            per_row = np.maximum(partitions[k].counts, 0)
    return Ragged(inner, per_row)


def _peel(value: Any, levels: int) -> tuple[np.ndarray, list[Any]]:
    """The first `levels` list levels of a restored value (a `Ragged`, or an array
    [batch, *shape]): per batch row, where its items of level `levels` start and end among
    all of the batch's (n + 1 bounds), and each level's row lengths (an array of a `Ragged`
    level, an int of an array dim), outermost first."""
    n = value.row_lengths.shape[0] if isinstance(value, Ragged) else value.shape[0]
    bounds = np.arange(n + 1, dtype=np.int64)
    peeled: list[Any] = []
    t = value
    for _ in range(levels):
        if isinstance(t, Ragged):
            splits = np.zeros(t.row_lengths.shape[0] + 1, np.int64)
            np.cumsum(t.row_lengths, out=splits[1:])
            bounds = splits[bounds]
            peeled.append(t.row_lengths)
            t = t.values
        else:
            size = int(t.shape[1])
            bounds = bounds * size
            peeled.append(size)
            t = t.reshape(-1, *t.shape[2:])
    return bounds, peeled


def _inner_mask(value: Any, positions: Raw, level: int, where: str, name: str) -> Any:
    """The bool mask of a list's level-`level` items, nested as the value's first `level`
    levels, False at the positions of the record's `NAME__nulls_K` (each counted among the
    row's items of that level)."""
    bounds, peeled = _peel(value, level)
    mask = np.ones(int(bounds[-1]), np.bool_)
    counts = np.maximum(positions.counts, 0)
    rows = np.repeat(np.arange(counts.shape[0]), counts)
    at = positions.values
    items = (bounds[1:] - bounds[:-1])[rows]
    bad = np.flatnonzero((at < 0) | (at >= items))
    if bad.size:
        i = int(bad[0])
        raise RecordError(
            f"{where}: record {int(rows[i])} of the batch: feature {name!r}: a null at position "
            f"{int(at[i])} of a row with {int(items[i])} items there"
        )
    mask[bounds[rows] + at] = False
    for step in reversed(peeled):
        if isinstance(step, int):
            mask = mask.reshape(-1, step, *mask.shape[1:])
        else:
            mask = Ragged(mask, step)
    return mask


def _restore(
    raw: Raw,
    f: StoredFeature,
    null_masks: bool,
    out: dict[str, Any],
    partitions: dict[int, Raw] | None = None,
    nulls: dict[int, Raw] | None = None,
    where: str = "",
) -> None:
    """One feature's raw values of a batch (or of the steps of a batch) -> what load_dataset
    gives, into `out` (with its masks where it has them). `partitions`: the raw row lengths
    of each level that varies below the first (FeatureSpec.partition_levels); `nulls`: the
    raw null positions of each level whose items held nulls, which make the
    `NAME__present_K` masks; given (an Example's feature, not a step's), a nullable list
    that comes back ragged has its `NAME__present` too."""
    _restore_value(raw, f, null_masks, out, partitions)
    if not null_masks or nulls is None:
        return
    if f.list_mask:
        out[f.name + PRESENT_SUFFIX] = raw.counts >= 0  # absent: null; present, empty: []
    value = out[f.name]
    for level, positions in sorted(nulls.items()):
        mask = _inner_mask(value, positions, level, where, nulls_key(f.name, level))
        if not isinstance(value, Ragged) and f.nullable:  # a null row's items: none a value
            mask[raw.counts < 0] = False
        out[f"{f.name}{PRESENT_SUFFIX}_{level}"] = mask


def _restore_value(
    raw: Raw,
    f: StoredFeature,
    null_masks: bool,
    out: dict[str, Any],
    partitions: dict[int, Raw] | None = None,
) -> None:
    spec, counts = f.spec, raw.counts
    n = counts.shape[0]
    present = counts > 0
    values = _values(raw, f)
    float64_bytes = spec.encoding == FLOAT64_BYTES
    if partitions:
        out[spec.name] = _nested(_cast(values, spec.dtype), np.maximum(counts, 0), spec.shape,
                                 partitions)  # fmt: skip
        return
    if f.ragged:
        inner = () if spec.shape is None else tuple(spec.shape[1:])
        per = math.prod(inner)
        if float64_bytes:  # a row's float64s are one bytes value: its length says how many
            lengths = np.zeros(n, np.int64)
            lengths[present] = np.diff(raw.offsets) // 8 if raw.offsets.size > 1 else 0
        else:
            lengths = np.maximum(counts, 0)
        values = values.reshape(-1, *inner) if inner else values
        out[spec.name] = Ragged(_cast(values, spec.dtype), lengths // max(per, 1))
        return
    shape = tuple(spec.shape)
    size = math.prod(shape)
    if not f.nullable:
        out[spec.name] = _cast(values.reshape(n, *shape), spec.dtype)
        return
    # nullable: a present row holds `size` values (one bytes value of size float64s)
    dtype = _DTYPES.get(spec.dtype, np.object_)
    filled = np.full((n, size), _zero(spec.kind, spec.dtype), dtype=dtype)
    if size:
        rows = np.flatnonzero(present)
        filled[rows] = _cast(values, spec.dtype).reshape(rows.shape[0], size)
    out[spec.name] = filled.reshape(n, *shape) if shape else filled.reshape(n)
    if null_masks:
        out[spec.name + PRESENT_SUFFIX] = present if size else np.zeros(n, np.bool_)


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
        _restore(raw, f, layout.null_masks, out, partitions.get(f.name), inner, where)
    for steps, f in zip(lists, layout.steps, strict=True):
        flat: dict[str, Any] = {}
        _restore(steps.raw, f, layout.null_masks, flat)
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
