"""A split's statistics accumulator (`SplitStats`) saved to a file and read back, so that the
statistics of several runs can be merged later as if one run had read every row: the spans of
an incremental dataset (pipeline/output/dataset/statistics.py) merge theirs into the dataset's.

    write_sketches(output_dir, "train", stats)        # <output>/statistics/train/sketches.npz
    stats = read_sketches(output_dir, "train")         # the same SplitStats; merge() as usual

The file is a numpy `.npz` archive: a JSON header (rows, and per feature its counts, moments,
extremes and which arrays it has) and plain arrays (each sample's values and priorities, the
distinct-count hashes or registers, the top values' counts, hashes and bytes). It is read with
`allow_pickle=False`: nothing in it is ever run as code, and a malformed file is a ValueError
naming it. What a saved accumulator gives after `merge` is what the live one gave: the samples
are bottom-k by priority and the distinct counts by hash, whatever the order (the top values'
counters, as in any merge, may be cut in another order).
"""

from __future__ import annotations

import io
import json
import math
import zipfile
from typing import Any

import numpy as np
import pyarrow as pa

from transforms import fs
from transforms.fs import FileSystems
from transforms.stats.features import FeatureStats, SplitStats
from transforms.stats.paths import SKETCHES_FILE, sketches_path
from transforms.stats.sketches import HyperLogLog, Sample, TopK

__all__ = [
    "SKETCHES_FILE",
    "dump_sketches",
    "load_sketches",
    "read_sketches",
    "read_sketches_file",
    "sketches_path",
    "write_sketches",
]

_VERSION = 1
_COUNTS = ("present", "missing", "values", "count", "zeros", "nans", "length_sum")
_OPTIONAL = ("min_values", "max_values", "min_length", "max_length")
_TOP_TYPES = {"string": pa.string(), "binary": pa.binary(), "large_string": pa.large_string()}


def _float(value: float) -> float | str:
    """JSON has no infinities or NaN: they are written as text."""
    return value if math.isfinite(value) else repr(value)


def _unfloat(value: Any) -> float:
    if isinstance(value, str):
        if value not in ("inf", "-inf", "nan"):
            raise ValueError(f"not a number: {value!r}")
        return float(value)
    return float(value)


def _sample_arrays(arrays: dict[str, np.ndarray], key: str, sample: Sample) -> dict[str, Any]:
    arrays[f"{key}.values"] = sample.values  # in the sample's order: its quantiles pick
    arrays[f"{key}.priorities"] = sample.priorities  # the same of equal values (0.0, -0.0)
    return {"k": sample.k}


def _top_arrays(arrays: dict[str, np.ndarray], key: str, top: TopK) -> dict[str, Any]:
    header: dict[str, Any] = {"capacity": top.capacity, "exact": top.exact, "type": None}
    arrays[f"{key}.counts"] = top.counts
    arrays[f"{key}.hashes"] = top.hashes
    if top.values is not None:
        name = str(top.values.type)
        if name not in _TOP_TYPES:
            raise ValueError(f"top values of type {name} cannot be saved")
        values = top.values.cast(pa.large_binary())
        offsets = np.frombuffer(values.buffers()[1], np.int64)
        offsets = offsets[values.offset : values.offset + len(values) + 1]
        data = values.buffers()[2]
        blob = np.empty(0, np.uint8) if data is None else np.frombuffer(data, np.uint8)
        arrays[f"{key}.offsets"] = offsets - offsets[0]
        arrays[f"{key}.data"] = blob[offsets[0] : offsets[-1]]
        header["type"] = name
    return header


def dump_sketches(stats: SplitStats) -> bytes:
    """The `.npz` bytes of a split's accumulator."""
    arrays: dict[str, np.ndarray] = {}
    features = []
    for i, (name, f) in enumerate(stats.features.items()):
        entry: dict[str, Any] = {"name": name, "kind": f.kind}
        entry.update({key: getattr(f, key) for key in _COUNTS + _OPTIONAL})
        entry.update(mean=_float(f.mean), m2=_float(f.m2), min=_float(f.min), max=_float(f.max))
        entry["infinities"] = list(f.infinities)
        for key in ("sample", "value_counts"):
            sample = getattr(f, key)
            if sample is not None:
                entry[key] = _sample_arrays(arrays, f"{i}.{key}", sample)
        if f.distinct is not None:
            hll = f.distinct
            entry["distinct"] = {"p": hll.p, "exact_limit": hll.exact_limit, "exact": hll.exact}
            found = hll.hashes if hll.exact else hll.registers
            arrays[f"{i}.distinct"] = np.asarray(found)
        if f.top is not None:
            entry["top"] = _top_arrays(arrays, f"{i}.top", f.top)
        features.append(entry)
    header = {"version": _VERSION, "rows": stats.rows, "features": features}
    arrays["header"] = np.frombuffer(json.dumps(header).encode("utf-8"), np.uint8)
    out = io.BytesIO()
    np.savez(out, **arrays)
    return out.getvalue()


