"""The whole job in one place: plan at construction, then read -> preprocess -> encode -> write
-> manifest."""

from __future__ import annotations

import dataclasses
import glob
import os
import shutil
from collections.abc import Sequence

import apache_beam as beam
import pyarrow as pa
from apache_beam.io.filesystems import FileSystems

from pipeline import __version__
from pipeline.config import JobConfig, config_to_json
from pipeline.drift import check_drift, load_expected
from pipeline.manifest import build_manifest, manifest_path, read_manifest, write_manifest
from transforms.columns import infer_shape, leaf_array
from transforms.deadletter import ERRORS_DIR, CountBadRows, WriteErrors, check_bad_rows
from transforms.encode import BatchStats, EncodeExamples, MergeStats, split_tag
from transforms.preprocess.artifacts import check_artifacts, manifest_section, transform_dir
from transforms.preprocess.beam import FitPreprocess, Preprocess, WriteArtifacts
from transforms.preprocess.plan import PreprocessPlan, plan_preprocess
from transforms.preprocess.spec import StepError
from transforms.read import (
    InputError,
    ReadTable,
    WorkItem,
    detect_format,
    input_schema,
    match_inputs,
    plan_work,
    read_work_item,
)
from transforms.schema import FeatureSpec, SchemaError, nested_list_columns, plan_features
from transforms.write import WriteShards

__all__ = ["JobPlan", "OutputExistsError", "build_pipeline", "plan_job"]


class OutputExistsError(FileExistsError):
    """The output directory already holds a complete output."""


@dataclasses.dataclass(frozen=True)
class JobPlan:
    """Everything known at construction: files, format, schema, features, work items.

    `schema` is the input's; `specs` are planned from the schema after preprocessing.
    """

    config: JobConfig
    paths: tuple[str, ...]
    fmt: str
    schema: pa.Schema
    specs: tuple[FeatureSpec, ...]
    work: tuple[WorkItem, ...]
    preprocess: PreprocessPlan | None = None  # None: no `transforms:` in the config
    artifacts: str | None = None  # fitted analyzers to reuse (a previous output's transform/)
    new_columns: tuple[str, ...] = ()  # features the expected schema (expect_schema) lacks


def _inferred_shapes(
    schema: pa.Schema,
    config: JobConfig,
    work: Sequence[WorkItem],
    fmt: str,
    source_schema: pa.Schema | None = None,
) -> dict[str, tuple[int, ...]]:
    """Shapes of nested list columns without a configured shape, from the first batch.

    `schema` is the one the features come from; `source_schema` (default: the same) the
    input's. A column preprocessing made or changed has no value to look at: it needs a shape.
    """
    source_schema = schema if source_schema is None else source_schema
    needed = [
        (name, path)
        for name, path in nested_list_columns(schema)
        if config.columns.get(name) is None or config.columns[name].shape is None
    ]
    if not needed or not work:
        return {}
    first = next(read_work_item(work[0], fmt, source_schema, config.csv, config.batch_rows), None)
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
        shape = None if first is None else infer_shape(leaf_array(first.table, path))
        if shape is None:
            raise SchemaError(
                f"column {name!r}: cannot infer the shape of a nested list from "
                f"{work[0].path} (no value in its first batch); set columns.{name}.shape"
            )
        shapes[name] = shape
    return shapes


def _clear_previous_output(output: str, overwrite: bool) -> None:
    """Refuse to replace a complete output unless asked; if asked, remove manifest and shards."""
    path = manifest_path(output)
    if not FileSystems.exists(path):
        return
    if not overwrite:
        raise OutputExistsError(
            f"{output} already holds a complete output ({path}); pass --overwrite to replace it"
        )
    old = read_manifest(output)
    FileSystems.delete([path])  # first: an interrupted delete never leaves a manifest behind
    files = [FileSystems.join(output, f) for s in old["splits"].values() for f in s["files"]]
    files += [FileSystems.join(output, f) for f in old.get("transform", {}).get("files", [])]
    existing = [f for f in files if FileSystems.exists(f)]
    if existing:
        FileSystems.delete(existing)


