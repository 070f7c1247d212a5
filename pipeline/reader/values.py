"""A feature's raw values of a batch (decode.py's `Raw`) as numpy, value for value what
`load_dataset` gives as tensors (the module docstring of arrays.py says what comes back as
what): the dtype cast, fixed arrays shaped, nullable ones filled with their mask, lists as
`Ragged` (nested for lists ragged below their first level), and the `NAME__present_K` masks
of a list's null items. arrays.py (`iter_batches`) and index.py (`read_record`) call
`restore_feature` per feature.
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import numpy as np

from pipeline.output.manifest import StoredFeature
from pipeline.reader.decode import Raw, RecordError
from transforms.encode.features import BYTES, FLOAT64_BYTES, nulls_key

__all__ = ["PRESENT_SUFFIX", "Ragged", "restore_feature"]

PRESENT_SUFFIX = "__present"

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


def restore_feature(
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
