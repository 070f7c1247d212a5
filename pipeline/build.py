"""The whole job in one place: plan at construction, then read -> encode -> write -> manifest."""

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
    """Everything known at construction: files, format, schema, features, work items."""

    config: JobConfig
    paths: tuple[str, ...]
    fmt: str
    schema: pa.Schema
    specs: tuple[FeatureSpec, ...]
    work: tuple[WorkItem, ...]


def _inferred_shapes(
    schema: pa.Schema, config: JobConfig, work: Sequence[WorkItem], fmt: str
) -> dict[str, tuple[int, ...]]:
    """Shapes of nested list columns without a configured shape, from the first batch."""
    needed = [
        (name, path)
        for name, path in nested_list_columns(schema)
        if config.columns.get(name) is None or config.columns[name].shape is None
    ]
    if not needed or not work:
        return {}
    first = next(read_work_item(work[0], fmt, schema, config.csv, config.batch_rows), None)
    shapes = {}
    for name, path in needed:
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
    existing = [f for f in files if FileSystems.exists(f)]
    if existing:
        FileSystems.delete(existing)


def plan_job(config: JobConfig) -> JobPlan:
    """Match inputs, agree on one schema and map it to features; raises on anything known bad."""
    paths = match_inputs(config.inputs)
    fmt = detect_format(paths, config.format)
    schema = input_schema(paths, fmt, config.csv)
    work = plan_work(paths, fmt)
    shapes = _inferred_shapes(schema, config, work, fmt)
    specs = plan_features(schema, config.columns, shapes)
    _clear_previous_output(config.output, config.overwrite)
    return JobPlan(config, tuple(paths), fmt, schema, tuple(specs), tuple(work))


def _finish(_: None, plan: JobPlan, files: list[str], stats: BatchStats) -> str:
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
    )
    return write_manifest(plan.config.output, manifest)


def build_pipeline(p: beam.Pipeline, plan: JobPlan) -> None:
    """Wire the job onto `p`."""
    config = plan.config
    batches = p | "ReadTable" >> ReadTable(
        plan.work, plan.fmt, plan.schema, config.csv, config.batch_rows
    )  # TableBatch per <= batch_rows rows of one file
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
        >> beam.Map(_finish, plan, beam.pvalue.AsList(files), beam.pvalue.AsSingleton(stats))
    )
