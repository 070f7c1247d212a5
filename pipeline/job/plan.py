"""The job at construction: everything that can be known before the pipeline runs, checked once.

`plan_job(config)` matches the inputs, agrees on one schema, maps it to features, decides where
splits are assigned, measures a sample to plan the shards, and raises on anything known bad
(naming the file, the column, the key) before anything is written.

`schema: unify`: the schema is the union of the files' schemas, types promoted, and
`columns.<name>.type` fixes a Parquet column's type (transforms/read/unify.py); both read every
footer.

Otherwise, very many Parquet files (more than `LAZY_FOOTERS_REMOTE` on an object store,
`LAZY_FOOTERS_LOCAL` on local disk): only the first file's footer is read (the schema, the rows
for the estimate); every file is one work item of its size on disk, and each reader checks its
file's schema, so a file that does not match fails the run, not the plan
(docs/many-files-and-verify.md).
"""

from __future__ import annotations

import dataclasses
import zlib
from collections.abc import Callable, Mapping

import pyarrow as pa

from pipeline.job.config import JobConfig
from pipeline.output.drift import check_drift, load_expected
from pipeline.output.entries import link_error, scan
from pipeline.output.layouts import check_layout_features
from transforms.batch import TableBatch
from transforms.convert import Conversion
from transforms.encode.columns import leaf_array
from transforms.encode.lists import infer_shape
from transforms.encode.schema import (
    ColumnOptions,
    FeatureSpec,
    SchemaError,
    leaf_paths,
    nested_list_columns,
    plan_features,
)
from transforms.files.plan import FilesPlan, file_bytes_per_row, mark_images, plan_files
from transforms.preprocess.artifacts import check_artifacts
from transforms.preprocess.chain import PreprocessPlan, plan_preprocess
from transforms.preprocess.spec import StepError
from transforms.read.files import InputError, configured_types, is_local, name_files
from transforms.read.inputs import detect_format, match_input_files, planned_schema
from transforms.read.parquet_reader import footer_schema, parquet_footer, parquet_footers
from transforms.read.partitions import add_partition_fields, plan_partitions
from transforms.read.work import (
    WorkItem,
    cut_reference_tables,
    cut_text_files,
    plan_whole_files,
    plan_work,
    read_work_item,
    with_columns,
    with_partitions,
)
from transforms.sequence.layout import SequenceLayout, plan_sequence
from transforms.sequence.spill import sequence_buckets
from transforms.write.compression import ZLIB_LEVEL, gzip_compressor
from transforms.write.sizing import (
    ShardPlan,
    csv_bytes_per_row,
    output_bytes_per_input_byte,
    plan_shards,
)

__all__ = ["LAZY_FOOTERS_LOCAL", "LAZY_FOOTERS_REMOTE", "JobPlan", "plan_job"]

# Above this many Parquet files the plan reads the first footer only. On an object store a footer
# read costs 25-30 ms with 16 in flight (80 ms one by one), measured on the storage emulator: 256
# footers take about 7 s, 10,000 about 4 minutes; with the first footer only, 10,000 files plan
# in 3.4 s there, most of it the listing (docs/many-files-and-verify.md). Below it the schema
# check stays at construction.
LAZY_FOOTERS_REMOTE = 256
# Local footers cost 0.27-0.55 ms each (page cache): 20,000 take 5-11 s, well inside 30 s, so up
# to there a file with another schema still fails before anything is written.
LAZY_FOOTERS_LOCAL = 20_000


