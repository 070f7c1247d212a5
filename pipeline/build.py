"""The whole job in one place: plan at construction, then read -> preprocess -> encode -> write
-> manifest."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import apache_beam as beam
import pyarrow as pa
from apache_beam.io.filesystems import FileSystems

from pipeline import __version__
from pipeline.config import JobConfig
from pipeline.manifest import build_manifest, manifest_path, read_manifest, write_manifest
from transforms.columns import infer_shape, leaf_array
from transforms.encode import BatchStats, EncodeExamples, MergeStats
from transforms.preprocess.artifacts import check_artifacts, manifest_section, transform_dir
from transforms.preprocess.beam import FitPreprocess, Preprocess, WriteArtifacts
from transforms.preprocess.plan import PreprocessPlan, plan_preprocess
from transforms.preprocess.spec import StepError
from transforms.read import (
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

SPLIT = "train"  # the one split until splits exist


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


def plan_job(config: JobConfig, *, clear_output: bool = True) -> JobPlan:
    """Match inputs, agree on one schema and map it to features; raises on anything known bad.

    `clear_output=False` (a dry run, which writes nothing) leaves the output directory alone.
    """
    paths = match_inputs(config.inputs)
    fmt = detect_format(paths, config.format)
    schema = input_schema(paths, fmt, config.csv)
    work = plan_work(paths, fmt)
    preprocess = plan_preprocess(config.transforms, schema) if config.transforms else None
    artifacts = None
    if config.transform_artifacts:
        if preprocess is None:
            raise StepError("transform_artifacts is given but the config has no transforms")
        artifacts = check_artifacts(config.transform_artifacts, preprocess)  # before clearing
    features = schema if preprocess is None else preprocess.output_schema
    shapes = _inferred_shapes(features, config, work, fmt, schema)
    specs = plan_features(features, config.columns, shapes)
    if clear_output:
        _clear_previous_output(config.output, config.overwrite)
    return JobPlan(
        config, tuple(paths), fmt, schema, tuple(specs), tuple(work), preprocess, artifacts
    )


def _finish(
    _: None, plan: JobPlan, files: list[str], stats: BatchStats, transform_files: Sequence[str] = ()
) -> str:
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
        rows={SPLIT: stats.rows},
        files={SPLIT: files},
        output_dir=plan.config.output,
        compression=plan.config.compression,
        sources=plan.paths,
        source_format=plan.fmt,
        versions={"tfrecord_etl": __version__, "apache_beam": beam.__version__},
        transform=transform,
    )
    return write_manifest(plan.config.output, manifest)


def build_pipeline(p: beam.Pipeline, plan: JobPlan) -> None:
    """Wire the job onto `p`."""
    config = plan.config

    def read() -> ReadTable:
        return ReadTable(plan.work, plan.fmt, plan.schema, config.csv, config.batch_rows)

    batches = p | "ReadTable" >> read()  # TableBatch per <= batch_rows rows of one file
    transform_files = []  # side inputs of WriteManifest: the artifact files, if any
    if plan.preprocess is not None:
        fitted = p | "FitPreprocess" >> FitPreprocess(
            plan.preprocess, read, plan.artifacts
        )  # one {step: result}: each analysis pass reads the input again
        batches = batches | "Preprocess" >> Preprocess(
            plan.preprocess, beam.pvalue.AsSingleton(fitted)
        )  # TableBatch, transformed (rows: source row numbers once a filter dropped some)
        written = fitted | "WriteTransformArtifacts" >> WriteArtifacts(
            plan.preprocess, transform_dir(config.output)
        )  # str: path of a statistics or vocabulary file
        transform_files.append(beam.pvalue.AsList(written))
    encoded = batches | "EncodeExamples" >> EncodeExamples(
        plan.specs, framed=config.sink == "blocks"
    )  # records: EncodedBatch; stats: BatchStats
    files = encoded.records | f"WriteShards[{SPLIT}]" >> WriteShards(
        FileSystems.join(config.output, SPLIT),
        compression=config.compression,
        num_shards=config.num_shards,
        sink=config.sink,
        level=config.compression_level,
        backend=config.gzip_backend,
    )  # str: final shard path
    stats = encoded.stats | "CountRows" >> beam.CombineGlobally(MergeStats())
    _ = (
        p
        | "Once" >> beam.Create([None])
        | "WriteManifest"
        >> beam.Map(
            _finish,
            plan,
            beam.pvalue.AsList(files),
            beam.pvalue.AsSingleton(stats),
            *transform_files,
        )
    )
