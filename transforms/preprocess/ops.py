"""Row-local preprocessing as plain, vectorized functions over Arrow arrays and tables.

Each function takes a column (a pa.Array) and returns a new column with the same number of
rows; nothing here loops over rows in Python. Null handling is part of each contract and is
listed in the step table of docs/preprocessing.md. A value that cannot be transformed raises
`RowError` with its index in the batch (the caller turns it into file, row and column).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from transforms.hashing import hash_column

__all__ = [
    "RowError",
    "bucketize",
    "cast",
    "clip",
    "column",
    "drop",
    "fill_missing",
    "hash_bucket",
    "log1p",
    "lower",
    "min_max",
    "missing",
    "one_hot",
    "rename",
    "reshape",
    "select",
    "set_column",
    "split_text",
    "strip",
    "vocabulary_ids",
    "zscore",
]


class RowError(ValueError):
    """A value a step cannot transform: `index` is its row in the batch."""

    def __init__(self, index: int, message: str) -> None:
        super().__init__(message)
        self.index = int(index)
        self.message = message


# ----------------------------------------------------------------------------- tables


def column(table: pa.Table, name: str) -> pa.Array:
    """One column as a single array, dictionaries decoded."""
    arr = table.column(name)
    arr = arr.combine_chunks() if isinstance(arr, pa.ChunkedArray) else arr
    if pa.types.is_dictionary(arr.type):
        arr = arr.dictionary_decode()
    return arr


def set_column(table: pa.Table, name: str, values: pa.Array) -> pa.Table:
    """Replace the column `name` in place, or append it when there is none."""
    if name in table.column_names:
        return table.set_column(table.column_names.index(name), name, values)
    return table.append_column(name, values)


def select(table: pa.Table, names: Sequence[str]) -> pa.Table:
    return table.select(list(names))


def drop(table: pa.Table, names: Sequence[str]) -> pa.Table:
    return table.drop_columns([n for n in names if n in table.column_names])


def rename(table: pa.Table, mapping: Mapping[str, str]) -> pa.Table:
    """Rename columns; a name not in the table is skipped, a new name replaces a column."""
    present = {old: new for old, new in mapping.items() if old in table.column_names}
    replaced = [n for n in present.values() if n in table.column_names and n not in present]
    table = table.drop_columns(replaced)
    return table.rename_columns([present.get(n, n) for n in table.column_names])


# ----------------------------------------------------------------------------- columns


def _null(t: pa.DataType) -> pa.Scalar:
    return pa.scalar(None, t)


def _float64(arr: pa.Array) -> pa.Array:
    return arr if pa.types.is_float64(arr.type) else pc.cast(arr, pa.float64())


def missing(arr: pa.Array) -> pa.Array:
    """True where a value is missing: null, or NaN in a float column (never null itself)."""
    if pa.types.is_floating(arr.type):
        return pc.is_null(arr, nan_is_null=True)
    return pc.is_null(arr)


def cast(arr: pa.Array, to: pa.DataType) -> pa.Array:
    """A safe cast: a value that does not convert exactly raises pa.ArrowInvalid."""
    return pc.cast(arr, to, safe=True)


def fill_missing(arr: pa.Array, value: pa.Scalar) -> pa.Array:
    """Missing values (null; NaN in a float column) replaced by `value` (of the output type)."""
    if arr.type != value.type:
        arr = pc.cast(arr, value.type)
    return pc.if_else(missing(arr), value, arr)


def clip(arr: pa.Array, low: pa.Scalar | None, high: pa.Scalar | None) -> pa.Array:
    """Values below `low` become `low`, above `high` become `high`; null and NaN stay."""
    if low is not None:
        arr = pc.if_else(pc.less(arr, low), low, arr)
    if high is not None:
        arr = pc.if_else(pc.greater(arr, high), high, arr)
    return arr


def log1p(arr: pa.Array) -> pa.Array:
    """ln(1 + x) as float64; null where x <= -1 (outside the domain) and where x is null."""
    x = _float64(arr)
    return pc.if_else(pc.less_equal(x, -1), _null(pa.float64()), pc.log1p(x))


def _with_nulls(values: np.ndarray, valid: np.ndarray, t: pa.DataType) -> pa.Array:
    return pa.array(values, type=t, mask=None if valid.all() else ~valid)


def hash_bucket(arr: pa.Array, num_buckets: int) -> pa.Array:
    """int64 bucket in [0, num_buckets): the stable hash (transforms/hashing.py) mod num_buckets."""
    valid = arr.is_valid().to_numpy(zero_copy_only=False)
    buckets = (hash_column(arr) % np.uint64(num_buckets)).astype(np.int64)
    return _with_nulls(buckets, valid, pa.int64())


def lower(arr: pa.Array) -> pa.Array:
    return pc.utf8_lower(arr)


def strip(arr: pa.Array, chars: str | None = None) -> pa.Array:
    """Leading and trailing whitespace (or any of `chars`) removed."""
    if chars is None:
        return pc.utf8_trim_whitespace(arr)
    return pc.utf8_trim(arr, characters=chars)


def split_text(arr: pa.Array, sep: str | None = None) -> pa.Array:
    """Each string as a list of tokens, like Python's str.split(sep).

    Without `sep`: split on runs of whitespace, no empty tokens ("" -> []). With `sep`: split on
    every occurrence, empty tokens kept ("" -> [""], "a,,b" -> ["a", "", "b"]). Null -> null.
    """
    if sep is not None:
        return pc.split_pattern(arr, pattern=sep)
    parts = pc.utf8_split_whitespace(arr)
    tokens = pc.list_flatten(parts)
    keep = pc.greater(pc.utf8_length(tokens), 0).to_numpy(zero_copy_only=False)
    lengths = pc.fill_null(pc.list_value_length(parts), 0).to_numpy(zero_copy_only=False)
    kept_before = np.concatenate([[0], np.cumsum(keep, dtype=np.int64)])
    ends = np.cumsum(lengths, dtype=np.int64)
    offsets = kept_before[np.concatenate([[0], ends])]
    mask = parts.is_null().to_numpy(zero_copy_only=False)
    list_type = pa.list_(tokens.type) if pa.types.is_list(parts.type) else parts.type
    return pa.ListArray.from_arrays(
        pa.array(offsets.astype(np.int32)),
        tokens.filter(pa.array(keep)),
        type=list_type,
        mask=pa.array(mask) if mask.any() else None,
    )


def _is_list(t: pa.DataType) -> bool:
    return pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t)


def _flat_rows(arr: pa.Array) -> tuple[pa.Array, np.ndarray]:
    """The innermost values of a (nested) list column and each row's number of them."""
    per_row = pc.fill_null(pc.list_value_length(arr), 0).to_numpy(zero_copy_only=False)
    per_row = per_row.astype(np.int64)
    values = pc.list_flatten(arr)
    while _is_list(values.type):
        inner = pc.fill_null(pc.list_value_length(values), 0).to_numpy(zero_copy_only=False)
        inner_sums = np.concatenate([[0], np.cumsum(inner, dtype=np.int64)])
        bounds = np.concatenate([[0], np.cumsum(per_row)])
        per_row = inner_sums[bounds[1:]] - inner_sums[bounds[:-1]]
        values = pc.list_flatten(values)
    return values, per_row


