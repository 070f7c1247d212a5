"""What the job reads: the files the input patterns match (with their sizes), their format, their
one schema.

With many Parquet files the schema comes from footers read once for the whole plan
(`parquet_footers`, which the work items use too), not from a second open of every file; with
very many, from the first file's footer alone (pipeline/plan.py), each other file's schema then
being checked by its reader (transforms/read/parquet_reader.py, the same message).
"""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa
import pyarrow.parquet as pq
from apache_beam.io.filesystems import FileSystems

from transforms.encode.schema import SchemaError
from transforms.read.csv_reader import CsvOptions, csv_column_names, csv_schema
from transforms.read.files import InputError
from transforms.read.parquet_reader import parquet_footers, schema_difference

__all__ = ["detect_format", "input_schema", "match_input_files", "match_inputs"]


def match_input_files(patterns: Sequence[str]) -> dict[str, int]:
    """Every file the patterns (paths or globs, any Beam filesystem) name, sorted, deduplicated,
    with its size in bytes (from the match: no file is opened)."""
    sizes: dict[str, int] = {}
    for pattern in patterns:
        results = FileSystems.match([pattern])[0].metadata_list
        files = {m.path: int(m.size_in_bytes) for m in results if not m.path.endswith("/")}
        if not files:
            raise InputError(f"{pattern}: no file matches this input")
        sizes.update(files)
    return {path: sizes[path] for path in sorted(sizes)}


def match_inputs(patterns: Sequence[str]) -> list[str]:
    """Every file the patterns (paths or globs, any Beam filesystem) name, sorted, deduplicated."""
    return list(match_input_files(patterns))


def detect_format(paths: Sequence[str], fmt: str | None) -> str:
    if fmt:
        if fmt not in ("parquet", "csv"):
            raise InputError(f"format {fmt!r} is not one of parquet, csv")
        return fmt
    kinds = set()
    for path in paths:
        name = path.lower()
        if name.endswith((".parquet", ".parq", ".pq")):
            kinds.add("parquet")
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
) -> pa.Schema:
    """The one schema every input file agrees on; an error names two files that disagree.

    `footers`: the Parquet footers of `paths` when the caller has read them (else they are
    read here)."""
    if fmt == "parquet":
        if footers is None:
            footers = parquet_footers(paths)
        schemas = [meta.schema.to_arrow_schema() for meta in footers]
    else:
        first = csv_schema(paths[0], csv)
        schemas = [first]
        for path in paths[1:]:
            names = csv_column_names(path, csv)
            schemas.append(
                first if names == first.names else pa.schema([(n, pa.null()) for n in names])
            )
    for path, schema in zip(paths[1:], schemas[1:], strict=True):
        diff = schema_difference(schemas[0], schema)
        if diff:
            raise SchemaError(f"{paths[0]} and {path} do not have the same schema: {diff}")
    return schemas[0].remove_metadata()
