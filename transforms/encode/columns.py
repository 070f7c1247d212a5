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
from transforms.encode.schema import (
    BYTES,
    FLOAT,
    INT64,
    ConversionError,
    FeatureSpec,
    default_scalar,
    is_list_type,
)

__all__ = [
    "NullItems",
    "decimal_text",
    "infer_shape",
    "int64_values",
    "leaf_array",
    "null_positions",
    "row_lengths_array",
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


def _where(
    source: str, first_row: int, index: int, name: str, rows: np.ndarray | None = None
) -> str:
    """Where a value is: `rows` (when rows were dropped) maps batch index -> source row."""
    row = first_row + int(index) if rows is None else int(rows[int(index)])
    return f"{source}: row {row}: column {name!r}"


def _list_step(arr: pa.Array, off: np.ndarray) -> tuple[pa.Array, np.ndarray]:
    """Descend one list level: the child array and, per row, offsets into it."""
    if pa.types.is_fixed_size_list(arr.type):
        size = arr.type.list_size
        return arr.values, (off + arr.offset) * size
    return arr.values, arr.offsets.to_numpy()[off]


def infer_shape(arr: pa.Array) -> tuple[int, ...] | None:
    """The shape of a nested list column, from a batch of it: per list level, the length every
    list of that level has in the batch, or -1 where the lengths differ, are all 0 or there is
    no list of that level to look at; a fixed-size level its size. None if every value is
    null."""
    if arr.null_count == len(arr):
        return None
    shape: list[int] = []
    lists = arr.filter(arr.is_valid())
    while is_list_type(lists.type):
        if pa.types.is_fixed_size_list(lists.type):
            shape.append(lists.type.list_size)
        else:
            lengths = pc.list_value_length(lists).drop_null().to_numpy(zero_copy_only=False)
            same = lengths.size > 0 and lengths[0] > 0 and bool((lengths == lengths[0]).all())
            shape.append(int(lengths[0]) if same else -1)
        lists = pc.list_flatten(lists)
        lists = lists.filter(lists.is_valid()) if lists.null_count else lists
    return tuple(shape)


def row_lengths_array(arr: pa.Array, level: int) -> pa.Array:
    """Per row of the list column `arr`, the lengths of its level-`level` lists (level 1: the
    lists inside the row's list), as a list<int64> column, null where the row is null: the
    values of the row-lengths feature `row_lengths_key(name, level)`."""
    lists, parents = arr, np.arange(len(arr), dtype=np.int64)
    for _ in range(level):
        inner = pc.list_parent_indices(lists).to_numpy(zero_copy_only=False).astype(np.int64)
        parents = parents[inner]
        lists = pc.list_flatten(lists)
    lengths = pc.fill_null(pc.cast(pc.list_value_length(lists), pa.int64()), 0)
    offsets = np.zeros(len(arr) + 1, np.int64)
    np.cumsum(np.bincount(parents, minlength=len(arr)), out=offsets[1:])
    mask = arr.is_null() if arr.null_count else None
    return pa.LargeListArray.from_arrays(pa.array(offsets), lengths, mask=mask)


def _row_of(off: np.ndarray, element: int) -> int:
    """The row (batch index) of element `element` (counted from off[0]) of a level whose rows'
    elements are off[i]:off[i + 1]."""
    return int(np.searchsorted(off, off[0] + element, side="right")) - 1


class NullItems:
    """The null items of one list level of a batch (levels: FeatureSpec.list_levels): per row,
    their positions among the row's items of that level, in order; the rows that have some."""

    __slots__ = ("level", "positions", "row_off", "rows")

    def __init__(self, level: int, rows: np.ndarray, positions: np.ndarray, n: int) -> None:
        counts = np.bincount(rows, minlength=n)
        self.level = level
        self.positions = positions
        self.rows = counts > 0
        self.row_off = np.zeros(n + 1, np.int64)
        np.cumsum(counts, out=self.row_off[1:])


def _null_bits(part: pa.Array) -> np.ndarray:
    """Per item of `part`, whether it is null: its validity bitmap's bytes that cover it,
    unpacked (no Arrow array made on the way)."""
    bitmap = part.buffers()[0]
    if bitmap is None or pa.types.is_null(part.type):
        return np.full(len(part), part.null_count > 0, np.bool_)
    first, n = part.offset, len(part)
    raw = np.frombuffer(bitmap, np.uint8, count=(first + n + 7) // 8 - first // 8,
                        offset=first // 8)  # fmt: skip
    bits = np.unpackbits(raw, bitorder="little")[first % 8 : first % 8 + n]
    return bits == 0


def _null_items(
    part: pa.Array, off: np.ndarray, has_row: np.ndarray | None, level: int
) -> tuple[NullItems | None, np.ndarray]:
    """The null items of `part` (a level's items of the batch's rows; row i's are
    off[i]:off[i + 1], off[0] == 0) in rows that have a value (`has_row`, None: every row):
    the Arrow validity bitmap of the batch's items read once, the rows of the nulls found by a
    search of the offsets. (None when there are none, and the index of every null item.)"""
    index = np.flatnonzero(_null_bits(part))
    every = index
    rows = np.searchsorted(off, index, side="right") - 1
    if has_row is not None:
        keep = has_row[rows]
        index, rows = index[keep], rows[keep]
    if not index.size:
        return None, every
    positions = (index - off[rows]).astype(np.int64, copy=False)
    return NullItems(level, rows, positions, len(off) - 1), every


def _null_lists(
    arr: pa.Array, off: np.ndarray, has_row: np.ndarray | None, level: int, dim: int
) -> tuple[pa.Array, np.ndarray, NullItems | None]:
    """A level's lists (`arr`; row i's are off[i]:off[i + 1]) with nulls among them: their
    positions, and the lists as written: a null list an empty one (a dim that varies), or
    `dim` null items (a fixed dim), which the next level finds as nulls in turn, so the
    partitions stay aligned and the shape holds. Arrow gives a null list no items, which is
    an empty list already: only a fixed dim (or a null list that spans items) takes a copy of
    the batch's lists, with the offsets from 0 (returned with them)."""
    part = arr.slice(int(off[0]), int(off[-1] - off[0]))
    if not part.null_count:
        return arr, off, None
    found, every = _null_items(part, off - off[0], has_row, level)
    if dim < 0 and not pa.types.is_fixed_size_list(arr.type):
        bounds = arr.offsets.to_numpy()
        at = off[0] + every
        if not (bounds[at + 1] - bounds[at]).any():
            return arr, off, found
    filled = pc.fill_null(part, pa.scalar([] if dim < 0 else [None] * dim, arr.type))
    return filled, off - off[0], found


def _flatten_lists(
    arr: pa.Array,
    valid: np.ndarray,
    spec: FeatureSpec,
    source: str,
    first_row: int,
    rows: np.ndarray | None = None,
) -> tuple[pa.Array, np.ndarray, list, list[NullItems]]:
    """Per-row offsets into the innermost values, checking every level against the shape; for
    each level k >= 1 whose dim is -1 (FeatureSpec.partition_levels), the lengths of its
    lists with per-row offsets into them: (k, lengths, row offsets); and the null lists of
    each level below the first (`NullItems`), which are written as empty lists or as lists
    of the fixed dim's length of null items."""
    n = len(arr)
    partitions: list[tuple[int, np.ndarray, np.ndarray]] = []
    nulls: list[NullItems] = []
    off = np.arange(n + 1, dtype=np.int64)  # per row: its elements of this level
    every_row = bool(valid.all())
    # Whether each element of this level belongs to a row with a value (a null row's lists
    # are not checked); None when every row has one. An element's row is looked up only for
    # an error (`_row_of`): no row index per element is kept.
    element_has_row: np.ndarray | None = None if every_row else valid
    level = 0
    while is_list_type(arr.type):
        if level > 0 and arr.null_count:
            has_row = None if every_row else valid
            arr, off, found = _null_lists(arr, off, has_row, level, spec.shape[level])
            if found is not None:
                nulls.append(found)
        child, child_off = _list_step(arr, off if level == 0 else np.arange(off[0], off[-1] + 1))
        lengths = np.diff(child_off)
        dim = None if spec.shape is None else spec.shape[level]
        if level > 0 and dim is not None and dim < 0:
            partitions.append((level, lengths.astype(np.int64, copy=False), off - off[0]))
        if dim is not None and dim >= 0:
            wrong = lengths != dim
            bad = np.flatnonzero(wrong if element_has_row is None else wrong & element_has_row)
            if bad.size:
                i = bad[0]
                where = _where(source, first_row, _row_of(off, i), spec.name, rows)
                ragged = [-1] * len(spec.shape)
                raise ConversionError(
                    f"{where}: a list of length {lengths[i]} where shape {list(spec.shape)} "
                    f"needs {dim} at dim {level} (columns.{spec.name}.shape sets the shape; "
                    f"-1 where lengths vary, {ragged} for lists ragged at every level)"
                )
        if is_list_type(child.type) and element_has_row is not None:
            element_has_row = np.repeat(element_has_row, lengths)  # the next level's elements
        if level == 0:
            row_off = child_off
        else:
            row_off = child_off[off - off[0]]
        off = row_off
        arr = child
        level += 1
    if arr.null_count:  # the values: null elements, written as the type's zero
        part = arr.slice(int(off[0]), int(off[-1] - off[0]))
        if part.null_count:
            found, _ = _null_items(part, off - off[0], None if every_row else valid, level)
            if found is not None:
                nulls.append(found)
    return arr, off, partitions, nulls


def _holds_inner_nulls(arr: pa.Array) -> bool:
    """Whether a list column's items may hold a null at some level below its rows (Arrow's
    null counts: a look per level)."""
    t = arr
    while is_list_type(t.type):
        t = t.values
        if t.null_count:
            return True
    return False


def null_positions(arr: pa.Array, spec: FeatureSpec) -> dict[int, pa.Array]:
    """Per list level whose items hold nulls in the batch's rows with a value, the positions
    the feature `nulls_key(name, level)` holds, as a list<int64> per row (null where the row
    has none): what the statistics describe. `arr`: the column (`leaf_array`) of rows that
    encoded."""
    if spec.shape == () or not _holds_inner_nulls(arr):
        return {}
    if spec.null_policy == "default" and arr.null_count:
        arr = pc.fill_null(arr, default_scalar(spec.default, arr.type))
    valid = arr.is_valid().to_numpy(zero_copy_only=False)
    _, _, _, found = _flatten_lists(arr, valid, spec, "", 0)
    return {
        f.level: pa.LargeListArray.from_arrays(
            pa.array(f.row_off), pa.array(f.positions, pa.int64()), mask=pa.array(~f.rows)
        )
        for f in found
    }


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
        where = _where(source, first_row, first, spec.name, rows)
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
            f"{_where(source, first_row, first, spec.name, rows)}: null value "
            "(null_policy is 'fail')"
        )
    # row_off None: a scalar, one value per row, which the kernel reads without row offsets.
    leaf, row_off, partitions, null_items = arr, None, [], []
    if spec.shape != ():
        has_row = np.ones(n, bool) if valid is None else valid
        leaf, row_off, partitions, null_items = _flatten_lists(
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