def reshape(arr: pa.Array, shape: Sequence[int]) -> pa.Array:
    """A list column (any nesting) as a fixed array of `shape`, row-major; null -> null.

    A row whose number of values is not prod(shape) raises RowError.
    """
    size = int(np.prod(shape))
    valid = arr.is_valid().to_numpy(zero_copy_only=False)
    values, per_row = _flat_rows(arr)
    bad = np.flatnonzero(valid & (per_row != size))
    if bad.size:
        i = int(bad[0])
        raise RowError(i, f"a list of {per_row[i]} values cannot take the shape {list(shape)}")
    starts = np.concatenate([[0], np.cumsum(per_row)])[:-1]
    index = (starts[:, None] + np.arange(size, dtype=np.int64)[None, :]).reshape(-1)
    index_valid = np.repeat(valid, size)
    taken = pc.take(values, _with_nulls(index, index_valid, pa.int64()))
    out: pa.Array = taken
    for dim in reversed(shape[1:]):
        out = pa.FixedSizeListArray.from_arrays(out, int(dim))
    return pa.FixedSizeListArray.from_arrays(
        out, int(shape[0]), mask=None if valid.all() else pa.array(~valid)
    )


def one_hot(arr: pa.Array, depth: int, dtype: pa.DataType) -> pa.Array:
    """An integer id as a fixed array of `depth` zeros with a one at the id; null -> null.

    An id outside [0, depth) raises RowError.
    """
    n = len(arr)
    valid = arr.is_valid().to_numpy(zero_copy_only=False)
    ids = pc.fill_null(pc.cast(arr, pa.int64()), 0).to_numpy(zero_copy_only=False)
    bad = np.flatnonzero(valid & ((ids < 0) | (ids >= depth)))
    if bad.size:
        i = int(bad[0])
        raise RowError(i, f"id {ids[i]} is outside [0, {depth}) (one_hot depth {depth})")
    flat = np.zeros(n * depth, dtype=pa.array([], dtype).to_numpy().dtype)
    rows = np.flatnonzero(valid)
    flat[rows * depth + ids[rows]] = 1
    return pa.FixedSizeListArray.from_arrays(
        pa.array(flat, dtype), depth, mask=None if valid.all() else pa.array(~valid)
    )


