"""The source side of `tfrecord-etl verify`: the job's config recovered, and the records the
source gives derived again with the job's own functions (read -> split -> preprocess with the
output's fitted artifacts, never refitted -> encode), optionally for a seeded sample of rows."""

from __future__ import annotations

import dataclasses
import json
import posixpath
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np
from apache_beam.io.filesystems import FileSystems

from pipeline.build import JobPlan, plan_job
from pipeline.config import ConfigError, JobConfig, config_from_json, load_config
from pipeline.manifest import manifest_path
from transforms.deadletter import isolate_bad_rows, source_rows, take_rows
from transforms.encode import EncodedBatch, concat_batches, encode_table
from transforms.preprocess.artifacts import STATISTICS_NAME, read_artifacts, transform_dir
from transforms.preprocess.hashing import hash_bytes
from transforms.preprocess.plan import apply_steps, prepare_fitted
from transforms.read import TableBatch, read_work_item
from transforms.schema import FeatureSpec
from transforms.split import assign_splits, split_batch

__all__ = [
    "ExpectedBatch",
    "RowSelect",
    "SourcePlan",
    "expected_records",
    "plan_source",
    "sample_rows",
    "source_config",
]

# (source file, source rows) -> which of those rows to take (bool per row)
RowSelect = Callable[[str, np.ndarray], np.ndarray]


def source_config(
    output: str,
    manifest: Mapping[str, Any],
    inputs: Sequence[str] | None = None,
    config_path: str | None = None,
) -> tuple[JobConfig, str]:
    """The config the run used, and where it came from: the manifest's `config` section, or
    the YAML file `config_path` (for a manifest without one). The inputs are `inputs` if given,
    else the files the run read (as the manifest lists them). Raises ConfigError."""
    if config_path:
        ran = manifest.get("config", {}).get("input") or manifest.get("sources")
        flags = {"input": list(inputs or ran or []) or None, "output": output}
        config, origin = load_config(config_path, flags), config_path
    else:
        section = manifest.get("config")
        origin = f"{manifest_path(output)}: key 'config'"
        if section is None:
            raise ConfigError(
                f"{manifest_path(output)} has no config section (an older writer); pass "
                "--config FILE.yaml, the config of the run, to compare with the source"
            )
        config = config_from_json(section, origin)
        if inputs:
            config = dataclasses.replace(config, inputs=tuple(inputs))
    # The output's own copy of the fitted analyzers; nothing is refitted, nothing is written.
    config = dataclasses.replace(
        config, output=output, overwrite=False, expect_schema=None, transform_artifacts=None
    )
    if config.transforms and _has_fitted(output):
        config = dataclasses.replace(config, transform_artifacts=transform_dir(output))
    return config, origin


def _has_fitted(output: str) -> bool:
    path = FileSystems.join(transform_dir(output), STATISTICS_NAME)
    if not FileSystems.exists(path):
        return False
    with FileSystems.open(path) as f:
        return bool(json.loads(f.read().decode("utf-8")).get("analyzers"))


@dataclasses.dataclass(frozen=True)
class SourcePlan:
    """What the derivation needs: the job's plan over the source, the features as the manifest
    has them (the run's shapes and options), and the fitted analyzers as the steps apply them."""

    job: JobPlan
    specs: tuple[FeatureSpec, ...]
    fitted: Mapping[int, Any]


def plan_source(config: JobConfig, features: Sequence[Mapping[str, Any]]) -> SourcePlan:
    """Plan the job over the source as `convert` does (writing and deleting nothing).

    Raises ValueError/OSError as `convert` would (no matching input, unreadable file, bad
    transforms), and ConfigError when the config has analyzers but the output holds none."""
    job = plan_job(config, clear_output=False)
    fitted: Mapping[int, Any] = {}
    if job.preprocess is not None:
        if job.preprocess.analyzers() and job.artifacts is None:
            raise ConfigError(
                f"the config has analyzer steps but {transform_dir(config.output)} holds no "
                "fitted results; verify applies the run's artifacts and never refits them"
            )
        if job.artifacts is not None:
            fitted = prepare_fitted(job.preprocess, read_artifacts(job.artifacts, job.preprocess))
    specs = tuple(FeatureSpec.from_json(f) for f in features)
    return SourcePlan(job, specs, fitted)


@dataclasses.dataclass(frozen=True)
class ExpectedBatch:
    """What one source batch gives: its records (unframed Example bytes) with the source row
    and split index of each, the rows no stage could take (dead-letter dicts), and how many
    rows the transforms' filters dropped."""

    source: str
    records: EncodedBatch | None
    rows: np.ndarray
    splits: np.ndarray
    bad: list[dict[str, Any]]
    filtered: int