@dataclasses.dataclass(frozen=True)
class JobPlan:
    """Everything known at construction: files, format, schema, features, shards.

    `schema` is the input's; `specs` are planned from the schema after preprocessing;
    `source_specs` are the input's features with default options (the whole-row split key).
    """

    config: JobConfig
    paths: tuple[str, ...]
    fmt: str
    schema: pa.Schema
    specs: tuple[FeatureSpec, ...]
    work: tuple[WorkItem, ...]
    shards: ShardPlan
    preprocess: PreprocessPlan | None = None  # None: no `transforms:` in the config
    artifacts: str | None = None  # fitted analyzers to reuse (a previous output's transform/)
    new_columns: tuple[str, ...] = ()  # features the expected schema (expect_schema) lacks
    source_specs: tuple[FeatureSpec, ...] | None = None
    split_before_preprocess: bool = False  # AssignSplits on source batches (else the encoder)
    fit_split: str | None = None  # the split analyzers are fitted on; None: every row
    sequence: SequenceLayout | None = None  # SequenceExamples: context (`specs`) and steps
    sequence_buckets: int = 0  # a grouped sequence's buckets (transforms/sequence/spill.py)
    input_bytes: int = 0  # the input files' bytes on disk
    files: FilesPlan | None = None  # the `files:` columns, read after preprocessing
    # schema: unify: per file, the columns of the unified schema it lacks (null there)
    missing_columns: Mapping[str, tuple[str, ...]] = dataclasses.field(default_factory=dict)

    def conversion(self, framed: bool | None = None) -> Conversion:
        """What turns a source batch into records (transforms/convert.py); `framed`: TFRecord
        frames (default: as the configured sink needs them) or bare Examples."""
        config = self.config
        return Conversion(
            specs=self.specs,
            splits=tuple(config.splits),
            split_key=config.split_key,
            split_salt=config.split_salt,
            source_specs=self.source_specs,
            split_before_preprocess=self.split_before_preprocess,
            preprocess=self.preprocess,
            framed=config.sink == "blocks" if framed is None else framed,
            sequence=self.sequence,
            files=self.files,
        )

    @property
    def grouped(self) -> bool:
        """Whether the records of every split are grouped by shard (no rolling write)."""
        config = self.config
        return config.num_shards > 0 or len(config.shuffle) == len(config.splits)


def _no_links(directory: str) -> None:
    """LinkInOutputError when a link stands inside `directory` (an output's files, read)."""
    found = scan(directory).links
    if found:
        raise link_error(directory, found[0][0])


def _first_batch(work: WorkItem, fmt: str, schema: pa.Schema, config: JobConfig) -> TableBatch:
    """The first batch of the first work item (bad rows left out: the run reports them)."""
    batches = read_work_item(work, fmt, schema, config.csv, config.batch_rows, lambda _: None)
    return next(batches, None)


def _inferred_shapes(
    schema: pa.Schema,
    columns: Mapping[str, ColumnOptions],
    sample: TableBatch | None,
    source_schema: pa.Schema,
    where: str,
) -> dict[str, tuple[int, ...]]:
    """Shapes of nested list columns without a configured shape, from the first batch.

    `schema` is the one the features come from; `source_schema` the input's. A column
    preprocessing made or changed has no value to look at: it needs a shape.
    """
    needed = [
        (name, path)
        for name, path in nested_list_columns(schema)
        if columns.get(name) is None or columns[name].shape is None
    ]
    shapes = {}
    for name, path in needed:
        unchanged = path[0] in source_schema.names and (
            source_schema.field(path[0]).type == schema.field(path[0]).type
        )
        if not unchanged:
            raise SchemaError(
                f"column {name!r}: a nested list made or changed by transforms needs "
                f"columns.{name}.shape (or a reshape step)"
            )
        shape = None if sample is None else infer_shape(leaf_array(sample.table, path))
        if shape is None:
            raise SchemaError(
                f"column {name!r}: cannot infer the shape of a nested list from "
                f"{where} (no value in its first batch); set columns.{name}.shape"
            )
        shapes[name] = shape
    return shapes


def _source_specs(
    schema: pa.Schema, config: JobConfig, sample: TableBatch | None, where: str
) -> tuple[FeatureSpec, ...] | None:
    """The input's features with default options (configured shapes kept); None when a column
    of the input has no feature mapping without its options."""
    names = _leaf_names(schema)
    shaped = {
        name: ColumnOptions(shape=opts.shape)
        for name, opts in config.columns.items()
        if opts.shape is not None and name in names
    }
    try:
        shapes = _inferred_shapes(schema, shaped, sample, schema, where)
        return tuple(plan_features(schema, shaped, shapes))
    except SchemaError:
        return None


def _leaf_names(schema: pa.Schema) -> set[str]:
    """Feature names of the schema's leaves (struct fields `parent.child`, map keys and values
    `name.key`, `name.value`: transforms/encode/schema.py `leaf_paths`)."""
    return {".".join(path) for path, _ in leaf_paths(schema)[0]}


