"""The statistics of an incremental dataset as a whole: every live span's rows, as if one run had
read them all.

Each span's run saves its statistics accumulators beside its statistics
(`span-NNNNN/statistics/<split>/sketches.npz`, transforms/stats/sketches_file.py). The commit of
a span merges them into the whole dataset's before dataset.json names them:

    <output>/statistics/after-span-00003/train/FeatureStats.pb   what TFDV loads, as a run's
    <output>/statistics/after-span-00003/train/sketches.npz      the merged accumulators

- a new span with no span retired: the last whole statistics plus the new span's (one span
  read, not all of them);
- a span retired (`--reconvert-changed`, `--overwrite`), or no whole statistics to start from:
  merged again from every live span's accumulators;
- a live span without accumulators (written before they were saved), or with a file that is
  not one: no whole statistics (None, and a warning naming the file); the report then shows
  the spans' statistics side by side. A lost or damaged file of the last whole statistics
  only costs reading every span's again.

Counts, means, deviations, extremes and zeros of the whole are those of one run over the same
rows (up to the rounding of the sums); the quantiles, histograms, distinct counts and top values
come from the same sketches a run keeps (bottom-k samples by row, HyperLogLog, Misra-Gries),
merged. A commit killed after writing them leaves a directory dataset.json does not name:
`remove_stale` removes it after the next commit.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence

from pipeline.output.dataset.ledger import WHOLE_STATISTICS_DIR, Dataset, WholeStatistics
from pipeline.output.entries import delete, list_files
from transforms import fs
from transforms.encode.schema import FeatureSpec
from transforms.fs import FileSystems
from transforms.stats.features import SplitStats
from transforms.stats.paths import SKETCHES_FILE, STATISTICS_FILE
from transforms.stats.proto import to_proto
from transforms.stats.sketches_file import dump_sketches, read_sketches, read_sketches_file

__all__ = ["merge_whole_statistics", "remove_stale"]


def _span_sketches(output: str, span: str, splits: Sequence[str]) -> dict[str, SplitStats]:
    """A span's saved accumulators of `splits`; FileNotFoundError when it has none."""
    return {split: read_sketches(fs.join(output, span), split) for split in splits}


def _read_whole(output: str, whole: WholeStatistics) -> dict[str, SplitStats]:
    base = fs.join(output, *whole.dir.split("/"))
    return {
        split: read_sketches_file(fs.join(base, split, SKETCHES_FILE)) for split in whole.splits
    }


def _add(into: dict[str, SplitStats], more: dict[str, SplitStats]) -> None:
    for split, stats in more.items():
        if split in into:
            into[split].merge(stats)
        else:
            into[split] = stats


def merge_whole_statistics(
    output: str,
    before: Dataset,
    after: Dataset,
    splits: Callable[[int], Sequence[str]],
    specs: Sequence[FeatureSpec],
    on_missing: Callable[[str], None],
) -> WholeStatistics | None:
    """Write the statistics of `after` (the dataset once its last span is committed; `before`:
    as it is now) and return what dataset.json is to name. `splits(span number)`: the splits
    a span has statistics of (asked of the new span only when the last whole statistics cover
    every other live span). None, writing nothing, when a live span's accumulators are missing or
    unreadable (the warning `on_missing` gets says which)."""
    new = after.spans[-1]
    others = [s.span for s in after.spans[:-1]]
    merged: dict[str, SplitStats] | None = None
    last = before.whole_statistics()
    if last is not None and list(last.spans) == others:
        try:
            merged = _read_whole(output, last)
            _add(merged, _span_sketches(output, new.name, splits(new.span)))
        except (FileNotFoundError, ValueError):  # the last ones lost: every span's again
            merged = None
    if merged is None:
        merged = {}
        try:
            for span in after.spans:
                _add(merged, _span_sketches(output, span.name, splits(span.span)))
        except (FileNotFoundError, ValueError) as err:
            on_missing(f"no statistics of the whole dataset: {err}")
            return None
    if not merged:
        return None
    names = tuple(merged)
    whole = WholeStatistics(tuple(after.numbers), names)
    base = fs.join(output, *whole.dir.split("/"))
    for split, stats in merged.items():
        proto = to_proto(split, stats, specs)
        _write(fs.join(base, split, STATISTICS_FILE), proto.SerializeToString())
        _write(fs.join(base, split, SKETCHES_FILE), dump_sketches(stats))
    return whole


def _write(path: str, data: bytes) -> None:
    with FileSystems.create(path, mime_type="application/octet-stream") as f:
        f.write(data)


def remove_stale(output: str, dataset: Dataset) -> None:
    """Remove the whole statistics dataset.json does not name (those of earlier commits, or of
    a commit killed before dataset.json was written)."""
    keep = None if dataset.statistics is None else dataset.statistics.dir.split("/")[-1]
    root = fs.join(output, WHOLE_STATISTICS_DIR)
    if fs.is_local(output):
        if not os.path.isdir(root):
            return
        stale = [e.path for e in os.scandir(root) if e.name != keep]
    else:
        found = list_files(output, [fs.join(root, "after-span-*", "**")])
        stale = [p for p in found if p[len(root.rstrip("/")) + 1 :].split("/", 1)[0] != keep]
    delete(output, stale)
