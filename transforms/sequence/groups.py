"""Grouping rows into sequences: the hash of a row's key (its bucket and its split), the order
of the rows (by key, then `order_by`, ties in input order), where each group starts, and which
groups break the rule that a context column has one value per sequence.

Vectorized over Arrow arrays (pyarrow.compute) and numpy; the byte comparison is compiled.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from numba import njit

from transforms.encode.columns import to_kernel_column
from transforms.encode.kernel.example import encode_records
from transforms.encode.schema import FeatureSpec
from transforms.hashing import hash_ranges

__all__ = ["context_mismatches", "group_bounds", "group_order", "key_hashes"]


def _column(table: pa.Table, name: str) -> pa.Array:
    column = table.column(name)
    arr = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    return arr.dictionary_decode() if pa.types.is_dictionary(arr.type) else arr


def _value_hashes(arr: pa.Array, salt: str) -> np.ndarray:
    """The project's hash of each value's bytes (an integer's or a date's decimal text; a
    null is no bytes, as in the split key)."""
    if not (pa.types.is_string(arr.type) or pa.types.is_binary(arr.type)):
        if pa.types.is_temporal(arr.type):  # its integer storage (days, ticks)
            arr = arr.view(pa.int32() if arr.type.bit_width == 32 else pa.int64())
        arr = pc.cast(arr, pa.string())
    arr = pc.fill_null(pc.cast(arr, pa.large_binary()), b"")
    _, offsets_buf, data_buf = arr.buffers()
    offsets = np.frombuffer(offsets_buf, np.int64)[arr.offset : arr.offset + len(arr) + 1]
    data = np.frombuffer(data_buf, np.uint8) if data_buf is not None else np.empty(0, np.uint8)
    return hash_ranges(offsets[:-1], offsets[1:], data, salt)


def key_hashes(table: pa.Table, names: Sequence[str], salt: str) -> np.ndarray:
    """uint64 per row from the key columns `names`: with one column the split key's hash of
    its value (transforms/split/assign.py), with several the hash of their hashes."""
    if len(names) == 1:
        return _value_hashes(_column(table, names[0]), salt)
    parts = np.stack([_value_hashes(_column(table, n), "") for n in names], axis=1)
    data = np.ascontiguousarray(parts, dtype="<u8").view(np.uint8).reshape(-1)
    width = 8 * len(names)
    starts = np.arange(table.num_rows, dtype=np.int64) * width
    return hash_ranges(starts, starts + width, data, salt)


def group_order(table: pa.Table, group_by: Sequence[str], order_by: str | None) -> np.ndarray:
    """The row order of the sequences: by the key columns, then `order_by` (nulls last), ties
    in the table's order (a stable sort)."""
    keys = [(n, "ascending") for n in group_by]
    if order_by is not None:
        keys.append((order_by, "ascending"))
    plain = pa.table({n: _column(table, n) for n, _ in keys})
    order = pc.sort_indices(plain, sort_keys=keys)  # nulls at the end (the default)
    return order.to_numpy(zero_copy_only=False).astype(np.int64)


def group_bounds(table: pa.Table, group_by: Sequence[str]) -> np.ndarray:
    """Where each group starts in `table` (already in group order), and the row count last:
    group g is rows [bounds[g], bounds[g+1]). Nulls of a key make one group, as in SQL."""
    n = table.num_rows
    new = np.zeros(n, dtype=bool)
    if n:
        new[0] = True
    for name in group_by:
        arr = _column(table, name)
        if n < 2:
            break
        a, b = arr.slice(1), arr.slice(0, n - 1)
        null_a = a.is_null().to_numpy(zero_copy_only=False)
        null_b = b.is_null().to_numpy(zero_copy_only=False)
        differ = pc.fill_null(pc.not_equal(a, b), False).to_numpy(zero_copy_only=False)
        new[1:] |= differ | (null_a != null_b)
    return np.append(np.flatnonzero(new), n).astype(np.int64)


@njit(cache=True)
def _first_differing(buffer, offsets, bounds):  # noqa: ANN001, ANN202
    """Per group, the first row whose bytes differ from the group's first row (-1: none)."""
    out = np.full(bounds.shape[0] - 1, -1, dtype=np.int64)
    for g in range(bounds.shape[0] - 1):
        a0, a1 = offsets[bounds[g]], offsets[bounds[g] + 1]
        for i in range(bounds[g] + 1, bounds[g + 1]):
            b0, b1 = offsets[i], offsets[i + 1]
            same = b1 - b0 == a1 - a0
            k = 0
            while same and k < a1 - a0:
                same = buffer[a0 + k] == buffer[b0 + k]
                k += 1
            if not same:
                out[g] = i
                break
    return out


def context_mismatches(
    table: pa.Table,
    bounds: np.ndarray,
    specs: Sequence[FeatureSpec],
    source: str,
    rows: np.ndarray,
) -> list[tuple[int, str, int]]:
    """(group, feature name, first row that differs) for each group where a context feature's
    written value (bytes as the encoder writes them, so a null differs from a zero) is not the
    same in every row; the first differing feature in name order. May raise ConversionError
    (a value that cannot be written), naming `source` and `rows[index]`."""
    found: dict[int, tuple[str, int]] = {}
    for spec in specs:
        column, _ = to_kernel_column(table, spec, source, 0, rows)
        buffer, offsets = encode_records([column], table.num_rows)
        for g, i in enumerate(_first_differing(buffer, offsets, bounds).tolist()):
            if i >= 0 and g not in found:
                found[g] = (spec.name, i)
    return [(g, name, i) for g, (name, i) in sorted(found.items())]
