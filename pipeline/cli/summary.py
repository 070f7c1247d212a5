"""The JSON summary a scheduler reads: one JSON object on one line, the last line of stdout of
`convert` and `verify` (docs/scheduling.md)."""

from __future__ import annotations

import datetime
import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the summary of `verify` is made without the manifest's module
    from pipeline.output.manifest import Manifest

__all__ = ["JOB", "run_summary", "split_counts", "summary_line"]

JOB = "tfrecord-etl"


def split_counts(manifest: Manifest) -> dict[str, dict[str, int]]:
    """Per split: the records written (`rows_out`) and the shard files."""
    return {
        name: {"rows_out": split.rows, "files": len(split.files)}
        for name, split in manifest.splits.items()
    }


def run_summary(
    *,
    status: str,
    exit_code: int,
    seconds: float,
    output: str | None,
    manifest: Manifest | None = None,
    date: datetime.date | None = None,
    **extra: Any,
) -> dict[str, Any]:
    """The summary of one run: what a scheduler logs, alerts on and hands to the next task.

    Bad rows are counted for the job, not per split: a row is set aside before it reaches a
    split's shards. `rows_in` = `rows_out` + `bad` (grouped SequenceExamples: the steps + `bad`,
    `rows_out` counting the sequences). Without a manifest the counts are null.
    """
    counts: dict[str, Any] = {"rows_in": None, "rows_out": None, "bad": None, "splits": {}}
    if manifest:
        splits = split_counts(manifest)
        rows_out = sum(s["rows_out"] for s in splits.values())
        bad = manifest.bad_row_count
        counts = {"rows_in": rows_out + bad, "rows_out": rows_out, "bad": bad, "splits": splits}
        if manifest.sequence is not None and manifest.sequence.group_by:
            counts["rows_in"] = manifest.sequence.steps + bad  # the records are groups of rows
    return {
        "job": JOB,
        "status": status,
        "exit_code": exit_code,
        "date": date.isoformat() if date else None,
        "output": output,
        **counts,
        "seconds": round(seconds, 3),
        **extra,
    }


def summary_line(summary: Mapping[str, Any]) -> str:
    """One line of JSON (no newlines inside, keys in a stable order)."""
    return json.dumps(summary, separators=(",", ":"), default=str)
