"""Arrow column -> the encoder kernel's flat numpy form, one FeatureSpec at a time.

Everything here is vectorized with pyarrow.compute and numpy; no Python object per row.
Errors name the source file, the row (0-based data row in that file) and the column.
"""

from __future__ import annotations

import decimal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from transforms.encode.features import nulls_key
from transforms.encode.kernel.example import KernelColumn
from transforms.encode.lists import flatten_lists, value_place
from transforms.encode.schema import (
    BYTES,
    FLOAT,
    INT64,
    ConversionError,
    FeatureSpec,
    default_scalar,
)

__all__ = [
    "decimal_text",
    "int64_values",
    "leaf_array",
    "to_kernel_column",
    "to_kernel_columns",
]

_MS_PER_DAY = 86_400_000


def _relisted(arr: pa.Array, child: pa.Array) -> pa.Array:
    """`child` (an array over the elements of the list or map array `arr`, unsliced) as a list
    array with `arr`'s rows: its offsets and its nulls."""
    offsets = arr.offsets.to_numpy(zero_copy_only=False)  # a copy: from_arrays takes no slice
    mask = arr.is_null() if arr.null_count else None
    if pa.types.is_large_list(arr.type):
        return pa.LargeListArray.from_arrays(pa.array(offsets, pa.int64()), child, mask=mask)
    return pa.ListArray.from_arrays(pa.array(offsets, pa.int32()), child, mask=mask)


def _field(arr: pa.Array, name: str) -> pa.Array:
    """One step down a leaf's path (schema.py `leaf_paths`): a struct's field (the struct's
    nulls carried down), a map's keys or values as a list per row, or that of each element of
    a list of structs or maps, as a list per row."""
    t = arr.type
    if pa.types.is_struct(t):
        return pc.struct_field(arr, name)
    if pa.types.is_map(t):
        return _relisted(arr, arr.keys if name == "key" else arr.items)
    if pa.types.is_fixed_size_list(t):  # as a variable list: its lengths are still checked
        arr = pc.cast(arr, pa.list_(t.value_field))
    return _relisted(arr, _field(arr.values, name))


def leaf_array(table: pa.Table | pa.RecordBatch, path: tuple[str, ...]) -> pa.Array:
    """The column at `path` (struct fields, map keys or values, the fields of a list of
    structs: schema.py `leaf_paths`); a struct's nulls carry down to its leaves; a dictionary
    decoded, a string or binary view as a large string or binary."""
    column = table.column(path[0])
    if isinstance(column, pa.ChunkedArray):
        # One chunk (a slice of a table) needs no concatenation, which would copy it.
        arr = column.chunk(0) if column.num_chunks == 1 else column.combine_chunks()
    else:
        arr = column
    for name in path[1:]:
        arr = _field(arr, name)
    if pa.types.is_dictionary(arr.type):
        arr = arr.dictionary_decode()
    if pa.types.is_string_view(arr.type) or pa.types.is_binary_view(arr.type):
        # Views have few compute kernels (no filter, no take): their plain large form has all.
        large = pa.large_string() if pa.types.is_string_view(arr.type) else pa.large_binary()
        arr = arr.cast(large)
    return arr


def _int64_values(leaf: pa.Array) -> np.ndarray:
    """`leaf` as the int64 values the records hold (a null is 0: the kernel skips it).

    A uint64 is stored as its 64 bits (two's complement: 2**64 - 1 is -1), which the readers
    turn back into the same uint64; times and durations are their count of the type's unit.
    """
    t = leaf.type
    if pa.types.is_date64(t):
        ms = pc.fill_null(pc.cast(leaf, pa.int64()), 0).to_numpy(zero_copy_only=False)
        return np.floor_divide(ms, _MS_PER_DAY)
    if pa.types.is_uint64(t):
        leaf = pc.cast(leaf, pa.int64(), safe=False)
    elif pa.types.is_date32(t) or pa.types.is_time32(t):
        leaf = pc.cast(pc.cast(leaf, pa.int32()), pa.int64())
    elif not pa.types.is_int64(t):
        leaf = pc.cast(leaf, pa.int64())
    if leaf.null_count:
        leaf = pc.fill_null(leaf, 0)
    return leaf.to_numpy(zero_copy_only=False).astype(np.int64, copy=False)


def _decimal_strings(leaf: pa.Array) -> pa.Array:
    """Decimals as exact plain strings: "0.00000010", never Arrow's scientific "1.0E-7"."""
    text = pc.cast(leaf, pa.string())
    scientific = pc.fill_null(pc.match_substring(text, "E"), False)
    if not pc.any(scientific).as_py():
        return text
    rows = np.flatnonzero(scientific.to_numpy(zero_copy_only=False))
    plain = [format(decimal.Decimal(text[int(i)].as_py()), "f") for i in rows]
    return pc.replace_with_mask(text, scientific, pa.array(plain, pa.string()))


def decimal_text(leaf: pa.Array) -> pa.Array:
    """Decimals as the text the records hold (exact plain strings)."""
    return _decimal_strings(leaf)


def int64_values(leaf: pa.Array) -> np.ndarray:
    """An int64-kind leaf as the int64 values the records hold (a null is 0)."""
    return _int64_values(leaf)


