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

from pipeline.job.config import ConfigError, JobConfig, config_from_json, load_config
from pipeline.job.plan import JobPlan, plan_job
from pipeline.output.manifest import Manifest, StoredFeature, manifest_path
from transforms.batch import source_rows, take_rows
from transforms.convert import convert_batch
from transforms.encode.records import EncodedBatch, concat_batches
from transforms.encode.schema import FeatureSpec
from transforms.fs import FileSystems
from transforms.hashing import hash_bytes
from transforms.preprocess.artifacts import STATISTICS_NAME, read_artifacts, transform_dir
from transforms.preprocess.chain import prepare_fitted
from transforms.read.work import read_work_item

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
    manifest: Manifest,
    inputs: Sequence[str] | None = None,
    config_path: str | None = None,
) -> tuple[JobConfig, str]:
    """The config the run used, and where it came from: the manifest's `config` section, or
    the YAML file `config_path` (for a manifest without one). The inputs are `inputs` if given,
    else the files the run read (as the manifest lists them). Raises ConfigError."""
    if config_path:
        ran = (manifest.config or {}).get("input") or list(manifest.sources)
        flags = {"input": list(inputs or ran or []) or None, "output": output}
        config, origin = load_config(config_path, flags), config_path
    else:
        section = manifest.config
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


def plan_source(config: JobConfig, features: Sequence[StoredFeature]) -> SourcePlan:
    """Plan the job over the source as `convert` does (writing and deleting nothing).

    Raises ValueError/OSError as `convert` would (no matching input, unreadable file, bad
    transforms), and ConfigError when the config has analyzers but the output holds none."""
    job = plan_job(config)
    fitted: Mapping[int, Any] = {}
    if job.preprocess is not None:
        if job.preprocess.analyzers() and job.artifacts is None:
            raise ConfigError(
                f"the config has analyzer steps but {transform_dir(config.output)} holds no "
                "fitted results; verify applies the run's artifacts and never refits them"
            )
        if job.artifacts is not None:
            fitted = prepare_fitted(job.preprocess, read_artifacts(job.artifacts, job.preprocess))
    specs = tuple(f.spec for f in features)
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
    """The records the job writes for the source, batch by batch, with the job's own per-batch
    conversion (transforms/convert.py): read -> (select) -> split -> preprocess (the fitted
    artifacts) -> encode.

    `select` keeps some rows of each batch (a sample, or rows to look at again), right after
    the read. Every stage sets aside the rows it cannot take, as the job does.
    """
    job, config = plan.job, plan.job.config
    # The job's own stages, with the run's features and bare Example bytes.
    conversion = dataclasses.replace(job.conversion(framed=False), specs=plan.specs)
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
            if taken:
                results, failed = convert_batch(conversion, batch, plan.fitted)
                bad += failed
            records = concat_batches([r.records for r in results]) if results else None
            rows = np.concatenate([r.rows for r in results]) if results else empty
            ids = np.concatenate([r.split_ids for r in results]) if results else empty
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