def _sample(arrays: Any, key: str, header: dict[str, Any]) -> Sample:
    values = np.asarray(arrays[f"{key}.values"], np.float64)
    priorities = np.asarray(arrays[f"{key}.priorities"], np.uint64)
    if len(values) != len(priorities):
        raise ValueError(f"{key}: {len(values)} values, {len(priorities)} priorities")
    return Sample(int(header["k"]), values, priorities)


def _top(arrays: Any, key: str, header: dict[str, Any]) -> TopK:
    top = TopK(capacity=int(header["capacity"]), exact=bool(header["exact"]))
    counts = np.asarray(arrays[f"{key}.counts"], np.int64)
    hashes = np.asarray(arrays[f"{key}.hashes"], np.uint64)
    if header["type"] is None:
        return top
    offsets = np.asarray(arrays[f"{key}.offsets"], np.int64)
    data = np.asarray(arrays[f"{key}.data"], np.uint8)
    fits = len(offsets) == len(counts) + 1 == len(hashes) + 1
    if not fits or offsets[0] != 0 or offsets[-1] != len(data) or (np.diff(offsets) < 0).any():
        raise ValueError(f"{key}: the top values' offsets do not fit their counts and bytes")
    values = pa.Array.from_buffers(
        pa.large_binary(), len(counts), [None, pa.py_buffer(offsets), pa.py_buffer(data)]
    )
    top.values = values.cast(_TOP_TYPES[header["type"]])
    top.counts, top.hashes = counts, hashes
    return top


def _feature(arrays: Any, i: int, entry: dict[str, Any]) -> FeatureStats:
    f = FeatureStats(str(entry["kind"]))
    for key in _COUNTS:
        setattr(f, key, int(entry[key]))
    for key in _OPTIONAL:
        setattr(f, key, None if entry[key] is None else int(entry[key]))
    f.mean, f.m2 = _unfloat(entry["mean"]), _unfloat(entry["m2"])
    f.min, f.max = _unfloat(entry["min"]), _unfloat(entry["max"])
    negative, positive = entry["infinities"]
    f.infinities = (int(negative), int(positive))
    for key in ("sample", "value_counts"):
        if key in entry:
            setattr(f, key, _sample(arrays, f"{i}.{key}", entry[key]))
    if "distinct" in entry:
        d = entry["distinct"]
        hll = HyperLogLog(p=int(d["p"]), exact_limit=int(d["exact_limit"]))
        found = arrays[f"{i}.distinct"]
        if d["exact"]:
            hll.hashes = np.asarray(found, np.uint64)
        else:
            if len(found) != 1 << hll.p:
                raise ValueError(f"{i}.distinct: {len(found)} registers, not {1 << hll.p}")
            hll.hashes, hll.registers = None, np.asarray(found, np.uint8).copy()
        f.distinct = hll
    if "top" in entry:
        f.top = _top(arrays, f"{i}.top", entry["top"])
    return f


def load_sketches(data: bytes, where: str) -> SplitStats:
    """The accumulator `dump_sketches` saved; ValueError naming `where` when it is not one."""
    try:
        with np.load(io.BytesIO(data), allow_pickle=False) as arrays:
            header = json.loads(bytes(arrays["header"]).decode("utf-8"))
            if header.get("version") != _VERSION:
                raise ValueError(f"version {header.get('version')} is not supported")
            stats = SplitStats(rows=int(header["rows"]))
            for i, entry in enumerate(header["features"]):
                stats.features[str(entry["name"])] = _feature(arrays, i, entry)
            return stats
    except (KeyError, TypeError, ValueError, OSError, zipfile.BadZipFile) as err:
        raise ValueError(f"{where}: not a statistics accumulator file: {err}") from err


def write_sketches(output_dir: str, split: str, stats: SplitStats) -> str:
    """Write the split's accumulator file; returns its path relative to `output_dir`."""
    relative = sketches_path(split)
    path = FileSystems.join(output_dir, *relative.split("/"))
    with FileSystems.create(path, mime_type="application/octet-stream") as f:
        f.write(dump_sketches(stats))
    return relative


def read_sketches(output_dir: str, split: str) -> SplitStats:
    """The accumulator `write_sketches` wrote for `split` in `output_dir`; FileNotFoundError
    without one, ValueError when it is malformed."""
    return read_sketches_file(fs.join(output_dir, *sketches_path(split).split("/")))


def read_sketches_file(path: str) -> SplitStats:
    """The accumulator saved in the file `path` (`read_sketches` of a file of any name)."""
    if not fs.exists(path):
        raise FileNotFoundError(f"{path}: no statistics accumulator")
    with fs.open_read(path) as f:
        return load_sketches(f.read(), path)
