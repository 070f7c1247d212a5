"""The whole job in one place: read -> (split) -> preprocess -> encode -> write -> manifest.

What can be known before the job runs is planned and checked in pipeline/plan.py.
"""

from __future__ import annotations

import dataclasses
import logging
import uuid
from collections.abc import Mapping, Sequence

import apache_beam as beam
from apache_beam.io.filesystems import FileSystems

from pipeline import __version__
from pipeline.config import config_to_json
from pipeline.layouts import layout_section, write_layout_files
from pipeline.lease import check_lease, release_lease
from pipeline.manifest import BadRowFiles, Manifest, Sharding, SplitRule, write_manifest
from pipeline.output_dir import remove_empty_dir
from pipeline.plan import JobPlan
from pipeline.schema_pbtxt import write_output_schema
from pipeline.sequence_manifest import sequence_section
from transforms.deadletter import ERRORS_DIR, CountBadRows, WriteErrors, check_bad_rows
from transforms.encode.beam import EncodeExamples, MergeStats, split_tag
from transforms.encode.records import BatchStats
from transforms.preprocess.artifacts import manifest_section, transform_dir
from transforms.preprocess.beam import FitPreprocess, Preprocess, WriteArtifacts
from transforms.read.beam import ReadTable
from transforms.read.files import InputError
from transforms.sequence.beam import EncodeSequences
from transforms.split.beam import AssignSplits, KeepSplit
from transforms.stats.beam import MergeStatistics, WriteStatistics
from transforms.write.beam import WriteShards
from transforms.write.files import ShardFile
from transforms.write.layout import shard_prefix, shard_suffix

__all__ = ["build_pipeline"]


def _finish(
    _: None,
    plan: JobPlan,
    shards: list[ShardFile],
    stats: BatchStats,
    bad: tuple[int, str],
    error_files: list[str],
    temp_dir: str,
    run_id: str | None,
    transform_files: Sequence[str] = (),
    statistics: Mapping[str, str] | None = None,
) -> str:
    """Write the manifest, or raise BadRowsError (and write none) past the bad-row limits.

    Runs after every shard and every error file is in place (they are its side inputs). With
    `run_id` (the run's output lease, pipeline/lease.py), the manifest is written only while the
    lease still names this run (LeaseLostError otherwise), and the lease is removed after it."""
    config = plan.config
    bad_count, first = bad
    if stats.rows == 0 and bad_count == 0:
        dropped = " (or the transforms' filters dropped every row)" if plan.preprocess else ""
        raise InputError(
            f"{', '.join(plan.paths)}: no data row in the input{dropped}; nothing to convert"
        )
    errors_dir = FileSystems.join(config.output, ERRORS_DIR)
    good = stats.steps if plan.sequence is not None and plan.sequence.grouped else stats.rows
    check_bad_rows(bad_count, good, config.max_bad_rows, config.max_bad_fraction, first, errors_dir)
    if not error_files:
        remove_empty_dir(errors_dir)  # the error sink's temp dir, on filesystems that have dirs
    remove_empty_dir(temp_dir)
    transform = None
    if plan.preprocess is not None:
        transform = manifest_section(
            plan.preprocess,
            list(transform_files),
            config.output,
            config.transform_artifacts,
            plan.fit_split,
        )
    shuffle = {"splits": list(config.shuffle), "seed": config.shuffle_seed}
    manifest = Manifest.build(
        specs=plan.specs,
        null_counts=stats.nulls,
        rows={name: stats.split_rows.get(name, 0) for name, _ in config.splits},
        shards={name: [f for f in shards if f.split == name] for name, _ in config.splits},
        output_dir=config.output,
        compression=config.compression,
        sources=plan.paths,
        source_format=plan.fmt,
        versions={"tfrecord_etl": __version__, "apache_beam": beam.__version__},
        transform=transform,
        split=SplitRule(dict(config.splits), config.split_key, config.split_salt),
        sharding=Sharding(
            config.num_shards,
            config.shard_mb,
            plan.shards.estimated_bytes,
            shuffle if config.shuffle else None,
        ),
        bad_rows=BadRowFiles(bad_count, tuple(sorted(error_files))),
        # The effective config (inputs as matched, format as detected): enough to derive the
        # records again from the source (tfrecord-etl verify).
        config=config_to_json(dataclasses.replace(config, inputs=plan.paths, format=plan.fmt)),
        layout=layout_section(config.layout),
        sequence=sequence_section(plan.sequence, stats),
        statistics=statistics,
    )
    if run_id is not None:
        check_lease(config.output, run_id)  # right before the commit
    write_layout_files(config.output, manifest)  # TFDS or TFX metadata, if the layout has any
    artifacts = transform_dir(config.output) if transform_files else None
    if plan.sequence is None:  # a schema of Examples (SequenceExamples: none yet)
        schema = write_output_schema(config.output, manifest, plan.preprocess, artifacts)
        manifest = dataclasses.replace(manifest, schema=schema)
    path = write_manifest(config.output, manifest)
    if run_id is not None:
        try:
            release_lease(config.output, run_id)
        except Exception as err:  # committed already: the launcher tries again, else the user
            logging.warning("%s: the output's lease was not removed: %s", config.output, err)
    return path


