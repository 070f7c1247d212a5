"""`tfrecord-etl verify OUTPUT`: check a finished output against its manifest and, optionally,
against its source, so a scheduled job can tell that no row was lost, duplicated or changed.

Without a source: every shard the manifest lists exists and no other file is named like a shard;
each decompresses; every frame's crcs hold; every record parses as the manifest's features; the
records per split and in total, each feature's null count and the rows in `_errors/` agree with
the manifest. With the source: the records are derived again from it with the job's own
functions and the run's config and fitted artifacts, and compared per split as multisets (so
record order and shard boundaries do not matter): a row whose record is missing, changed (with
the columns that differ), in another split, duplicated or extra is named by source file and row
or by shard and record. Rows the run set aside in `_errors/` are expected to be absent.
"""

from __future__ import annotations

import collections
import dataclasses
import json
from typing import TYPE_CHECKING, Any

from google.protobuf.message import DecodeError

from pipeline.output.dataset import Dataset, read_dataset
from pipeline.output.dataset.ledger import span_dirs, span_name
from pipeline.output.manifest import Manifest, SplitRule, manifest_path, read_manifest
from pipeline.verify.against_source.check import derive_expected, report_comparison
from pipeline.verify.files import (
    check_counts,
    check_indexes,
    check_listing,
    read_errors,
    read_records,
)
from pipeline.verify.records import RecordChecker
from pipeline.verify.report import Finding, Findings, VerifyReport
from transforms import fs
from transforms.stats.paths import STATISTICS_FILE

if TYPE_CHECKING:
    from pipeline.job.config import JobConfig

# The source side (against_source/source.py: the config, the plan, the readers, and with them
# Beam's filesystems) is imported when a source is compared, not for a check of the output alone.

__all__ = ["SourceRequest", "verify_dataset", "verify_output"]


@dataclasses.dataclass(frozen=True)
class SourceRequest:
    """Compare with the source: `inputs` (default: the files the run read), the settings of
    `config` (default: the manifest's config section), every row or a seeded sample of about
    `sample` of them (a fraction in (0, 1], or with `sample_count` about that many rows)."""

    inputs: tuple[str, ...] = ()
    config: str | None = None
    sample: float | None = None
    sample_count: int | None = None
    seed: int = 0


def _check_split_config(config: JobConfig, manifest: Manifest, origin: str) -> None:
    """ConfigError unless the config splits rows as the run did (names, weights, key, salt)."""
    from pipeline.job.config import ConfigError

    split = manifest.split or SplitRule({"train": 1})
    ours = {"weights": list(config.splits), "key": config.split_key, "salt": config.split_salt}
    theirs = {
        "weights": [tuple(w) for w in split.weights.items()],
        "key": split.key,
        "salt": split.salt,
    }
    if ours != theirs:
        raise ConfigError(
            f"{origin}: splits {ours} are not the output's {theirs}; pass the run's config"
        )


def verify_output(
    output: str, source: SourceRequest | None = None, limit: int = 20
) -> VerifyReport:
    """Check the output in `output` (and with `source`, against its source); the report. An
    incremental dataset is checked span by span (`verify_dataset`).

    Raises FileNotFoundError without a manifest, ValueError (ConfigError, ...) or OSError when
    the source cannot be planned as the run did it: nothing was checked then."""
    if not fs.exists(manifest_path(output)):
        dataset = read_dataset(output)
        if dataset is not None:
            return verify_dataset(output, dataset, source, limit)
    return _verify_one(output, source, limit)


def verify_dataset(
    output: str, dataset: Dataset, source: SourceRequest | None = None, limit: int = 20
) -> VerifyReport:
    """Check every live span of the incremental dataset in `output` as an output of its own
    (with `source`: each against the inputs its own run read, unless `source` names them), and
    the dataset: each span dataset.json lists is there with the rows and bad rows it says, no
    other span directory is (a run that did not finish, a retired span not yet removed), and
    the whole dataset's statistics count each split's rows."""
    if source is not None and source.inputs:
        raise ValueError(
            f"{output}: an incremental dataset is compared with its sources span by span, each "
            "with the inputs its run read: drop --source PATH, or verify one span's directory"
        )
    findings = Findings(limit)
    on_disk = span_dirs(output)
    for number in sorted(set(on_disk) - set(dataset.numbers)):
        findings.add(
            Finding(
                "stale",
                f"{fs.join(output, span_name(number))}: a span directory dataset.json does not "
                "list (a run that did not finish, or a retired span); the next "
                "convert --incremental removes it",
                file=span_name(number),
            )
        )
    checked: dict[str, Any] = {}
    for span in dataset.spans:
        where = fs.join(output, span.name)
        if span.span not in on_disk or not fs.exists(manifest_path(where)):
            findings.add(
                Finding(
                    "files",
                    f"{where}: span {span.span} is in dataset.json, but not its "
                    "directory and manifest",
                    file=span.name,
                )
            )
            continue
        report = _verify_one(where, source, limit)
        kept = collections.Counter(f.check for f in report.findings.kept)
        for finding in report.findings.kept:
            findings.add(finding)
        for check, count in report.findings.counts.items():
            findings.more(check, count - kept[check])
        manifest = read_manifest(where)
        if (manifest.rows, manifest.bad_row_count) != (span.rows, span.bad):
            findings.add(
                Finding(
                    "counts",
                    f"{where}: dataset.json says {span.rows} rows and {span.bad} bad, the span's "
                    f"manifest {manifest.rows} and {manifest.bad_row_count}",
                    file=span.name,
                )
            )
        checked = _add_checked(checked, report.checked)
    checked["spans"] = dataset.numbers
    if checked:
        _check_whole_statistics(output, dataset, checked, findings)
    return VerifyReport(output, checked, findings)