def expected_records(plan: SourcePlan, select: RowSelect | None = None) -> Iterator[ExpectedBatch]:
    """The records the job writes for the source, batch by batch, with the job's functions:
    read -> (select) -> split assignment -> preprocess (fitted artifacts) -> encode, or, when
    the job hashes its own records (no transforms, default options), read -> encode -> split.

    `select` keeps some rows of each batch (a sample, or rows to look at again), right after
    the read. Every stage sets aside the rows it cannot take, as the job does.
    """
    job, config = plan.job, plan.job.config
    weights = [w for _, w in config.splits]
    index = {name: i for i, (name, _) in enumerate(config.splits)}

    def assign(b: TableBatch) -> list[TableBatch]:
        if not job.split_before_preprocess:
            return [b]
        return split_batch(b, config.splits, config.split_salt, config.split_key, job.source_specs)

    def preprocess(b: TableBatch) -> TableBatch | None:
        return apply_steps(job.preprocess, b, plan.fitted)

    def encode(b: TableBatch) -> tuple[EncodedBatch, np.ndarray, np.ndarray]:
        encoded, _ = encode_table(b.table, plan.specs, b.source, b.first_row, False, b.rows)
        ids = np.zeros(encoded.num_records, np.int64)
        if b.split is not None:
            ids[:] = index[b.split]
        elif len(weights) > 1:
            key = None if config.split_key is None else b.table.column(config.split_key)
            ids = assign_splits(
                weights, config.split_salt, key=key, buffer=encoded.buffer, offsets=encoded.offsets
            )
        return encoded, source_rows(b), ids

    empty = np.empty(0, np.int64)
    for item in job.work:
        read_bad: list[dict[str, Any]] = []
        batches = read_work_item(
            item, job.fmt, job.schema, config.csv, config.batch_rows, on_bad=read_bad.append
        )
        for batch in batches:
            bad, read_bad[:] = _selected(read_bad, select), []
            if select is not None:
                batch = take_rows(batch, np.flatnonzero(select(batch.source, source_rows(batch))))
            taken, results = batch.table.num_rows, []
            parts: list[TableBatch] = []
            if taken:
                assigned, failed = isolate_bad_rows(batch, assign, "split")
                parts, bad = assigned or [], bad + failed
            for part in parts:
                if job.preprocess is not None:
                    part, failed = isolate_bad_rows(part, preprocess, "transform")
                    bad += failed
                if part is not None and part.table.num_rows:
                    result, failed = isolate_bad_rows(part, encode, "encode")
                    bad += failed
                    if result is not None:
                        results.append(result)
            records = concat_batches([r[0] for r in results]) if results else None
            rows = np.concatenate([r[1] for r in results]) if results else empty
            ids = np.concatenate([r[2] for r in results]) if results else empty
            filtered = taken - len(rows) - sum(1 for b in bad if b["stage"] != "read")
            yield ExpectedBatch(item.path, records, rows, ids, bad, filtered)
        if read_bad:
            yield ExpectedBatch(item.path, None, empty, empty, _selected(read_bad, select), 0)


def _selected(bad: list[dict[str, Any]], select: RowSelect | None) -> list[dict[str, Any]]:
    if select is None:
        return list(bad)
    return [b for b in bad if b["row"] is not None and select(b["source"], np.array([b["row"]]))[0]]


_GOLDEN = np.uint64(0x9E3779B97F4A7C15)


def _mix(x: np.ndarray) -> np.ndarray:
    """splitmix64's finalizer: a 64-bit bijection that spreads every input bit."""
    x = x ^ (x >> np.uint64(30))
    x = x * np.uint64(0xBF58476D1CE4E5B9)
    x = x ^ (x >> np.uint64(27))
    x = x * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


def sample_rows(fraction: float, seed: int) -> RowSelect:
    """A seeded sample of about `fraction` of the rows: row r of a file named n is taken when
    mix(hash("seed:n") + r * golden) < fraction * 2**64; the same rows whatever the batching,
    the machine or the directory the file is in."""
    if not 0.0 < fraction <= 1.0:
        raise ValueError(f"a sample is a fraction in (0, 1], not {fraction}")
    threshold = np.uint64(min(int(fraction * 2.0**64), 2**64 - 1))

    def select(source: str, rows: np.ndarray) -> np.ndarray:
        base = np.uint64(hash_bytes(f"{seed}:{posixpath.basename(source)}".encode()))
        return _mix(base + np.asarray(rows, np.uint64) * _GOLDEN) < threshold

    return select
