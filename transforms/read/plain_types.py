"""Arrow types with no Example mapping of their own, read as the plain types that have one.

Parquet files written by pyarrow may hold Arrow's canonical extension types and list views;
the reader turns each batch into plain types as it reads it (Arrow casts, one per column), so
the plan, the encoder, the statistics and verify see only types with a mapping
(docs/types.md):

- `arrow.bool8` -> bool (its int8 storage, 0 false, any other value true);
- `arrow.fixed_shape_tensor` -> fixed-size lists nested to the tensor's shape (a fixed array
  feature of that shape, the values in the order they are stored: the tensor's `shape` is
  the stored one; a `permutation` and `dim_names` are not kept);
- any other extension type (`arrow.uuid`, `arrow.json`, `arrow.opaque`, a library's own) ->
  its storage type (a uuid's 16 bytes, the JSON text, ...);
- `list_view` and `large_list_view` -> `list` and `large_list`;

at any depth inside lists, structs and maps. A column of plain types is left as it is (no
copy).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pyarrow as pa

__all__ = ["is_plain", "plain_schema", "plain_table", "plain_type"]

_TENSOR = "arrow.fixed_shape_tensor"
_BOOL8 = "arrow.bool8"


def _list_view(t: pa.DataType) -> bool:
    return pa.types.is_list_view(t) or pa.types.is_large_list_view(t)


def plain_type(t: pa.DataType) -> pa.DataType:
    """`t` with every extension type and list view replaced as the module says."""
    if isinstance(t, pa.BaseExtensionType):
        if t.extension_name == _BOOL8:
            return pa.bool_()
        if t.extension_name == _TENSOR:
            nested = plain_type(t.value_type)
            for size in reversed(t.shape):
                nested = pa.list_(nested, size)
            return nested
        return plain_type(t.storage_type)
    if pa.types.is_list(t) or _list_view(t) or pa.types.is_large_list(t):
        value = t.value_field.with_type(plain_type(t.value_type))
        large = pa.types.is_large_list(t) or pa.types.is_large_list_view(t)
        return pa.large_list(value) if large else pa.list_(value)
    if pa.types.is_fixed_size_list(t):
        return pa.list_(t.value_field.with_type(plain_type(t.value_type)), t.list_size)
    if pa.types.is_map(t):
        key = t.key_field.with_type(plain_type(t.key_type))
        item = t.item_field.with_type(plain_type(t.item_type))
        return pa.map_(key, item, t.keys_sorted)
    if pa.types.is_struct(t):
        return pa.struct([f.with_type(plain_type(f.type)) for f in t])
    if pa.types.is_dictionary(t):
        return pa.dictionary(t.index_type, plain_type(t.value_type), t.ordered)
    return t


def is_plain(schema: pa.Schema) -> bool:
    """Whether every column of `schema` has plain types already."""
    return all(plain_type(f.type) == f.type for f in schema)


def plain_schema(schema: pa.Schema) -> pa.Schema:
    """`schema` with each column's type plain (names, nullability and metadata kept)."""
    if is_plain(schema):
        return schema
    return pa.schema([f.with_type(plain_type(f.type)) for f in schema], schema.metadata)


def _holds(t: pa.DataType, found: Callable[[pa.DataType], bool]) -> bool:
    """Whether `found(t)` holds for `t` or a type inside it."""
    if found(t):
        return True
    if isinstance(t, pa.BaseExtensionType):
        return _holds(t.storage_type, found)
    if pa.types.is_struct(t):
        return any(_holds(f.type, found) for f in t)
    if pa.types.is_map(t):
        return _holds(t.key_type, found) or _holds(t.item_type, found)
    if hasattr(t, "value_type"):  # lists, list views, dictionaries
        return _holds(t.value_type, found)
    return False


def _has_tensor(t: pa.DataType) -> bool:
    return _holds(t, lambda x: getattr(x, "extension_name", None) == _TENSOR)


def _has_view(t: pa.DataType) -> bool:
    return _holds(t, _list_view)


