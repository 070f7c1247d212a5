"""`tfrecord-etl report OUTPUT` (and `convert --report`): read the manifest, the statistics of
each split, the bad rows and the shard sizes; draw one figure per feature; write
`<output>/report.html`.

The statistics are the files the manifest lists under `statistics` (split -> a binary TF
Metadata `DatasetFeatureStatisticsList`); an output without them still gets the splits, shards,
bad rows and type mapping, and says that it has no statistics. An output with image features
(`files:` image columns) also shows the first few images of each split as thumbnails.
"""

from __future__ import annotations

import dataclasses
import sys

from pipeline.output.manifest import Manifest
from pipeline.output.sections import with_derived
from pipeline.report import REPORT_NAME
from pipeline.report.files import (
    join,
    load_manifest,
    read_bad_rows,
    read_bytes,
    shard_bytes,
    write_text,
)
from pipeline.report.page import render_page
from pipeline.report.plots import feature_svg
from pipeline.report.stats import FeatureSummary, feature_summaries, parse_statistics
from pipeline.report.thumbnails import read_thumbnails

__all__ = [
    "ReportResult",
    "describe",
    "read_summaries",
    "render_report",
    "report_command",
    "write_report",
]


@dataclasses.dataclass(frozen=True)
class ReportResult:
    """A written report: where, its size in bytes, how many features have plots, the splits
    whose statistics it read."""

    path: str
    bytes: int
    features: int
    splits_with_statistics: tuple[str, ...]


def read_summaries(output: str, manifest: Manifest) -> dict[str, dict[str, FeatureSummary]]:
    """feature -> split -> its statistics, splits in the manifest's order; empty when the
    manifest lists no statistics. FileNotFoundError / ValueError name a listed file that is
    missing or does not parse."""
    out: dict[str, dict[str, FeatureSummary]] = {}
    for split, relative in (manifest.statistics or {}).items():
        path = join(output, relative)
        try:
            data = read_bytes(path)
        except FileNotFoundError:
            raise FileNotFoundError(
                f"{path}: the statistics of split {split!r} that the manifest lists are missing"
            ) from None
        datasets = list(parse_statistics(data, path).datasets)
        if not datasets:
            raise ValueError(f"{path}: holds no dataset statistics")
        named = [d for d in datasets if d.name == split]
        for name, summary in feature_summaries((named or datasets)[0]).items():
            out.setdefault(name, {})[split] = summary
    return out


def render_report(output: str) -> tuple[str, ReportResult]:
    """The report's HTML for the output in `output`, and what it holds (`path` where
    `write_report` puts it)."""
    manifest = load_manifest(output)
    summaries = read_summaries(output, manifest)
    known = {f.name for f in with_derived(manifest.features)}
    plots = {name: feature_svg(by_split) for name, by_split in summaries.items() if name in known}
    page = render_page(
        output=output,
        manifest=manifest,
        sizes=shard_bytes(output, manifest),
        bad=read_bad_rows(output, manifest),
        summaries=summaries,
        plots=plots,
        thumbnails=read_thumbnails(output, manifest),
    )
    result = ReportResult(
        join(output, REPORT_NAME),
        len(page.encode("utf-8")),
        len(plots),
        tuple(manifest.statistics or {}),
    )
    return page, result


def write_report(output: str) -> ReportResult:
    """Write `<output>/report.html`; what was written."""
    page, result = render_report(output)
    write_text(result.path, page)
    return result


def report_command(output: str) -> int:
    """`tfrecord-etl report OUTPUT`: 0 when written, 1 (and the error on stderr) when not."""
    try:
        result = write_report(output)
    except (ValueError, OSError) as err:
        print(f"tfrecord-etl: error: {err}", file=sys.stderr)
        return 1
    print(describe(result))
    return 0


def describe(result: ReportResult) -> str:
    """One line: where the report is, its size, what it plots."""
    stats = ", ".join(result.splits_with_statistics) or "none in the manifest"
    return (
        f"report: {result.path}  ({result.bytes:,} bytes, {result.features} feature plot(s); "
        f"statistics: {stats})"
    )
