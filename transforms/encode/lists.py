"""A list column's levels, vectorized over a batch: its shape (`infer_shape`), the lengths of its
inner lists (`row_lengths_array`), the offsets of its innermost values with every level checked
against the shape and the null items found on the way (`flatten_lists`, `NullItems`), and the
positions the `NAME__nulls_K` features hold (`null_positions`). Used by columns.py (the
kernel's form of a column) and the statistics.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from transforms.encode.schema import ConversionError, FeatureSpec, default_scalar, is_list_type

__all__ = [
    "NullItems",
    "flatten_lists",
    "infer_shape",
    "null_positions",
    "row_lengths_array",
    "value_place",
]


def value_place(
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


def flatten_lists(
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
                where = value_place(source, first_row, _row_of(off, i), spec.name, rows)
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
    _, _, _, found = flatten_lists(arr, valid, spec, "", 0)
    return {
        f.level: pa.LargeListArray.from_arrays(
            pa.array(f.row_off), pa.array(f.positions, pa.int64()), mask=pa.array(~f.rows)
        )
        for f in found
    }