def _bytes_buffers(leaf: pa.Array, fill: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """A bytes leaf's value offsets and data; with `fill` (a list's values) a null element is
    an empty value (a null's slot may span bytes in Arrow)."""
    t = leaf.type
    if pa.types.is_decimal(t):
        leaf = _decimal_strings(leaf)
    if pa.types.is_fixed_size_binary(t):
        leaf = pc.cast(leaf, pa.binary())
    if not pa.types.is_large_binary(leaf.type):
        leaf = pc.cast(leaf, pa.large_binary())
    if fill and leaf.null_count:
        leaf = pc.fill_null(leaf, pa.scalar(b"", pa.large_binary()))
    _, offsets_buf, data_buf = leaf.buffers()
    value_off = np.frombuffer(offsets_buf, dtype=np.int64)[
        leaf.offset : leaf.offset + len(leaf) + 1
    ]
    data = (
        np.frombuffer(data_buf, dtype=np.uint8) if data_buf is not None else np.empty(0, np.uint8)
    )
    return value_off, data


def to_kernel_column(
    table: pa.Table | pa.RecordBatch,
    spec: FeatureSpec,
    source: str,
    first_row: int,
    rows: np.ndarray | None = None,
) -> tuple[KernelColumn, int]:
    """The feature's values column in kernel form, and how many rows have no value (null).

    Errors name the source row: `first_row` + index, or `rows[index]` when rows is given.
    A column ragged below its first level has row-lengths features too, and a list that holds
    nulls their positions: `to_kernel_columns`. Here (SequenceExamples, split keys) a null
    inside a list is an error naming its row.
    """
    columns, nulls = to_kernel_columns(table, spec, source, first_row, rows)
    held = [c for c in columns[1:] if c.key.tobytes().decode("utf-8") in spec.null_keys]
    if held:
        first = min(int(np.argmax(c.valid)) for c in held)
        where = value_place(source, first_row, first, spec.name, rows)
        raise ConversionError(f"{where}: a list holds a null element")
    return columns[0], nulls


def to_kernel_columns(
    table: pa.Table | pa.RecordBatch,
    spec: FeatureSpec,
    source: str,
    first_row: int,
    rows: np.ndarray | None = None,
) -> tuple[list[KernelColumn], int]:
    """Every Example feature of the column in kernel form (its values, then the lengths of
    each level that varies below the first: `FeatureSpec.feature_keys`, then the positions of
    the null items of each level that has some in this batch: `nulls_key`, present only in
    the rows that have such nulls), and how many rows have no value (null).

    A null inside a list is written as the type's zero (a null value), an empty list (a null
    list of a level that varies) or a list of null items (a fixed dim), and its position
    under `nulls_key(name, level)`; a list without nulls costs one look at Arrow's null count
    per level."""
    arr = leaf_array(table, spec.path)
    n = len(arr)
    if spec.null_policy == "default" and arr.null_count:
        arr = pc.fill_null(arr, default_scalar(spec.default, arr.type))
    valid = arr.is_valid().to_numpy(zero_copy_only=False) if arr.null_count else None
    nulls = 0 if valid is None else n - int(np.count_nonzero(valid))
    if nulls and spec.null_policy == "fail":
        first = int(np.flatnonzero(~valid)[0])
        raise ConversionError(
            f"{value_place(source, first_row, first, spec.name, rows)}: null value "
            "(null_policy is 'fail')"
        )
    # row_off None: a scalar, one value per row, which the kernel reads without row offsets.
    leaf, row_off, partitions, null_items = arr, None, [], []
    if spec.shape != ():
        has_row = np.ones(n, bool) if valid is None else valid
        leaf, row_off, partitions, null_items = flatten_lists(
            arr, has_row, spec, source, first_row, rows
        )
        # Only the elements [row_off[0], row_off[-1]) are read; slice so no conversion sees
        # the rest.
        start = int(row_off[0])
        leaf = leaf.slice(start, int(row_off[-1]) - start)
        row_off = row_off - start

    if spec.encoding == "float64_bytes":
        values = pc.fill_null(pc.cast(leaf, pa.float64()), 0.0).to_numpy(zero_copy_only=False)
        data = np.ascontiguousarray(values, dtype="<f8").view(np.uint8)
        bounds = np.arange(n + 1, dtype=np.int64) if row_off is None else row_off
        column = KernelColumn(BYTES, spec.name, valid, None, value_off=bounds * 8, data=data)
    elif spec.kind == INT64:
        values = _int64_values(leaf)
        column = KernelColumn(INT64, spec.name, valid, row_off, values=values)
    elif spec.kind == FLOAT:
        if leaf.type != pa.float32():
            leaf = pc.cast(leaf, pa.float32(), safe=False)
        if leaf.null_count:
            leaf = pc.fill_null(leaf, 0.0)
        values = np.ascontiguousarray(leaf.to_numpy(zero_copy_only=False), "<f4")
        column = KernelColumn(FLOAT, spec.name, valid, row_off, values=values)
    else:
        value_off, data = _bytes_buffers(leaf, fill=row_off is not None)
        column = KernelColumn(BYTES, spec.name, valid, row_off, value_off=value_off, data=data)
    lengths = [
        KernelColumn(INT64, key, valid, offsets, values=values)
        for key, (_, values, offsets) in zip(spec.feature_keys[1:], partitions, strict=True)
    ]
    positions = [
        KernelColumn(INT64, nulls_key(spec.name, f.level), f.rows, f.row_off, values=f.positions)
        for f in null_items
    ]
    return [column, *lengths, *positions], nulls