def _tensor(arr: pa.ExtensionArray) -> pa.Array:
    """A fixed_shape_tensor array as fixed-size lists nested to its shape."""
    storage = arr.storage  # fixed_size_list<value>[prod(shape)]
    size = storage.type.list_size
    values = storage.values.slice(storage.offset * size, len(storage) * size)
    nested = _plain_array(values, plain_type(values.type))
    shape = arr.type.shape
    for dim in reversed(shape[1:]):
        nested = pa.FixedSizeListArray.from_arrays(nested, dim)
    mask = storage.is_null() if storage.null_count else None
    return pa.FixedSizeListArray.from_arrays(nested, shape[0], mask=mask)


def _list_from_view(arr: pa.Array) -> pa.Array:
    """A list view as the list of the same rows: its views' values gathered in row order.
    (Arrow 25's cast of a list view whose values are an extension type gives a list whose
    offsets buffer is one entry short, so this is done here for every list view.)"""
    sizes = arr.sizes.to_numpy(zero_copy_only=False).astype(np.int64)
    if arr.null_count:
        sizes[arr.is_null().to_numpy(zero_copy_only=False)] = 0
    starts = arr.offsets.to_numpy(zero_copy_only=False).astype(np.int64)
    ends = np.cumsum(sizes)
    take = np.arange(ends[-1] if len(ends) else 0) + np.repeat(starts - (ends - sizes), sizes)
    values = arr.values.take(pa.array(take, pa.int64()))
    offsets = pa.array(np.concatenate([[0], ends]), pa.int64())
    mask = arr.is_null() if arr.null_count else None
    if pa.types.is_large_list_view(arr.type):
        return pa.LargeListArray.from_arrays(offsets, values, mask=mask)
    return pa.ListArray.from_arrays(offsets.cast(pa.int32()), values, mask=mask)


def _plain_array(arr: pa.Array, target: pa.DataType) -> pa.Array:
    """`arr` as `target` (its plain type). Arrow's cast turns an extension array into its
    storage at any depth; a list view and a tensor are turned here, so a container holding
    one is rebuilt around it."""
    if arr.type == target:
        return arr
    if isinstance(arr, pa.ExtensionArray) and arr.type.extension_name == _TENSOR:
        return _tensor(arr)
    if not _has_tensor(arr.type) and not _has_view(arr.type):
        return arr.cast(target)
    if isinstance(arr, pa.ExtensionArray):
        return _plain_array(arr.storage, target)
    if _list_view(arr.type):
        return _plain_array(_list_from_view(arr), target)
    mask = arr.is_null() if arr.null_count else None
    if pa.types.is_struct(arr.type):
        fields = [_plain_array(arr.field(i), f.type) for i, f in enumerate(target)]
        return pa.StructArray.from_arrays(fields, fields=list(target), mask=mask)
    if pa.types.is_fixed_size_list(arr.type):
        size = arr.type.list_size
        values = arr.values.slice(arr.offset * size, len(arr) * size)
        values = _plain_array(values, target.value_type)
        return pa.FixedSizeListArray.from_arrays(values, type=target, mask=mask)
    if pa.types.is_map(arr.type):
        entries = pa.struct([target.key_field, target.item_field])
        values = _plain_array(arr.values, entries)
        keys, items = values.field(0), values.field(1)
        return pa.MapArray.from_arrays(_offsets(arr), keys, items, type=target, mask=mask)
    if pa.types.is_list(arr.type) or pa.types.is_large_list(arr.type):
        values = _plain_array(arr.values, target.value_type)
        kind = pa.LargeListArray if pa.types.is_large_list(arr.type) else pa.ListArray
        return kind.from_arrays(_offsets(arr), values, type=target, mask=mask)
    return arr.cast(target)


def _offsets(arr: pa.Array) -> pa.Array:
    """A list or map array's offsets, copied when it is a slice with nulls (`from_arrays`
    takes no sliced offsets beside a null mask)."""
    if arr.offset == 0 or not arr.null_count:
        return arr.offsets
    return pa.array(arr.offsets.to_numpy(zero_copy_only=False), arr.offsets.type)


def plain_table(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """`table` with the plain types of `schema` (`plain_schema(table.schema)`)."""
    if table.schema.equals(schema):
        return table
    columns = []
    for column, field in zip(table.columns, schema, strict=True):
        if column.type == field.type:
            columns.append(column)
            continue
        chunks = [_plain_array(chunk, field.type) for chunk in column.chunks]
        columns.append(pa.chunked_array(chunks, field.type))
    return pa.Table.from_arrays(columns, schema=schema)
