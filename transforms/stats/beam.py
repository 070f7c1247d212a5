"""`MergeStatistics`: (split, SplitStats) of the encoder's bundles -> one `SplitStats` per split,
merged by a CombineFn; `WriteStatistics`: one statistics file per split, written once."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

import apache_beam as beam

from transforms.encode.schema import FeatureSpec
from transforms.stats.features import SplitStats
from transforms.stats.proto import write_statistics
from transforms.stats.sketches_file import write_sketches

__all__ = ["MergeSplitStats", "MergeStatistics", "WriteStatistics"]


class MergeSplitStats(beam.CombineFn):
    """SplitStats of parts of a split's rows -> the SplitStats of their rows."""

    def create_accumulator(self) -> SplitStats:
        return SplitStats()

    def add_input(self, acc: SplitStats, stats: SplitStats) -> SplitStats:
        return acc.merge(stats)

    def merge_accumulators(self, accs: Iterable[SplitStats]) -> SplitStats:
        out = SplitStats()
        for acc in accs:
            out.merge(acc)
        return out

    def extract_output(self, acc: SplitStats) -> SplitStats:
        return acc


class MergeStatistics(beam.PTransform):
    """(split, SplitStats), one per split and bundle of the encoder (`EncodeExamples` with
    `statistics`) -> (split, SplitStats), one per split that got rows. A side branch of the
    encoder's output: no second read of the source, and no batch crosses to it."""

    def expand(self, stats: beam.PCollection) -> beam.PCollection:
        return stats | "MergePerSplit" >> beam.CombinePerKey(MergeSplitStats())


def _write_all(
    _: None,
    stats: Mapping[str, SplitStats],
    output_dir: str,
    splits: Sequence[str],
    specs: Sequence[FeatureSpec],
    sketches: bool,
) -> dict[str, str]:
    written = {}
    for name in splits:
        split_stats = stats.get(name, SplitStats())
        written[name] = write_statistics(output_dir, name, split_stats, specs)
        if sketches:
            write_sketches(output_dir, name, split_stats)
    return written


class WriteStatistics(beam.PTransform):
    """(split, SplitStats) -> one {split: statistics file relative to the output} once every
    split's statistics are written (a split no row reached gets a file of zero counts);
    with `sketches`, each split's accumulator is saved beside them (sketches_file.py)."""

    def __init__(
        self,
        output_dir: str,
        splits: Sequence[str],
        specs: Sequence[FeatureSpec],
        sketches: bool = False,
    ) -> None:
        super().__init__()
        self._output_dir = output_dir
        self._splits = tuple(splits)
        self._specs = tuple(specs)
        self._sketches = sketches

    def expand(self, stats: beam.PCollection) -> beam.PCollection:
        return (
            stats.pipeline
            | "Once" >> beam.Create([None])
            | "Write"
            >> beam.Map(
                _write_all,
                beam.pvalue.AsDict(stats),
                self._output_dir,
                self._splits,
                self._specs,
                self._sketches,
            )
        )
