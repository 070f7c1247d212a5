"""Scheduled runs: path templates with a run date, and the JSON summary a scheduler reads.

`{date}` in an input or output path becomes the run date as YYYY-MM-DD; `{date:FORMAT}` formats
it with strftime (`{date:%Y/%m/%d}`). The summary is one JSON object on one line, printed last.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from pipeline.errors import ConfigError

if TYPE_CHECKING:  # the summary of `verify` is made without the config's modules
    from pipeline.config import JobConfig
    from pipeline.manifest import Manifest

__all__ = [
    "JOB",
    "apply_date",
    "has_date_template",
    "parse_date",
    "render_date",
    "run_summary",
    "split_counts",
    "summary_line",
]

JOB = "tfrecord-etl"
_TEMPLATE = re.compile(r"\{date(?::([^{}]*))?\}")


def parse_date(text: str) -> datetime.date:
    """The run date given as --date (ISO: 2026-12-01)."""
    try:
        return datetime.date.fromisoformat(text)
    except ValueError as err:
        raise ConfigError(f"--date {text!r}: expected a date as YYYY-MM-DD") from err


def has_date_template(path: str) -> bool:
    return _TEMPLATE.search(path) is not None


def render_date(path: str, date: datetime.date) -> str:
    """`path` with each `{date}` / `{date:FORMAT}` replaced; other braces are left alone."""
    return _TEMPLATE.sub(lambda m: date.strftime(m.group(1) or "%Y-%m-%d"), path)


def apply_date(config: JobConfig, date: datetime.date | None) -> JobConfig:
    """The config with the run date filled into its input and output paths.

    A template without a date, or a date no path uses, is an error: either would make every
    scheduled run read or write the same place.
    """
    paths = [*config.inputs, config.output]
    templated = [p for p in paths if has_date_template(p)]
    if date is None:
        if templated:
            raise ConfigError(f"{templated[0]}: the path has {{date}}; pass --date YYYY-MM-DD")
        return config
    if not templated:
        raise ConfigError("--date is given but no --input or --output path has {date}")
    return dataclasses.replace(
        config,
        inputs=tuple(render_date(p, date) for p in config.inputs),
        output=render_date(config.output, date),
    )


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