def zscore(arr: pa.Array, mean: float | None, std: float | None) -> pa.Array:
    """(x - mean) / std as float64; x - mean when std is 0; null when no mean was fitted."""
    x = _float64(arr)
    if mean is None:
        return pa.nulls(len(x), pa.float64())
    centered = pc.subtract(x, mean)
    return pc.divide(centered, std) if std else centered


def min_max(
    arr: pa.Array, low: float | None, high: float | None, out_low: float, out_high: float
) -> pa.Array:
    """x scaled from the fitted [low, high] to [out_low, out_high] (float64, not clipped).

    A constant column (low == high) maps to out_low; null when nothing was fitted.
    """
    x = _float64(arr)
    if low is None or high is None:
        return pa.nulls(len(x), pa.float64())
    if high == low:
        return pc.add(pc.multiply(x, 0.0), float(out_low))
    scale = (out_high - out_low) / (float(high) - float(low))
    return pc.add(pc.multiply(pc.subtract(x, float(low)), scale), float(out_low))


def vocabulary_ids(arr: pa.Array, vocabulary: pa.Array, num_oov_buckets: int) -> pa.Array:
    """int64 id of each value in `vocabulary` (its index); null -> null.

    A value not in the vocabulary gets len(vocabulary) + hash(value) % num_oov_buckets, or -1
    when num_oov_buckets is 0. Integers are looked up by their decimal text.
    """
    keys = pc.cast(arr, pa.string()) if pa.types.is_integer(arr.type) else arr
    if keys.type != vocabulary.type:
        vocabulary = pc.cast(vocabulary, keys.type)
    found = pc.index_in(keys, value_set=vocabulary)
    valid = arr.is_valid().to_numpy(zero_copy_only=False)
    known = found.is_valid().to_numpy(zero_copy_only=False)
    ids = pc.fill_null(pc.cast(found, pa.int64()), -1).to_numpy(zero_copy_only=False).copy()
    oov = valid & ~known
    if num_oov_buckets and oov.any():
        hashes = hash_column(keys.filter(pa.array(oov)))
        ids[oov] = len(vocabulary) + (hashes % np.uint64(num_oov_buckets)).astype(np.int64)
    return _with_nulls(ids, valid, pa.int64())


def bucketize(arr: pa.Array, boundaries: Sequence[float]) -> pa.Array:
    """int64 bucket: the number of boundaries strictly below x (bucket i holds
    boundaries[i-1] < x <= boundaries[i]); null and NaN -> null."""
    gone = missing(arr).to_numpy(zero_copy_only=False)
    x = pc.fill_null(_float64(arr), 0.0).to_numpy(zero_copy_only=False)
    cuts = np.asarray(boundaries, dtype=np.float64)
    buckets = np.searchsorted(cuts, x, side="left").astype(np.int64)
    return _with_nulls(buckets, ~gone, pa.int64())
