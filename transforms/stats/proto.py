"""`SplitStats` -> TF Metadata's `DatasetFeatureStatisticsList` (what TFDV's `load_stats_binary`
loads), and writing it as `<output>/statistics/<split>/FeatureStats.pb` (StatisticsGen's name).

Per feature, as TFDV fills them: `common_stats` (present, missing, values per row: least, most,
mean, total, and their quantiles), then `num_stats` (mean, std_dev (population), zeros, min,
median, max, a 10-bucket equal-width histogram and a 10-bucket quantiles histogram) for int and
float features, `string_stats` (distinct values, top values, a rank histogram, mean length in
bytes) for strings, `bytes_stats` (distinct values, bytes per value) for binary values. Two
custom statistics say what is estimated: `top_values_exact` (1 when every count is exact) and
`sample_size` (the values the quantiles were read from).
"""

from __future__ import annotations

import itertools
import math

import numpy as np
from tensorflow_metadata.proto.v0 import statistics_pb2

from transforms.encode.features import NULL_POSITIONS, nulls_specs, row_lengths_specs
from transforms.encode.schema import FeatureSpec
from transforms.fs import FileSystems
from transforms.stats.features import FeatureStats, SplitStats, stats_kind
from transforms.stats.paths import STATISTICS_DIR, STATISTICS_FILE, statistics_path

__all__ = [
    "STATISTICS_DIR",
    "STATISTICS_FILE",
    "TOP_VALUES",
    "statistics_path",
    "to_proto",
    "write_statistics",
]

TOP_VALUES = 20
_BUCKETS = 10


def _quantiles_histogram(histogram, sample, total: int) -> None:  # noqa: ANN001
    """Fill a QUANTILES histogram: `_BUCKETS` buckets of `total / _BUCKETS` values each."""
    bounds = sample.quantiles(np.linspace(0.0, 1.0, _BUCKETS + 1))
    histogram.type = statistics_pb2.Histogram.QUANTILES
    for low, high in itertools.pairwise(bounds):
        histogram.buckets.add(low_value=low, high_value=high, sample_count=total / _BUCKETS)


def _common(common, stats: FeatureStats) -> None:  # noqa: ANN001
    common.num_non_missing = stats.present
    common.num_missing = stats.missing
    common.tot_num_values = stats.values
    if stats.present:
        common.min_num_values = stats.min_values or 0
        common.max_num_values = stats.max_values or 0
        common.avg_num_values = stats.values / stats.present
        if stats.value_counts is not None:
            _quantiles_histogram(common.num_values_histogram, stats.value_counts, stats.present)
        else:  # a fixed shape: the same number of values in every row
            common.num_values_histogram.type = statistics_pb2.Histogram.QUANTILES
            count = stats.min_values or 0
            for _ in range(_BUCKETS):
                common.num_values_histogram.buckets.add(
                    low_value=count, high_value=count, sample_count=stats.present / _BUCKETS
                )


def _numeric(num, stats: FeatureStats) -> None:  # noqa: ANN001
    _common(num.common_stats, stats)
    num.num_zeros = stats.zeros
    if stats.count:
        num.mean, num.std_dev = stats.moments()
        num.min, num.max = stats.min, stats.max
        num.median = float(stats.sample.quantiles(np.array([0.5]))[0])
    standard = num.histograms.add(type=statistics_pb2.Histogram.STANDARD, num_nan=stats.nans)
    if stats.count and math.isfinite(stats.min) and math.isfinite(stats.max):
        edges = np.linspace(stats.min, stats.max, _BUCKETS + 1)
        counts = stats.sample.histogram(stats.min, stats.max, _BUCKETS, stats.count)
        for i in range(_BUCKETS):
            standard.buckets.add(
                low_value=edges[i], high_value=edges[i + 1], sample_count=float(counts[i])
            )
    quantiles = num.histograms.add(num_nan=stats.nans)
    if stats.count:
        _quantiles_histogram(quantiles, stats.sample, stats.count)
    else:
        quantiles.type = statistics_pb2.Histogram.QUANTILES