def _check_split_key(config: JobConfig, schema: pa.Schema) -> None:
    key = config.split_key
    if key is None:
        return
    if key not in schema.names:
        raise SchemaError(
            f"split_key: column {key!r} is not a column of the input (columns: {schema.names})"
        )
    t = schema.field(key).type
    t = t.value_type if pa.types.is_dictionary(t) else t
    keyable = (
        pa.types.is_integer(t)
        or pa.types.is_string(t)
        or pa.types.is_large_string(t)
        or pa.types.is_binary(t)
        or pa.types.is_large_binary(t)
    )
    if not keyable:
        raise SchemaError(f"split_key: column {key!r} is {t}; a key is text, binary or integers")


def _check_types(types: Mapping[str, pa.DataType], fmt: str) -> None:
    """`columns.<name>.type` is for partition keys, Parquet columns and JSON Lines fields."""
    if types and fmt == "csv":
        name = next(iter(types))
        raise SchemaError(
            f"columns.{name}.type: a CSV column's type is set by csv.column_types, and "
            f"{name!r} is not a partition key of the input"
        )
    if fmt == "jsonl":
        for name, t in types.items():
            if "map<" in str(t):
                raise SchemaError(
                    f"columns.{name}.type: {t}: pyarrow's JSON reader converts no JSON object to "
                    "a map (it reads one as a struct of its fields); use a struct type, or "
                    'list<struct<key: ..., value: ...>> for a list of {"key": ..., "value": '
                    "...} objects (the same features as a map)"
                )


def _check_sequence_key(sequence: SequenceLayout, schema: pa.Schema, splits: int) -> None:
    """With splits, a grouped sequence's rows get the split of their key before preprocessing:
    the key columns must be columns of the input."""
    missing = [n for n in sequence.options.group_by if n not in schema.names]
    if splits > 1 and missing:
        raise SchemaError(
            f"sequence.group_by: {missing} are not columns of the input; with splits a "
            "sequence's split is a hash of its key in the source"
        )


def _compressor(config: JobConfig) -> Callable[[memoryview], bytes] | None:
    """What a block of records goes through on its way into a shard (for the size estimate)."""
    if config.compression == "gzip":
        return gzip_compressor(config.compression_level, config.gzip_backend)
    if config.compression == "zlib":
        return lambda data: zlib.compress(data, ZLIB_LEVEL)
    return None


def _reads_every_footer(paths: list[str]) -> bool:
    """Whether the plan reads the footer of every Parquet file (else the first one only)."""
    local = all(is_local(p) for p in paths)
    return len(paths) <= (LAZY_FOOTERS_LOCAL if local else LAZY_FOOTERS_REMOTE)