def _clear_leftovers(output: str, splits: Sequence[tuple[str, int]]) -> None:
    """Remove what an earlier run that did not finish may have left: shards of the configured
    splits (of any shard count), the sinks' temp directories, bad-row files. Runs once no
    manifest is there (a complete output is refused or cleared first)."""
    patterns = [FileSystems.join(output, f"{name}-?????-of-?????*") for name, _ in splits]
    patterns += [
        FileSystems.join(output, "beam-temp-*", "*"),
        FileSystems.join(output, ERRORS_DIR, "*"),
        FileSystems.join(output, ERRORS_DIR, "beam-temp-*", "*"),
    ]
    old = [m.path for r in FileSystems.match(patterns) for m in r.metadata_list]
    if old:
        FileSystems.delete(old)
    if "://" not in output:  # a local filesystem also keeps the (now empty) temp directories
        for temp in glob.glob(
            os.path.join(glob.escape(output), "**", "beam-temp-*"), recursive=True
        ):
            shutil.rmtree(temp, ignore_errors=True)


def _remove_empty_dir(path: str) -> None:
    if (
        FileSystems.exists(path)
        and not FileSystems.match([FileSystems.join(path, "*")])[0].metadata_list
    ):
        FileSystems.delete([path])


def _check_split_key(config: JobConfig, schema: pa.Schema) -> None:
    key = config.split_key
    if key is None:
        return
    if key not in schema.names:
        raise SchemaError(
            f"split_key: column {key!r} is not in the output (columns: {schema.names})"
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


def plan_job(config: JobConfig, *, clear_output: bool = True) -> JobPlan:
    """Match inputs, agree on one schema and map it to features; raises on anything known bad.

    `clear_output=False` (a dry run, which writes nothing) leaves the output directory alone.
    """
    paths = match_inputs(config.inputs)
    fmt = detect_format(paths, config.format)
    schema = input_schema(paths, fmt, config.csv)
    work = plan_work(paths, fmt)
    if not work:  # Parquet files without a row group
        raise InputError(f"{', '.join(paths)}: no data row in the input (nothing to convert)")
    preprocess = plan_preprocess(config.transforms, schema) if config.transforms else None
    artifacts = None
    if config.transform_artifacts:
        if preprocess is None:
            raise StepError("transform_artifacts is given but the config has no transforms")
        artifacts = check_artifacts(config.transform_artifacts, preprocess)  # before clearing
    if preprocess is not None and artifacts is None and preprocess.analyzers():
        if len(config.splits) > 1:
            # Fitting on every row would leak eval/test statistics into train.
            raise StepError(
                "transforms: full-pass analyzers cannot be fitted while splits are configured "
                "(they would see every split); fit them in a run without splits (or on the "
                "train data alone) and pass its transform/ directory as --transform-artifacts"
            )
    features = schema if preprocess is None else preprocess.output_schema
    shapes = _inferred_shapes(features, config, work, fmt, schema)
    specs = plan_features(features, config.columns, shapes)
    _check_split_key(config, features)
    new_columns: list[str] = []
    if config.expect_schema:  # before anything is deleted or written
        expected = load_expected(config.expect_schema)
        new_columns = check_drift(expected, specs, config.expect_schema)
    if clear_output:
        _clear_previous_output(config.output, config.overwrite)
        _clear_leftovers(config.output, config.splits)
    return JobPlan(
        config,
        tuple(paths),
        fmt,
        schema,
        tuple(specs),
        tuple(work),
        preprocess,
        artifacts,
        tuple(new_columns),
    )


def _finish(
    _: None,
    plan: JobPlan,
    shards: list[tuple[str, str]],
    stats: BatchStats,
    bad: tuple[int, str],
    error_files: list[str],
    transform_files: Sequence[str] = (),
) -> str:
    """Write the manifest, or raise BadRowsError (and write none) past the bad-row limits.

    Runs after every shard and every error file is in place (they are its side inputs)."""
    config = plan.config
    bad_count, first = bad
    if stats.rows == 0 and bad_count == 0:
        dropped = " (or the transforms' filters dropped every row)" if plan.preprocess else ""
        raise InputError(
            f"{', '.join(plan.paths)}: no data row in the input{dropped}; nothing to convert"
        )
    errors_dir = FileSystems.join(config.output, ERRORS_DIR)
    check_bad_rows(
        bad_count, stats.rows, config.max_bad_rows, config.max_bad_fraction, first, errors_dir
    )
    if not error_files:
        _remove_empty_dir(errors_dir)  # the error sink's temp dir, on filesystems that have dirs
    transform = None
    if plan.preprocess is not None:
        transform = manifest_section(
            plan.preprocess,
            list(transform_files),
            plan.config.output,
            plan.config.transform_artifacts,
        )
    manifest = build_manifest(
        specs=plan.specs,
        null_counts=stats.nulls,
        rows={name: stats.split_rows.get(name, 0) for name, _ in config.splits},
        files={name: [f for s, f in shards if s == name] for name, _ in config.splits},
        output_dir=plan.config.output,
        compression=plan.config.compression,
        sources=plan.paths,
        source_format=plan.fmt,
        versions={"tfrecord_etl": __version__, "apache_beam": beam.__version__},
        transform=transform,
    )
    manifest["split"] = {
        "weights": dict(config.splits),
        "key": config.split_key,
        "salt": config.split_salt,
    }
    manifest["bad_rows"] = {"count": bad_count, "files": sorted(error_files)}
    # The effective config (inputs as matched, format as detected): enough to derive the
    # records again from the source (tfrecord-etl verify).
    manifest["config"] = config_to_json(
        dataclasses.replace(config, inputs=plan.paths, format=plan.fmt)
    )
    return write_manifest(plan.config.output, manifest)


def build_pipeline(p: beam.Pipeline, plan: JobPlan) -> None:
    """Wire the job onto `p`."""
    config = plan.config

    def read() -> ReadTable:
        return ReadTable(plan.work, plan.fmt, plan.schema, config.csv, config.batch_rows)

    source = p | "ReadTable" >> read()
    batches = source.batches  # TableBatch per <= batch_rows rows of one file
    bad = [source.bad]  # dead-letter dicts: the rows a step could not take
    transform_files = []  # side inputs of WriteManifest: the artifact files, if any
    if plan.preprocess is not None:
        fitted = p | "FitPreprocess" >> FitPreprocess(
            plan.preprocess, read, plan.artifacts
        )  # one {step: result}: each analysis pass reads the input again
        preprocessed = batches | "Preprocess" >> Preprocess(
            plan.preprocess, beam.pvalue.AsSingleton(fitted)
        )
        batches = preprocessed.batches  # TableBatch (rows: source row numbers once some dropped)
        bad.append(preprocessed.bad)
        written = fitted | "WriteTransformArtifacts" >> WriteArtifacts(
            plan.preprocess, transform_dir(config.output)
        )  # str: path of a statistics or vocabulary file
        transform_files.append(beam.pvalue.AsList(written))
    encoded = batches | "EncodeExamples" >> EncodeExamples(
        plan.specs,
        framed=config.sink == "blocks",
        splits=config.splits,
        key=config.split_key,
        salt=config.split_salt,
    )  # records (or one output per split): EncodedBatch; stats: BatchStats
    shards = []  # (split, final shard path) per split
    for name, _ in config.splits:
        records = encoded.records if len(config.splits) == 1 else encoded[split_tag(name)]
        written = records | f"WriteShards[{name}]" >> WriteShards(
            FileSystems.join(config.output, name),
            compression=config.compression,
            num_shards=config.num_shards,
            sink=config.sink,
            level=config.compression_level,
            backend=config.gzip_backend,
        )  # str: final shard path
        shards.append(written | f"Tag[{name}]" >> beam.Map(lambda path, n=name: (n, path)))
    shards = tuple(shards) | "Shards" >> beam.Flatten()  # (split, final shard path)
    stats = encoded.stats | "CountRows" >> beam.CombineGlobally(MergeStats())
    bad_rows = tuple([*bad, encoded.bad]) | "BadRows" >> beam.Flatten()  # dead-letter dicts
    error_files = bad_rows | "WriteErrors" >> WriteErrors(
        FileSystems.join(config.output, ERRORS_DIR)
    )  # str: path of a JSON lines file
    bad_count = bad_rows | "CountBadRows" >> beam.CombineGlobally(CountBadRows())
    _ = (
        p
        | "Once" >> beam.Create([None])
        | "WriteManifest"
        >> beam.Map(
            _finish,
            plan,
            beam.pvalue.AsList(shards),
            beam.pvalue.AsSingleton(stats),
            beam.pvalue.AsSingleton(bad_count),
            beam.pvalue.AsList(error_files),
            *transform_files,
        )
    )
