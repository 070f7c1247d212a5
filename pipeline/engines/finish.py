"""The job's last step, in whichever engine ran it: the bad-row limits, then the manifest (with
the layout's metadata files and the schema) written once every shard is in place."""

from __future__ import annotations

import dataclasses
import functools
import importlib.metadata
import logging
from collections.abc import Mapping, Sequence
from typing import Any

from pipeline import __version__
from pipeline.job.config import config_to_json
from pipeline.job.plan import JobPlan
from pipeline.output.directory import remove_empty_dir
from pipeline.output.layouts import layout_section, write_layout_files
from pipeline.output.lease import check_lease, release_lease
from pipeline.output.manifest import BadRowFiles, Manifest, Sharding, SplitRule, write_manifest
from pipeline.output.schema import write_output_schema
from pipeline.output.sequence import sequence_section
from transforms import fs
from transforms.deadletter import ERRORS_DIR, check_bad_rows
from transforms.encode.records import BatchStats
from transforms.preprocess.artifacts import manifest_section, transform_dir
from transforms.read.files import InputError, name_files
from transforms.write.files import ShardFile
from transforms.write.index import write_index

__all__ = ["beam_version", "finish_job"]


@functools.cache
def beam_version() -> str:
    """The installed Beam's version, read without importing Beam (the manifest records it)."""
    return importlib.metadata.version("apache-beam")


def finish_job(
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
    indexes: Mapping[str, str] | None = None,
) -> str:
    """Write the manifest, or raise BadRowsError (and write none) past the bad-row limits.

    Runs after every shard and every error file is in place (they are its side inputs). With
    `run_id` (the run's output lease, pipeline/output/lease.py), the manifest is written only
    while the lease still names this run (LeaseLostError otherwise), and the lease is removed
    after it."""
    config = plan.config
    bad_count, first = bad
    if stats.rows == 0 and bad_count == 0:
        dropped = " (or the transforms' filters dropped every row)" if plan.preprocess else ""
        raise InputError(
            f"{name_files(plan.paths)}: no data row in the input{dropped}; nothing to convert"
        )
    errors_dir = fs.join(config.output, ERRORS_DIR)
    good = stats.steps if plan.sequence is not None and plan.sequence.grouped else stats.rows
    check_bad_rows(bad_count, good, config.max_bad_rows, config.max_bad_fraction, first, errors_dir)
    if not error_files:
        remove_empty_dir(errors_dir)  # the error sink's temp dir, on filesystems that have dirs
    remove_empty_dir(temp_dir)
    if config.index and indexes is None:
        indexes = {s.path: write_index(s.path, config.compression) for s in shards}
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
        versions={"tfrecord_etl": __version__, "apache_beam": beam_version()},
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
        indexes=indexes,
        input_schema=_input_schema(plan),
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


def _input_schema(plan: JobPlan) -> dict[str, Any] | None:
    """The manifest's `input_schema` of a `schema: unify` run: the unified schema (the input's
    columns and their Arrow types) and the columns each file lacked; None otherwise."""
    if plan.config.schema != "unify":
        return None
    return {
        "mode": "unify",
        "columns": {f.name: str(f.type) for f in plan.schema},
        "missing": {path: list(names) for path, names in plan.missing_columns.items()},
    }
