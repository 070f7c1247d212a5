"""The `files:` columns planned over the schema they meet (the schema after the `transforms:`
steps): each column checked (present, text), what it becomes (a binary column, in place or as a
new feature, and for an image its height, width and channels, for audio its sample rate,
channels and duration), the schema the encoder then sees, and the manifest's image marking.

The features added beside a column's output `out`: `out_height`, `out_width`, `out_channels`
(int32; an image), `out_sample_rate`, `out_channels` (int32), `out_duration` (float64 seconds;
audio). A null reference leaves every one of them null.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

import pyarrow as pa

from transforms import fs
from transforms.batch import TableBatch
from transforms.encode.features import FeatureSpec, ImageSpec, SchemaError
from transforms.files.fetch import BadFileError, file_size, resolve, table_directory
from transforms.files.options import FORMATS, FileColumn

__all__ = [
    "SAMPLED_FILES",
    "FilesPlan",
    "PlannedColumn",
    "file_bytes_per_row",
    "image_spec",
    "mark_images",
    "plan_files",
]

SAMPLED_FILES = 32  # files per column whose size the plan looks up for its estimate


@dataclasses.dataclass(frozen=True)
class PlannedColumn:
    """One `files:` entry over the schema: its options and the columns it writes."""

    options: FileColumn
    extra: tuple[tuple[str, pa.DataType], ...]  # the features beside the output, in order

    @property
    def column(self) -> str:
        return self.options.column

    @property
    def output(self) -> str:
        return self.options.output


@dataclasses.dataclass(frozen=True)
class FilesPlan:
    """Every `files:` column planned, and the schema after them."""

    columns: tuple[PlannedColumn, ...]
    input_schema: pa.Schema
    output_schema: pa.Schema


def _extra(options: FileColumn) -> tuple[tuple[str, pa.DataType], ...]:
    out = options.output
    if options.kind == "image":
        return tuple((f"{out}_{name}", pa.int32()) for name in ("height", "width", "channels"))
    if options.kind == "audio":
        return (
            (f"{out}_sample_rate", pa.int32()),
            (f"{out}_channels", pa.int32()),
            (f"{out}_duration", pa.float64()),
        )
    return ()


def _is_text(t: pa.DataType) -> bool:
    t = t.value_type if pa.types.is_dictionary(t) else t
    return pa.types.is_string(t) or pa.types.is_large_string(t)


def plan_files(columns: Sequence[FileColumn], schema: pa.Schema) -> FilesPlan:
    """Check each `files:` column against `schema`; the plan and the schema after it.
    SchemaError names the key."""
    planned = []
    current = schema
    taken = set(schema.names)
    for options in columns:
        key = f"files.{options.column}"
        if options.column not in schema.names:
            raise SchemaError(
                f"{key}: column {options.column!r} is not in the input (columns after the "
                f"transforms: {', '.join(schema.names)})"
            )
        t = schema.field(options.column).type
        if not _is_text(t):
            raise SchemaError(f"{key}: column {options.column!r} is {t}; a file reference is text")
        extra = _extra(options)
        new = [options.output] if options.output != options.column else []
        for name in [*new, *(n for n, _ in extra)]:
            if name in taken:
                raise SchemaError(
                    f"{key}: the feature {name!r} it writes is a column already; set "
                    f"{key}.output to another name"
                )
            taken.add(name)
        binary = pa.field(options.output, pa.binary())
        if options.output == options.column:
            current = current.set(current.get_field_index(options.column), binary)
        else:
            current = current.append(binary)
        for name, kind in extra:
            current = current.append(pa.field(name, kind))
        planned.append(PlannedColumn(options, extra))
    return FilesPlan(tuple(planned), schema, current)


def image_spec(options: FileColumn) -> ImageSpec | None:
    """How the readers decode the output of an image column (None for other columns): the
    formats it may hold, and [height, width, channels] with -1 where images differ."""
    image = options.image
    if image is None:
        return None
    formats = (image.format,) if image.format is not None else FORMATS
    height = width = -1
    if image.resize is not None and len(image.resize) == 2:
        height, width = image.resize
    channels = image.channels if image.channels is not None else -1
    return ImageSpec(formats, (height, width, channels))


def mark_images(specs: Sequence[FeatureSpec], plan: FilesPlan | None) -> list[FeatureSpec]:
    """`specs` with the image outputs marked (the manifest's `image` entry)."""
    if plan is None:
        return list(specs)
    marks = {c.output: image_spec(c.options) for c in plan.columns}
    return [
        dataclasses.replace(s, image=marks[s.name]) if marks.get(s.name) is not None else s
        for s in specs
    ]


def file_bytes_per_row(plan: FilesPlan, sample: TableBatch | None) -> float:
    """The file bytes a row reads in, on average over the first SAMPLED_FILES references of
    each column in `sample` (the table's first batch; a column the transforms make is not in
    it, and counts 0). Files that cannot be had count 0, as their rows write no file."""
    if sample is None or sample.table.num_rows == 0:
        return 0.0
    table = sample.table
    directory = table_directory(sample.source)
    total = 0.0
    for column in plan.columns:
        if column.column not in table.column_names:
            continue
        refs = table.column(column.column).slice(0, SAMPLED_FILES).to_pylist()
        paths = []
        for ref in refs:
            try:
                paths.append(None if ref is None else resolve(str(ref), directory))
            except BadFileError:
                paths.append(None)
        wanted = [p for p in paths if p is not None]
        if not wanted:
            continue
        remote = any(not fs.is_local(p) for p in wanted)
        with ThreadPoolExecutor(min(len(wanted), 16 if remote else 1)) as pool:
            sizes = list(pool.map(file_size, wanted))
        total += sum(s or 0 for s in sizes) / len(paths)
    return total
