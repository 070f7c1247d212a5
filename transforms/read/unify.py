"""One schema for files whose schemas evolved (`schema: unify`), and batches cast to it.

A dataset written over months gains columns, loses some, widens types. `unify_schemas` makes
the union of the files' schemas with pyarrow's promotion rules (`pa.unify_schemas`,
`promote_options="permissive"`: int8 -> int16 -> ... -> int64, an int and a float to the
float, float32 -> float64, string -> large_string, a column missing from a file is nullable
there); a column whose types cannot be promoted is a one-line error naming the column, both
types and both files. `columns.<name>.type` in the config fixes a column's type over what the
files say (`with_types`). `conform` casts a file's batch to the planned schema (per column, in
Arrow: the vectorized path), a column the file lacks becoming nulls.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

import pyarrow as pa

from transforms.encode.schema import SchemaError
from transforms.names import SCHEMA_MODES

__all__ = ["SCHEMA_MODES", "UnifiedSchema", "conform", "unify_schemas", "with_types"]


@dataclasses.dataclass(frozen=True)
class UnifiedSchema:
    """The union schema, and per file the columns of the union it lacks (files lacking none
    left out)."""

    schema: pa.Schema
    missing: Mapping[str, tuple[str, ...]]


def _promoted(a: pa.Field, b: pa.Field) -> pa.Field | None:
    """The field both promote to, or None when pyarrow cannot promote them."""
    try:
        merged = pa.unify_schemas([pa.schema([a]), pa.schema([b])], promote_options="permissive")
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError):
        return None
    return merged.field(0)


def unify_schemas(paths: Sequence[str], schemas: Sequence[pa.Schema]) -> UnifiedSchema:
    """The union of the files' schemas (columns in order of first appearance), types promoted.

    Raises SchemaError naming the column, the two types and the two files (the first file that
    had the column's type so far, and the file that disagrees) when a type cannot be promoted.
    """
    fields: dict[str, pa.Field] = {}
    origin: dict[str, str] = {}  # column -> the file its current type was first seen in
    for path, schema in zip(paths, schemas, strict=True):
        for field in schema:
            if field.name not in fields:
                fields[field.name], origin[field.name] = field, path
                continue
            known = fields[field.name]
            if known.type == field.type:
                continue
            merged = _promoted(known, field)
            if merged is None:
                raise SchemaError(
                    f"column {field.name!r}: {known.type} in {origin[field.name]} and "
                    f"{field.type} in {path} cannot be unified (schema: unify promotes ints "
                    f"and floats to wider ones; set columns.{field.name}.type to cast both)"
                )
            if merged.type != known.type:
                origin[field.name] = path
            fields[field.name] = merged.with_nullable(True)
    names = list(fields)
    missing = {}
    for path, schema in zip(paths, schemas, strict=True):
        lacks = tuple(n for n in names if schema.get_field_index(n) < 0)
        if lacks:
            missing[path] = lacks
    for lacks in missing.values():
        for name in lacks:
            fields[name] = fields[name].with_nullable(True)
    return UnifiedSchema(pa.schema([fields[n] for n in names]), missing)


def with_types(schema: pa.Schema, types: Mapping[str, pa.DataType]) -> pa.Schema:
    """`schema` with the configured types (`columns.<name>.type`) of its columns."""
    for name, t in types.items():
        i = schema.get_field_index(name)
        if i >= 0:
            schema = schema.set(i, schema.field(i).with_type(t))
    return schema


def conform(table: pa.Table, schema: pa.Schema, path: str, first_row: int) -> pa.Table:
    """`table` (a batch of the file `path`) with the columns of `schema` in its order and types:
    a column cast where its type differs, nulls where the file lacks it, the file's other
    columns left out. A value the cast cannot take raises SchemaError naming the file, the rows
    and the column."""
    if table.schema.equals(schema):
        return table
    n = table.num_rows
    columns = []
    for field in schema:
        i = table.schema.get_field_index(field.name)
        if i < 0:
            columns.append(pa.nulls(n, field.type))
            continue
        column = table.column(i)
        if column.type != field.type:
            try:
                column = column.cast(field.type)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as err:
                raise SchemaError(
                    f"{path}: rows {first_row}-{first_row + n - 1}: column {field.name!r}: "
                    f"cannot cast {column.type} to {field.type}: {err}"
                ) from err
        columns.append(column)
    return pa.Table.from_arrays(columns, schema=schema)