def _text(value: object) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def _strings(strings, stats: FeatureStats) -> None:  # noqa: ANN001
    _common(strings.common_stats, stats)
    strings.unique = 0 if stats.distinct is None else stats.distinct.estimate()
    if stats.values:
        strings.avg_length = stats.length_sum / stats.values
    top = [] if stats.top is None else stats.top.top(TOP_VALUES)
    for rank, (value, count) in enumerate(top):
        strings.top_values.add(value=_text(value), frequency=count)
        strings.rank_histogram.buckets.add(
            low_rank=rank, high_rank=rank, label=_text(value), sample_count=count
        )


def _bytes(out, stats: FeatureStats) -> None:  # noqa: ANN001
    _common(out.common_stats, stats)
    out.unique = 0 if stats.distinct is None else stats.distinct.estimate()
    if stats.values:
        out.avg_num_bytes = stats.length_sum / stats.values
        out.min_num_bytes = stats.min_length or 0
        out.max_num_bytes = stats.max_length or 0
        out.max_num_bytes_int = stats.max_length or 0


def to_proto(
    split: str, stats: SplitStats, specs: list[FeatureSpec] | tuple[FeatureSpec, ...]
) -> statistics_pb2.DatasetFeatureStatisticsList:
    """The `DatasetFeatureStatisticsList` of one split: one dataset named after it, a feature
    per spec (in the specs' order, each list ragged below its first level followed by its
    row-lengths features, then each list whose items held nulls in the split by its features
    of null positions; a feature no row reached has counts of zero)."""
    out = statistics_pb2.DatasetFeatureStatisticsList()
    dataset = out.datasets.add(name=split, num_examples=stats.rows)
    every = []
    for spec in specs:
        levels = range(1, spec.list_levels + 1)
        written = [s for s in nulls_specs(spec, levels) if s.name in stats.features]
        every += [spec, *row_lengths_specs(spec), *written]
    for spec in every:
        feature_stats = stats.features.get(spec.name) or FeatureStats(stats_kind(spec))
        if spec.source_type == NULL_POSITIONS:  # batches without such nulls added no entry
            feature_stats.missing = stats.rows - feature_stats.present
        feature = dataset.features.add()
        feature.path.step.append(spec.name)
        kind = feature_stats.kind
        if kind == "numeric":
            feature.type = (
                statistics_pb2.FeatureNameStatistics.INT
                if spec.kind == "int64"
                else statistics_pb2.FeatureNameStatistics.FLOAT
            )
            if spec.encoding == "float64_bytes":  # stored as BYTES (the schema's type, which
                # TFDV's validate_statistics compares), described by its float64 values
                feature.type = statistics_pb2.FeatureNameStatistics.BYTES
            _numeric(feature.num_stats, feature_stats)
            if feature_stats.sample is not None:
                feature.custom_stats.add(name="sample_size", num=len(feature_stats.sample.values))
        elif kind == "string":
            feature.type = statistics_pb2.FeatureNameStatistics.STRING
            _strings(feature.string_stats, feature_stats)
            exact = feature_stats.top is None or feature_stats.top.exact
            feature.custom_stats.add(name="top_values_exact", num=1.0 if exact else 0.0)
        else:
            feature.type = statistics_pb2.FeatureNameStatistics.BYTES
            _bytes(feature.bytes_stats, feature_stats)
    return out


def write_statistics(
    output_dir: str,
    split: str,
    stats: SplitStats,
    specs: list[FeatureSpec] | tuple[FeatureSpec, ...],
) -> str:
    """Write the split's statistics file; returns its path relative to `output_dir`."""
    relative = statistics_path(split)
    path = FileSystems.join(output_dir, *relative.split("/"))
    with FileSystems.create(path, mime_type="application/octet-stream") as f:
        f.write(to_proto(split, stats, specs).SerializeToString())
    return relative
