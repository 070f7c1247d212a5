"""Hive-partitioned inputs: the `key=value` directories of an input file's path as typed columns.

Every directory of a file's path named `key=value` is a partition key (`date=2026-12-01/
region=eu/part-0.parquet`: `date` and `region`); every file of one input must have the same
keys in the same order. pyarrow's `HivePartitioning` reads the values (percent-decoded;
`__HIVE_DEFAULT_PARTITION__` is a null). A key's type is `columns.<key>.type` when configured,
else inferred from every value the input's files give: int64 when each is an integer written as
such (`7`, not `007` or `+7`, which stay text) and fits in int64, float64 when each is a
number written so (`1.5`, `1e3`; not `.5`, `nan`), else string (dates stay text: set
`type: date32` for a date).

The keys are planned once (`plan_partitions`) and carried by each work item; the reader appends
them to every batch as slices of one constant array made per work item (`PartitionColumns`),
never a value per row.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping, Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from transforms.encode.schema import SchemaError
from transforms.read.files import InputError

__all__ = [
    "HIVE_NULL",
    "PartitionColumns",
    "Partitions",
    "add_partition_fields",
    "file_schema",
    "infer_partition_type",
    "partition_segments",
    "plan_partitions",
]

HIVE_NULL = "__HIVE_DEFAULT_PARTITION__"  # Hive's (and pyarrow's) directory name for a null
_SEGMENT = re.compile(r"^([^=]+)=(.*)$")
_INTEGER = re.compile(r"^-?(0|[1-9][0-9]*)$")
_NUMBER = re.compile(r"^-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][-+]?[0-9]+)?$")

Values = tuple[tuple[str, Any], ...]  # a file's partition: (key, value) in path order


@dataclasses.dataclass(frozen=True)
class Partitions:
    """The partition keys of an input (typed fields, in path order) and each file's values."""

    fields: tuple[pa.Field, ...]
    values: Mapping[str, Values]  # path -> its (key, value) pairs (Python values, None: null)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(f.name for f in self.fields)


def partition_segments(path: str) -> list[tuple[str, str]]:
    """The `key=value` directories of `path`, in order, as written (not decoded)."""
    directories = path.split("/")[:-1]
    return [(m.group(1), m.group(2)) for m in map(_SEGMENT.match, directories) if m]


def _decoded(path: str, segments: list[tuple[str, str]]) -> dict[str, str | None]:
    """The values of the segments, read by pyarrow's HivePartitioning as text."""
    import pyarrow.dataset as ds  # only for partitioned inputs: it imports pandas when installed

    keys = [key for key, _ in segments]
    if len(set(keys)) != len(keys):
        raise InputError(f"{path}: a partition key appears twice in the path: {keys}")
    hive = ds.HivePartitioning(pa.schema([(k, pa.string()) for k in keys]), null_fallback=HIVE_NULL)
    text = "".join(f"{k}={v}/" for k, v in segments)  # directories: each ends with "/"
    values = ds.get_partition_keys(hive.parse(text))
    return {key: values.get(key) for key in keys}


def infer_partition_type(values: Sequence[str | None]) -> pa.DataType:
    """int64 when every value is an integer written as such (no leading zero or sign), float64
    when every value is a number written so, else string (a key without any value: string)."""
    present = [v for v in values if v is not None]
    if not present:
        return pa.string()
    if all(_INTEGER.match(v) for v in present):
        try:
            pc.cast(pa.array(present, pa.string()), pa.int64())
            return pa.int64()
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):  # beyond int64: an identifier
            return pa.string()
    if all(_NUMBER.match(v) for v in present):
        return pa.float64()
    return pa.string()


def _typed(
    key: str, t: pa.DataType, text: Mapping[str, str | None], configured: bool
) -> dict[str, Any]:
    """path -> the key's value converted to `t`; an error names the file and the value."""
    distinct = sorted({v for v in text.values() if v is not None})
    try:
        converted = pc.cast(pa.array(distinct, pa.string()), t).to_pylist()
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as err:
        for value in distinct:
            try:
                pc.cast(pa.array([value], pa.string()), t)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
                path = next(p for p, v in text.items() if v == value)
                hint = f" (columns.{key}.type)" if configured else ""
                raise SchemaError(
                    f"{path}: partition {key}={value!r}: cannot convert to {t}{hint}"
                ) from err
        raise SchemaError(f"partition key {key!r}: cannot convert its values to {t}") from err
    by_text = dict(zip(distinct, converted, strict=True))
    return {path: None if v is None else by_text[v] for path, v in text.items()}


def plan_partitions(paths: Sequence[str], types: Mapping[str, pa.DataType]) -> Partitions | None:
    """The partition keys of `paths` (None when their paths have none); `types`: configured
    types by column name (`columns.<key>.type`). An error names two files whose keys differ."""
    segments = {path: partition_segments(path) for path in paths}
    first = paths[0]
    keys = [k for k, _ in segments[first]]
    for path in paths[1:]:
        other = [k for k, _ in segments[path]]
        if other != keys:
            raise SchemaError(
                f"{first} and {path} do not have the same partition keys: {keys} vs {other}"
            )
    if not keys:
        return None
    text = {path: _decoded(path, segments[path]) for path in paths}
    fields, typed = [], {}
    for key in keys:
        values = {path: text[path][key] for path in paths}
        configured = types.get(key)
        t = configured or infer_partition_type(list(values.values()))
        fields.append(pa.field(key, t))
        typed[key] = _typed(key, t, values, configured is not None)
    per_file = {path: tuple((key, typed[key][path]) for key in keys) for path in paths}
    return Partitions(tuple(fields), per_file)


def add_partition_fields(schema: pa.Schema, partitions: Partitions, path: str) -> pa.Schema:
    """The files' schema with the partition keys after its columns; a key that is also a
    column of the files is an error naming `path` (a file of the input)."""
    for field in partitions.fields:
        if field.name in schema.names:
            raise SchemaError(
                f"{path}: partition key {field.name!r} is also a column of the file; rename "
                "the directory or the column"
            )
    return pa.schema([*schema, *partitions.fields])


def file_schema(schema: pa.Schema, partition: Values) -> pa.Schema:
    """The columns a file itself holds: `schema` without the partition keys."""
    keys = {key for key, _ in partition}
    return pa.schema([f for f in schema if f.name not in keys])


class PartitionColumns:
    """The partition columns of one work item: one constant array per key, made once at the
    largest batch size asked for; a batch gets slices of them (no copy)."""

    def __init__(self, schema: pa.Schema, partition: Values) -> None:
        self._fields = [schema.field(key) for key, _ in partition]
        self._values = [value for _, value in partition]
        self._arrays: list[pa.Array] = []

    def append_to(self, table: pa.Table) -> pa.Table:
        n = table.num_rows
        if not self._arrays or len(self._arrays[0]) < n:
            self._arrays = [
                pa.repeat(pa.scalar(v, f.type), n) if v is not None else pa.nulls(n, f.type)
                for f, v in zip(self._fields, self._values, strict=True)
            ]
        for field, array in zip(self._fields, self._arrays, strict=True):
            table = table.append_column(field, array.slice(0, n))
        return table