def build_pipeline(
    p: beam.Pipeline, plan: JobPlan, run_id: str | None = None, progress_dir: str | None = None
) -> None:
    """Wire the job onto `p`; `run_id`: the run's output lease, checked before the manifest is
    written (None: no lease, as in a staged template); `progress_dir`: where the shard writers
    report what they have written, for the launcher's progress line (None: no reports)."""
    config = plan.config

    def read() -> ReadTable:
        return ReadTable(plan.shards.tasks, plan.fmt, plan.schema, config.csv, config.batch_rows)

    conversion = plan.conversion()  # the stages' functions (transforms/convert.py)

    def assign_splits() -> AssignSplits:
        return AssignSplits(conversion)

    @beam.ptransform_fn
    def fit_input(pbegin: beam.pvalue.PBegin) -> beam.PCollection:
        """The rows analyzers are fitted on: the source, or its fit split alone."""
        batches = (pbegin | "ReadTable" >> read()).batches
        if plan.fit_split is None:
            return batches
        batches = (batches | "AssignSplits" >> assign_splits()).batches
        return batches | f"KeepSplit[{plan.fit_split}]" >> KeepSplit(plan.fit_split)

    source = p | "ReadTable" >> read()
    batches = source.batches  # TableBatch per <= batch_rows rows of one file
    bad = [source.bad]  # dead-letter dicts: the rows a step could not take
    if plan.split_before_preprocess:
        assigned = batches | "AssignSplits" >> assign_splits()
        batches = assigned.batches  # TableBatch of one split each
        bad.append(assigned.bad)
    transform_files = []  # side inputs of WriteManifest: the artifact files, if any
    if plan.preprocess is not None:
        fitted = p | "FitPreprocess" >> FitPreprocess(
            plan.preprocess, fit_input, plan.artifacts
        )  # one {step: result}: each analysis pass reads the input again
        preprocessed = batches | "Preprocess" >> Preprocess(
            conversion, beam.pvalue.AsSingleton(fitted)
        )
        batches = preprocessed.batches  # TableBatch (rows: source row numbers once some dropped)
        bad.append(preprocessed.bad)
        written = fitted | "WriteTransformArtifacts" >> WriteArtifacts(
            plan.preprocess, transform_dir(config.output)
        )  # str: path of a statistics or vocabulary file
        transform_files.append(beam.pvalue.AsList(written))
    temp_dir = FileSystems.join(config.output, f"beam-temp-shards-{uuid.uuid4().hex[:16]}")
    if plan.sequence is not None and plan.sequence.grouped:  # rows meet by bucket of their key
        encoded = batches | "EncodeSequences" >> EncodeSequences(
            conversion, temp_dir, plan.sequence_buckets
        )
    else:
        encoded = batches | "EncodeExamples" >> EncodeExamples(
            conversion, statistics=config.stats and plan.sequence is None
        )
    # records (or one output per split): EncodedBatch; stats: BatchStats; statistics (with
    # --stats): (split, SplitStats) per bundle
    statistics = {}  # side input of WriteManifest: {split: statistics file}
    if config.stats and plan.sequence is None:  # Examples only (docs/statistics-and-schema.md)
        split_stats = (
            encoded.statistics | "MergeStatistics" >> MergeStatistics()
        )  # (split, SplitStats): the encoder's per bundle, merged per split
        written = split_stats | "WriteStatistics" >> WriteStatistics(
            config.output, [name for name, _ in config.splits], plan.specs
        )  # one {split: path relative to the output}
        statistics["statistics"] = beam.pvalue.AsSingleton(written)
    shards = []
    for name, _ in config.splits:
        records = encoded.records if len(config.splits) == 1 else encoded[split_tag(name)]
        shuffled = name in config.shuffle
        shards.append(
            records
            | f"WriteShards[{name}]"
            >> WriteShards(
                shard_prefix(config.output, name, config.layout),
                split=name,
                compression=config.compression,
                num_shards=config.num_shards or (plan.shards.num_shards[name] if shuffled else 0),
                sink=config.sink,
                progress_dir=progress_dir,
                level=config.compression_level,
                backend=config.gzip_backend,
                temp_dir=temp_dir,
                shuffle_seed=config.shuffle_seed if shuffled else None,
                target_bytes=plan.shards.target_bytes,
                estimated_bytes=plan.shards.estimated_bytes,
                suffix=shard_suffix(config.compression, config.layout),
            )  # ShardFile: a final shard
        )
    shards = tuple(shards) | "Shards" >> beam.Flatten()  # ShardFile
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
            temp_dir,
            run_id,
            *transform_files,
            **statistics,
        )
    )
