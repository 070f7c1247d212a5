"""`StatisticsAccumulator`: the statistics of every split's rows, added a batch at a time; the
plain API the job's encoder uses (no Beam), for any caller that encodes batches.

    acc = StatisticsAccumulator(specs)
    for split, batch in ...:           # TableBatch of the rows of one split
        acc.add(split, batch)
    acc.merge(other)                   # another accumulator's rows (another worker, bundle)
    for split, stats in acc.items():   # SplitStats
        write_statistics(output_dir, split, stats, specs)   # transforms/stats/proto.py

The result does not depend on how rows are cut into batches or accumulators, nor on the order
they are added and merged (up to the rounding of the sums: see features.py and sketches.py).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from transforms.batch import TableBatch, source_rows
from transforms.encode.schema import FeatureSpec
from transforms.stats.features import SplitStats

__all__ = ["StatisticsAccumulator"]


class StatisticsAccumulator:
    """{split: SplitStats} of the rows added, for the features `specs`."""

    def __init__(self, specs: Sequence[FeatureSpec]) -> None:
        self.specs = tuple(specs)
        self.splits: dict[str, SplitStats] = {}

    def add(self, split: str, batch: TableBatch) -> None:
        """Add the rows of `batch`, all of `split`."""
        stats = self.splits.setdefault(split, SplitStats())
        stats.add(batch.table, self.specs, batch.source, source_rows(batch))

    def merge(self, other: StatisticsAccumulator) -> StatisticsAccumulator:
        """Add the rows `other` holds (it is left as it was only where this one had no split
        of its; do not use it after)."""
        for split, stats in other.splits.items():
            if split in self.splits:
                self.splits[split].merge(stats)
            else:
                self.splits[split] = stats
        return self

    def items(self) -> Iterator[tuple[str, SplitStats]]:
        """(split, SplitStats) of each split that got rows."""
        return iter(list(self.splits.items()))
