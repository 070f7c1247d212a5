"""The whole job in one place: read -> (split) -> preprocess -> files -> encode -> write ->
manifest.

What can be known before the job runs is planned and checked in pipeline/job/plan.py.
"""

from __future__ import annotations

import uuid

import apache_beam as beam
from apache_beam.io.filesystems import FileSystems

from pipeline.engines.finish import finish_job
from pipeline.job.plan import JobPlan
from transforms.deadletter import ERRORS_DIR
from transforms.deadletter.beam import CountBadRows, WriteErrors
from transforms.encode.beam import EncodeExamples, MergeStats, split_tag
from transforms.files.beam import ReadFiles
from transforms.preprocess.artifacts import transform_dir
from transforms.preprocess.beam import FitPreprocess, Preprocess, WriteArtifacts
from transforms.read.beam import ReadTable
from transforms.sequence.beam import EncodeSequences
from transforms.split.beam import AssignSplits, KeepSplit
from transforms.stats.beam import MergeStatistics, WriteStatistics
from transforms.write.beam import WriteShards
from transforms.write.layout import shard_prefix, shard_suffix

__all__ = ["build_pipeline"]


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
    if plan.files is not None:
        read = batches | "ReadFiles" >> ReadFiles(conversion)
        batches = read.batches  # TableBatch: a part of a batch, its files' contents in columns
        bad.append(read.bad)
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
            config.output, [name for name, _ in config.splits], plan.specs, config.sketches
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
                member_bytes=config.member_bytes(),
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
            finish_job,
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
