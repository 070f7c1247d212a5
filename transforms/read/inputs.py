"""What the job reads: the files the input patterns match (with their sizes), their format, their
one schema.

A pattern that names a directory (or a glob of directories, `trips/date=2026-12-*`) stands for
every file below it, at any depth, except those under a name starting with `.` or `_` below it
(`_SUCCESS`, `.crc` files, `_temporary/`), as Hive, Spark and pyarrow's dataset discovery skip
them. On an object store, where directories are name prefixes, a pattern that matches no object
is read as such a prefix.

With many Parquet files the schema comes from footers read once for the whole plan
(`parquet_footers`, which the work items use too), not from a second open of every file; with
very many, from the first file's footer alone (pipeline/job/plan.py), each other file's schema then
being checked by its reader (transforms/read/parquet_reader.py, the same message).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping, Sequence

import pyarrow as pa
import pyarrow.parquet as pq

from transforms.encode.schema import SchemaError
from transforms.fs import FileSystems
from transforms.names import FORMATS
from transforms.read.delimited.reader import CsvOptions, csv_column_names, csv_schema
from transforms.read.files import InputError, is_local, name_files
from transforms.read.json_reader import NoLinesError, json_schema
from transforms.read.parquet_reader import (
    UNIFY_HINT,
    footer_schema,
    parquet_footers,
    schema_difference,
)
from transforms.read.unify import UnifiedSchema, unify_schemas, with_types

__all__ = [
    "FORMATS",
    "detect_format",
    "input_schema",
    "match_input_files",
    "match_input_metadata",
    "match_inputs",
    "planned_schema",
    "unified_input_schema",
    "unique_column_names",
]

_JSONL = (".jsonl", ".jsonl.gz", ".ndjson", ".ndjson.gz")


def _files(pattern: str) -> dict[str, tuple[int, float]]:
    """The files `pattern` matches (no directory), with their sizes and modification times."""
    results = FileSystems.match([pattern])[0].metadata_list
    return {
        m.path: (int(m.size_in_bytes), float(m.last_updated_in_seconds or 0.0))
        for m in results
        if not m.path.endswith("/") and not (is_local(m.path) and os.path.isdir(m.path))
    }


def _below(pattern: str) -> dict[str, tuple[int, float]]:
    """Every file below the directories `pattern` names, hidden names left out."""
    base = pattern.rstrip("/")
    depth = len(base.split("/"))
    return {
        path: found
        for path, found in _files(f"{base}/**").items()
        if not any(part.startswith((".", "_")) for part in path.split("/")[depth:])
    }


def match_input_metadata(patterns: Sequence[str]) -> dict[str, tuple[int, float]]:
    """Every file the patterns (paths or globs, any Beam filesystem; a directory stands for the
    files below it) name, sorted, deduplicated, with its size in bytes and its modification
    time in seconds since the epoch (from the match: no file is opened)."""
    found: dict[str, tuple[int, float]] = {}
    for pattern in patterns:
        files = _below(pattern) if pattern.endswith("/") else _files(pattern) or _below(pattern)
        if not files:
            raise InputError(f"{pattern}: no file matches this input")
        found.update(files)
    return {path: found[path] for path in sorted(found)}


def match_input_files(patterns: Sequence[str]) -> dict[str, int]:
    """Every file the patterns name (see `match_input_metadata`), with its size in bytes."""
    return {path: size for path, (size, _) in match_input_metadata(patterns).items()}


def match_inputs(patterns: Sequence[str]) -> list[str]:
    """Every file the patterns (paths or globs, any Beam filesystem) name, sorted, deduplicated."""
    return list(match_input_files(patterns))


def detect_format(paths: Sequence[str], fmt: str | None) -> str:
    if fmt:
        if fmt not in FORMATS:
            raise InputError(f"format {fmt!r} is not one of {', '.join(FORMATS)}")
        return fmt
    kinds = set()
    for path in paths:
        name = path.lower()
        if name.endswith((".parquet", ".parq", ".pq")):
            kinds.add("parquet")
        elif name.endswith(_JSONL):
            kinds.add("jsonl")
        elif name.endswith((".csv", ".csv.gz", ".tsv", ".tsv.gz", ".txt", ".txt.gz")):
            kinds.add("csv")
        else:
            raise InputError(f"{path}: cannot tell the format from the name; pass --format")
    if len(kinds) > 1:
        raise InputError(f"inputs mix formats {sorted(kinds)}; convert them in separate runs")
    return kinds.pop()


def input_schema(
    paths: Sequence[str],
    fmt: str,
    csv: CsvOptions,
    footers: Sequence[pq.FileMetaData] | None = None,
    types: Mapping[str, pa.DataType] | None = None,
) -> pa.Schema:
    """The one schema every input file agrees on; an error names two files that disagree.

    `footers`: the Parquet footers of `paths` when the caller has read them (else they are
    read here). JSON Lines: the fields of the first file that has a line, with `types`
    (configured types by name); a line of another file with a field not among them is a bad
    row, and a file with no line has no rows."""
    if fmt == "jsonl":
        return _first_json_schema(paths, types or {})
    if fmt == "parquet":
        if footers is None:
            footers = parquet_footers(paths)
        schemas = [footer_schema(meta) for meta in footers]
    else:
        first = csv_schema(paths[0], csv)
        schemas = [first]
        for path in paths[1:]:
            names = csv_column_names(path, csv)
            schemas.append(
                first if names == first.names else pa.schema([(n, pa.null()) for n in names])
            )
    unique_column_names(paths[0], schemas[0], fmt)
    for path, schema in zip(paths[1:], schemas[1:], strict=True):
        diff = schema_difference(schemas[0], schema)
        if diff:
            raise SchemaError(
                f"{paths[0]} and {path} do not have the same schema: {diff}{UNIFY_HINT}"
            )
    return schemas[0].remove_metadata()


def _json_schema_or_none(path: str, types: Mapping[str, pa.DataType]) -> pa.Schema:
    """`json_schema`, or no field for a file with no line (it has no rows)."""
    try:
        return json_schema(path, types)
    except NoLinesError:
        return pa.schema([])


def _first_json_schema(paths: Sequence[str], types: Mapping[str, pa.DataType]) -> pa.Schema:
    """`json_schema` of the first file that has a line; InputError when none has one."""
    for path in paths:
        try:
            return json_schema(path, types)
        except NoLinesError:
            continue
    raise _no_lines(paths)


def _no_lines(paths: Sequence[str]) -> InputError:
    files = f"{len(paths):,} JSON Lines files" if len(paths) > 1 else "JSON Lines file"
    return InputError(
        f"no line in the {files} ({name_files(paths)}): no field to take the schema from"
    )


def unique_column_names(path: str, schema: pa.Schema, fmt: str) -> None:
    """SchemaError naming the file when it has two columns of one name (a CSV header can; a
    record cannot hold two features of one name)."""
    names = schema.names
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        hint = " (or give csv.column_names)" if fmt == "csv" else ""
        raise SchemaError(
            f"{path}: more than one column is named {', '.join(map(repr, dupes))}: rename "
            f"them in the file{hint}"
        )


def unified_input_schema(
    paths: Sequence[str],
    fmt: str,
    csv: CsvOptions,
    footers: Sequence[pq.FileMetaData] | None = None,
    types: Mapping[str, pa.DataType] | None = None,
) -> UnifiedSchema:
    """`schema: unify`: the union of every file's own schema (transforms/read/unify.py) and the
    columns each file lacks. Each file's schema: its Parquet footer (`footers`, else read
    here); a CSV file's header and the types inferred from its first `csv.infer_bytes` (the
    `csv.column_types` of its columns); a JSON Lines file's fields inferred from its first
    bytes, with the configured `types`."""
    if fmt == "parquet":
        if footers is None:
            footers = parquet_footers(paths)
        schemas = [footer_schema(meta).remove_metadata() for meta in footers]
    elif fmt == "csv":
        schemas = []
        for path in paths:
            names = set(csv_column_names(path, csv))
            own = {k: v for k, v in csv.column_types.items() if k in names}
            schemas.append(csv_schema(path, dataclasses.replace(csv, column_types=own)))
    else:
        schemas = [_json_schema_or_none(path, types or {}) for path in paths]
        if not any(schemas):
            raise _no_lines(paths)
    for path, schema in zip(paths, schemas, strict=True):
        unique_column_names(path, schema, fmt)
    return unify_schemas(paths, schemas)


def planned_schema(
    paths: Sequence[str],
    fmt: str,
    csv: CsvOptions,
    footers: Sequence[pq.FileMetaData] | None,
    types: Mapping[str, pa.DataType],
    unify: bool,
) -> UnifiedSchema:
    """The schema the job reads the files in: the one they agree on (`input_schema`), or with
    `unify` their union (`unified_input_schema`), with the configured types of Parquet columns
    (`types`: `columns.<name>.type`, JSON Lines fields took theirs already); and per file the
    columns it lacks. SchemaError for a configured type of a column the input does not have."""
    if unify:
        planned = unified_input_schema(paths, fmt, csv, footers, types)
    else:
        planned = UnifiedSchema(input_schema(paths, fmt, csv, footers, types), {})
    if fmt != "parquet":  # JSON Lines took its types; CSV has csv.column_types
        return planned
    unknown = sorted(set(types) - set(planned.schema.names))
    if unknown:
        raise SchemaError(
            f"columns.{unknown[0]}.type: {unknown[0]!r} is not a column of the input "
            f"(columns: {planned.schema.names})"
        )
    return UnifiedSchema(with_types(planned.schema, types), planned.missing)
