"""Statistics protos for the report's tests, computed here with numpy and pyarrow from a source
table: TF Metadata `DatasetFeatureStatisticsList`s of the form TFDV writes (counts, a
10-bucket standard histogram and quantiles for numbers, num_values quantiles, top values for
strings), one per split, and an output's manifest that lists them (`statistics`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from tensorflow_metadata.proto.v0 import statistics_pb2

H = statistics_pb2.Histogram
F = statistics_pb2.FeatureNameStatistics


def leaf(table: pa.Table, path: Sequence[str]) -> pa.Array:
    """The column at `path`, struct nulls carried down to the leaf."""
    arr = table.column(path[0]).combine_chunks()
    for step in path[1:]:
        arr = pc.struct_field(arr, [step])
    return arr


def _is_list(t: pa.DataType) -> bool:
    return pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t)


def _counts(arr: pa.Array) -> np.ndarray:
    """Values per row (0 for a null)."""
    valid = np.asarray(arr.is_valid(), dtype=bool)
    if not _is_list(arr.type):
        return valid.astype(np.int64)
    inner = _counts(arr.flatten())
    parents = np.asarray(pc.list_parent_indices(arr), dtype=np.int64)
    return np.bincount(parents, weights=inner, minlength=len(arr)).astype(np.int64)


def _values(arr: pa.Array) -> pa.Array:
    while _is_list(arr.type):
        arr = arr.flatten()
    return arr.drop_null()


def _histogram(values: np.ndarray, kind: int, buckets: int = 10) -> H:
    h = H(type=kind)
    if len(values) == 0:
        return h
    if kind == H.STANDARD:
        counts, edges = np.histogram(values, bins=buckets)
        for i, c in enumerate(counts):
            h.buckets.add(low_value=edges[i], high_value=edges[i + 1], sample_count=float(c))
    else:
        edges = np.quantile(values, np.linspace(0, 1, buckets + 1))
        for i in range(buckets):
            h.buckets.add(
                low_value=edges[i], high_value=edges[i + 1], sample_count=len(values) / buckets
            )
    return h


def _common(common: statistics_pb2.CommonStatistics, arr: pa.Array) -> None:
    """Present: a row that is not null (an empty list is present, with 0 values)."""
    present = _counts(arr)[np.asarray(arr.is_valid(), dtype=bool)]
    common.num_non_missing = len(present)
    common.num_missing = len(arr) - len(present)
    if len(present):
        common.min_num_values = int(present.min())
        common.max_num_values = int(present.max())
        common.avg_num_values = float(present.mean())
        common.tot_num_values = int(present.sum())
        common.num_values_histogram.CopyFrom(_histogram(present.astype(float), H.QUANTILES))


def _numbers(arr: pa.Array) -> np.ndarray:
    t = arr.type
    if pa.types.is_timestamp(t) or pa.types.is_date64(t):
        arr = arr.cast(pa.int64())
    elif pa.types.is_date32(t):
        arr = arr.cast(pa.int32())
    elif pa.types.is_boolean(t):
        arr = arr.cast(pa.int8())
    return np.asarray(arr.to_numpy(zero_copy_only=False), dtype=np.float64)


def feature_statistics(name: str, arr: pa.Array, kind: str, dtype: str) -> F:
    """One feature's statistics, as TFDV computes them (population std dev)."""
    values = _values(arr)
    if kind in ("int64", "float"):
        f = F(name=name, type=F.INT if kind == "int64" else F.FLOAT)
        num = f.num_stats
        _common(num.common_stats, arr)
        x = _numbers(values)
        if len(x):
            num.mean, num.std_dev = float(x.mean()), float(x.std())
            num.num_zeros = int((x == 0).sum())
            num.min, num.median, num.max = float(x.min()), float(np.median(x)), float(x.max())
            num.histograms.append(_histogram(x, H.STANDARD))
            num.histograms.append(_histogram(x, H.QUANTILES))
        return f
    if pa.types.is_decimal(values.type):
        values = values.cast(pa.string())
    if pa.types.is_string(values.type) or pa.types.is_large_string(values.type):
        f = F(name=name, type=F.STRING)
        text = f.string_stats
        _common(text.common_stats, arr)
        pairs = pc.value_counts(values).to_pylist()
        pairs.sort(key=lambda p: (-p["counts"], p["values"]))
        text.unique = len(pairs)
        if len(values):
            text.avg_length = float(np.mean(pc.binary_length(values).to_numpy()))
        for p in pairs[:10]:
            text.top_values.add(value=p["values"], frequency=float(p["counts"]))
        return f
    f = F(name=name, type=F.BYTES)
    raw = f.bytes_stats
    _common(raw.common_stats, arr)
    if len(values):
        lengths = pc.binary_length(values).to_numpy()
        raw.unique = len(pc.unique(values))
        raw.avg_num_bytes = float(lengths.mean())
        raw.min_num_bytes, raw.max_num_bytes = float(lengths.min()), float(lengths.max())
    return f


def dataset_statistics(
    table: pa.Table, features: Sequence[Mapping], split: str
) -> statistics_pb2.DatasetFeatureStatisticsList:
    """The split's statistics list for the manifest's `features` (their path, kind, dtype)."""
    out = statistics_pb2.DatasetFeatureStatisticsList()
    dataset = out.datasets.add(name=split, num_examples=table.num_rows)
    for spec in features:
        arr = leaf(table, spec["path"])
        dataset.features.append(feature_statistics(spec["name"], arr, spec["kind"], spec["dtype"]))
    return out


def add_statistics(output: Path, tables: Mapping[str, pa.Table]) -> dict[str, Path]:
    """Write `statistics/<split>/FeatureStats.pb` for each split's table and list them in the
    output's manifest; split -> the file written."""
    manifest_file = output / "manifest.json"
    manifest = json.loads(manifest_file.read_text(encoding="utf-8"))
    written, listed = {}, {}
    for split, table in tables.items():
        relative = f"statistics/{split}/FeatureStats.pb"
        path = output / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        stats = dataset_statistics(table, manifest["features"], split)
        path.write_bytes(stats.SerializeToString())
        written[split], listed[split] = path, relative
    manifest["statistics"] = listed
    manifest_file.write_text(json.dumps(manifest, indent=2), encoding="utf-8")
    return written