def plan_job(config: JobConfig) -> JobPlan:
    """Match inputs, agree on one schema and map it to features; raises on anything known bad.

    Reads the inputs (footers, a first batch) and writes or deletes nothing: the launcher
    clears the output (pipeline/output/directory.py) once the plan holds.
    """
    sizes = match_input_files(config.inputs)  # path -> bytes on disk, sorted
    paths = list(sizes)
    fmt = detect_format(paths, config.format)
    types = configured_types(config.columns)  # columns.<name>.type
    partitions = plan_partitions(paths, types)  # the key=value directories of the paths
    keys = () if partitions is None else partitions.names
    file_types = {k: t for k, t in types.items() if k not in keys}
    _check_types(file_types, fmt)
    file_rows = None  # the first file's rows, when its work item is the whole file
    missing: dict[str, tuple[str, ...]] = {}  # schema: unify: the columns each file lacks
    unify = config.schema == "unify"
    if fmt == "parquet" and not (unify or file_types) and not _reads_every_footer(paths):
        first = parquet_footer(paths[0])  # the only footer read: the others are the readers'
        schema = footer_schema(first).remove_metadata()
        work = plan_whole_files(sizes)
        file_rows = first.num_rows
    else:
        footers = parquet_footers(paths) if fmt == "parquet" else None  # each footer, once
        planned = planned_schema(paths, fmt, config.csv, footers, file_types, unify)
        schema, missing = planned.schema, dict(planned.missing)
        work = with_columns(plan_work(paths, fmt, footers), schema, missing)
    if partitions is not None:  # typed columns after the files' own
        schema = add_partition_fields(schema, partitions, paths[0])
        work = with_partitions(work, partitions)
    if not work:  # Parquet files without a row group
        raise InputError(f"{name_files(paths)}: no data row in the input (nothing to convert)")
    sample = _first_batch(work[0], fmt, schema, config)
    preprocess = plan_preprocess(config.transforms, schema) if config.transforms else None
    artifacts = None
    if config.transform_artifacts:
        if preprocess is None:
            raise StepError("transform_artifacts is given but the config has no transforms")
        _no_links(config.transform_artifacts)  # another output's files: never through a link
        artifacts = check_artifacts(config.transform_artifacts, preprocess)  # before clearing
    features = schema if preprocess is None else preprocess.output_schema
    files = plan_files(config.files, features) if config.files else None
    if files is not None:  # the file columns as binary, and the facts read beside them
        features = files.output_schema
    shapes = _inferred_shapes(features, config.columns, sample, schema, work[0].path)
    sequence = None
    if config.sequence is None:
        specs = mark_images(plan_features(features, config.columns, shapes), files)
        row_specs = specs  # what one row writes (the size estimate)
    else:
        sequence = plan_sequence(config.sequence, features, config.columns, shapes)
        specs = list(sequence.context)  # the manifest's features: the context
        row_specs = [*sequence.context, *sequence.steps] if sequence.grouped else specs
        _check_sequence_key(sequence, schema, len(config.splits))
        if config.layout == "tfds":
            raise SchemaError(
                "layout tfds: TFDS reads Examples of fixed features, not SequenceExamples; "
                "use layout flat or tfx for a sequence: job"
            )
    check_layout_features(config.layout, specs)
    _check_split_key(config, schema)
    source_specs = _source_specs(schema, config, sample, work[0].path)
    split_before = len(config.splits) > 1 and (
        preprocess is not None
        or files is not None  # a row's split: a hash of its references, not of the files
        or (sequence is None and source_specs != tuple(specs))
        or (sequence is not None and sequence.grouped)  # rows take their sequence's split
    )
    keyed = config.split_key is not None or (sequence is not None and sequence.grouped)
    if split_before and not keyed and source_specs is None:
        raise SchemaError(
            "splits: without split_key a row's split is a hash of its source values, and a "
            "column of the input cannot be serialized without its options; set split_key"
        )
    fit_split = None
    if preprocess is not None and artifacts is None and preprocess.analyzers():
        fit_split = config.analysis_split()
    new_columns: list[str] = []
    if config.expect_schema:  # before anything is deleted or written
        expected = load_expected(config.expect_schema)
        new_columns = check_drift(expected, specs, config.expect_schema)
    ratio = output_bytes_per_input_byte(
        work[0],
        sample,
        row_specs if preprocess is None and files is None else source_specs,
        _compressor(config),
        config.csv.header and fmt == "csv",
        file_rows,
        0.0 if files is None else file_bytes_per_row(files, sample),
    )
    if files is not None and fmt in ("csv", "jsonl"):  # a table of references: rows are work
        header = config.csv.header and fmt == "csv"

        def rows_of(item: WorkItem) -> float:
            return item.source_bytes / csv_bytes_per_row(item.path, header)

        work = cut_reference_tables(work, fmt, config.csv, rows_of)
    elif fmt in ("csv", "jsonl"):  # a large file: byte ranges, each its own work item
        work = cut_text_files(work, fmt, config.csv)
    grouped = config.num_shards > 0 or len(config.shuffle) == len(config.splits)
    shards = plan_shards(work, ratio, config.splits, config.shard_mb, config.num_shards, grouped)
    return JobPlan(
        config=config,
        paths=tuple(paths),
        fmt=fmt,
        schema=schema,
        specs=tuple(specs),
        work=tuple(work),
        shards=shards,
        preprocess=preprocess,
        artifacts=artifacts,
        new_columns=tuple(new_columns),
        source_specs=source_specs,
        split_before_preprocess=split_before,
        fit_split=fit_split,
        sequence=sequence,
        sequence_buckets=sequence_buckets(shards.estimated_bytes) if sequence else 0,
        input_bytes=sum(sizes.values()),
        files=files,
        missing_columns=missing,
    )
