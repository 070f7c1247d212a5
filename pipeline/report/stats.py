"""The statistics of an output, as the report shows them: plain values read from TF Metadata
`DatasetFeatureStatisticsList` protos (one per split, `statistics/<split>/FeatureStats.pb`).

`feature_summaries(dataset)` turns one split's `DatasetFeatureStatistics` into one
`FeatureSummary` per feature: the counts, the numbers, the histogram, the list lengths, the
top values, whichever the proto holds. Reading needs `tensorflow_metadata` (protobuf only), not
TensorFlow. A feature is named by `name`, or by its `path` steps joined with "." (TFDV's form);
both name a struct leaf `parent.child` as the manifest does.
"""

from __future__ import annotations

import dataclasses
import math

from tensorflow_metadata.proto.v0 import statistics_pb2

__all__ = [
    "Bucket",
    "FeatureSummary",
    "ListLengths",
    "feature_name",
    "feature_summaries",
    "parse_statistics",
]

Bucket = tuple[float, float, float]  # (low, high, count)

_TYPES = {v: k for k, v in statistics_pb2.FeatureNameStatistics.Type.items()}
_STANDARD = statistics_pb2.Histogram.STANDARD
_QUANTILES = statistics_pb2.Histogram.QUANTILES


@dataclasses.dataclass(frozen=True)
class ListLengths:
    """Values per present row: min, average, max, and their histogram (quantiles in TFDV)."""

    min: int
    max: int
    avg: float
    buckets: tuple[Bucket, ...]
    quantiles: bool  # buckets of equal counts (QUANTILES) rather than of equal widths


@dataclasses.dataclass(frozen=True)
class FeatureSummary:
    """One feature of one split, as the statistics give it. `stats` holds the numbers shown
    in the report's tables, by label, in the order shown (only those the proto has)."""

    name: str
    type: str  # INT | FLOAT | STRING | BYTES | STRUCT
    examples: int  # rows of the split
    present: int  # rows with a value (num_non_missing)
    missing: int  # rows without one (num_missing: a null)
    stats: dict[str, float | int]
    histogram: tuple[Bucket, ...] = ()
    histogram_quantiles: bool = False
    lengths: ListLengths | None = None
    top_values: tuple[tuple[str, float], ...] = ()

    @property
    def null_rate(self) -> float:
        """The fraction of rows without a value (0 when the split has no row)."""
        total = self.present + self.missing
        return self.missing / total if total else 0.0


def parse_statistics(data: bytes, where: str) -> statistics_pb2.DatasetFeatureStatisticsList:
    """The proto in `data` (a binary `DatasetFeatureStatisticsList`); ValueError naming
    `where` when it does not parse."""
    stats = statistics_pb2.DatasetFeatureStatisticsList()
    try:
        stats.ParseFromString(data)
    except Exception as err:  # protobuf's DecodeError, and upb's own
        raise ValueError(f"{where}: not a DatasetFeatureStatisticsList proto: {err}") from err
    return stats


def feature_name(feature: statistics_pb2.FeatureNameStatistics) -> str:
    return feature.name or ".".join(feature.path.step)


def _buckets(histogram: statistics_pb2.Histogram) -> tuple[Bucket, ...]:
    return tuple(
        (float(b.low_value), float(b.high_value), float(b.sample_count))
        for b in histogram.buckets
        if math.isfinite(b.low_value) and math.isfinite(b.high_value)
    )


def _histogram(num: statistics_pb2.NumericStatistics) -> tuple[tuple[Bucket, ...], bool]:
    """The standard (equal-width) histogram when there is one, else the quantiles one."""
    by_type = {h.type: h for h in num.histograms if h.buckets}
    if _STANDARD in by_type:
        return _buckets(by_type[_STANDARD]), False
    if _QUANTILES in by_type:
        return _buckets(by_type[_QUANTILES]), True
    return (), False


def _lengths(common: statistics_pb2.CommonStatistics) -> ListLengths | None:
    """The list lengths of a feature whose rows do not all hold one value."""
    if common.num_non_missing == 0 or (common.min_num_values == common.max_num_values == 1):
        return None
    histogram = common.num_values_histogram
    return ListLengths(
        int(common.min_num_values),
        int(common.max_num_values),
        float(common.avg_num_values),
        _buckets(histogram),
        histogram.type == _QUANTILES,
    )


def _common(feature: statistics_pb2.FeatureNameStatistics) -> statistics_pb2.CommonStatistics:
    kind = feature.WhichOneof("stats")
    return getattr(feature, kind).common_stats if kind else statistics_pb2.CommonStatistics()


def _summary(feature: statistics_pb2.FeatureNameStatistics, examples: int) -> FeatureSummary:
    common = _common(feature)
    stats: dict[str, float | int] = {}
    histogram: tuple[Bucket, ...] = ()
    quantiles = False
    top: tuple[tuple[str, float], ...] = ()
    kind = feature.WhichOneof("stats")
    if kind == "num_stats":
        num = feature.num_stats
        stats = {
            "mean": num.mean,
            "std dev": num.std_dev,
            "zeros": int(num.num_zeros),
            "min": num.min,
            "median": num.median,
            "max": num.max,
        }
        histogram, quantiles = _histogram(num)
    elif kind == "string_stats":
        text = feature.string_stats
        stats = {"unique": int(text.unique), "avg length": text.avg_length}
        top = tuple((v.value, float(v.frequency)) for v in text.top_values)
        if not top:  # TFDV keeps the same values in the rank histogram too
            top = tuple((b.label, float(b.sample_count)) for b in text.rank_histogram.buckets)
    elif kind == "bytes_stats":
        raw = feature.bytes_stats
        stats = {
            "unique": int(raw.unique),
            "avg bytes": raw.avg_num_bytes,
            "min bytes": raw.min_num_bytes,
            "max bytes": raw.max_num_bytes,
        }
    lengths = _lengths(common)
    if lengths is not None:
        stats.update(
            {"min values": lengths.min, "avg values": lengths.avg, "max values": lengths.max}
        )
    return FeatureSummary(
        name=feature_name(feature),
        type=_TYPES.get(feature.type, str(feature.type)),
        examples=examples,
        present=int(common.num_non_missing),
        missing=int(common.num_missing),
        stats=stats,
        histogram=histogram,
        histogram_quantiles=quantiles,
        lengths=lengths,
        top_values=top,
    )


def feature_summaries(
    dataset: statistics_pb2.DatasetFeatureStatistics,
) -> dict[str, FeatureSummary]:
    """name -> FeatureSummary for each feature of one split's statistics, in the proto's
    order."""
    examples = int(dataset.num_examples)
    return {feature_name(f): _summary(f, examples) for f in dataset.features}