def _check_whole_statistics(
    output: str, dataset: Dataset, checked: dict[str, Any], findings: Findings
) -> None:
    """The whole dataset's statistics (when dataset.json names them) count each split's rows."""
    from tensorflow_metadata.proto.v0 import statistics_pb2

    whole = dataset.whole_statistics()
    if whole is None:
        return
    for split in whole.splits:
        path = fs.join(output, *whole.dir.split("/"), split, STATISTICS_FILE)
        rows = checked["manifest"]["splits"].get(split, {}).get("rows", 0)
        stats = statistics_pb2.DatasetFeatureStatisticsList()
        try:
            with fs.open_read(path) as f:
                stats.ParseFromString(f.read())
            counted = stats.datasets[0].num_examples
        except (OSError, IndexError, DecodeError) as err:
            findings.add(Finding("files", f"{path}: the dataset's statistics: {err}", file=path))
            continue
        if counted != rows:
            findings.add(
                Finding(
                    "counts",
                    f"{path}: the dataset's statistics count {counted} rows of {split}, its "
                    f"spans hold {rows}",
                    file=path,
                )
            )


def _add_checked(total: dict[str, Any], one: dict[str, Any]) -> dict[str, Any]:
    """The `checked` sections of two spans' reports added up."""
    if not total:
        return json.loads(json.dumps(one))  # a copy
    m, n = total["manifest"], one["manifest"]
    m["rows"] = (m["rows"] or 0) + (n["rows"] or 0)
    m["bad_rows"] += n["bad_rows"]
    for name, s in n["splits"].items():
        mine = m["splits"].setdefault(name, {"rows": 0, "files": 0})
        mine["rows"] += s["rows"]
        mine["files"] += s["files"]
    r, q = total["records"], one["records"]
    r["read"] += q["read"]
    r["files"] += q["files"]
    for name, count in q["per_split"].items():
        r["per_split"][name] = r["per_split"].get(name, 0) + count
    if total.get("source") and one.get("source"):
        for key in ("files", "rows_compared", "rows_bad", "rows_filtered"):
            total["source"][key] += one["source"][key]
    return total


def _verify_one(output: str, source: SourceRequest | None, limit: int) -> VerifyReport:
    manifest = read_manifest(output, strict=True)
    if manifest.sequence is not None:
        raise ValueError(f"{output}: verify checks tf.train.Example outputs, not SequenceExamples")
    findings = Findings(limit)
    plan, origin, select, fraction = None, None, None, None
    if source is not None:
        from pipeline.output.drift import SchemaDriftError, check_drift
        from pipeline.verify.against_source.source import plan_source, sample_rows, source_config
        from transforms.read.files import InputError

        config, origin = source_config(output, manifest, source.inputs, source.config)
        _check_split_config(config, manifest, origin)
        try:
            plan = plan_source(config, manifest.features)
        except InputError as err:
            if source.inputs:
                raise
            raise InputError(
                f"{err} (the source as the run named it, from the manifest; pass --source PATH "
                "where it is now)"
            ) from err
        fraction = source.sample
        if source.sample_count is not None:
            read = manifest.rows + manifest.bad_row_count
            fraction = min(1.0, source.sample_count / max(read, 1))
        if fraction is not None and fraction < 1.0:
            select = sample_rows(fraction, source.seed)
        else:
            fraction = None
        try:
            new = check_drift(manifest.features, plan.job.specs, manifest_path(output))
        except SchemaDriftError as err:
            findings.add(Finding("schema", f"{err}; values are not compared"))
            plan = None
        else:
            if new:
                findings.add(
                    Finding(
                        "schema",
                        f"the source now has column(s) {new} that the "
                        "output does not (the run would have written them)",
                    )
                )
    existing = check_listing(output, manifest, findings)
    errors = read_errors(output, manifest, findings)
    comparison, stats = None, None
    if plan is not None:
        ran = (manifest.config or {}).get("input") or list(manifest.sources)
        comparison, stats = derive_expected(plan, errors, ran, select, findings)
    checker = RecordChecker(manifest.features, findings, manifest.rows)
    per_split = read_records(output, manifest, existing, checker, comparison, findings)
    checker.finish()
    check_counts(manifest, per_split, findings)
    check_indexes(output, manifest, findings)
    if comparison is not None:
        report_comparison(plan, comparison, findings)
    checked: dict[str, Any] = {
        "manifest": {
            "rows": manifest.rows,
            "splits": {
                n: {"rows": e.rows, "files": len(e.files)} for n, e in manifest.splits.items()
            },
            "compression": manifest.compression,
            "features": len(manifest.features),
            "bad_rows": manifest.bad_row_count,
        },
        "records": {
            "read": sum(per_split.values()),
            "files": len(existing),
            "per_split": per_split,
        },
        "source": None,
    }
    if source is not None:
        checked["source"] = {
            "files": 0 if plan is None else len(plan.job.paths),
            "config_from": origin,
            "sample": fraction,
            "seed": source.seed,
            "rows_compared": 0 if stats is None else stats["compared"],
            "rows_bad": 0 if stats is None else stats["bad"],
            "rows_filtered": 0 if stats is None else stats["filtered"],
        }
    return VerifyReport(output, checked, findings)
