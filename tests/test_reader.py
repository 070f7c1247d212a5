"""Round trips: Arrow table -> Parquet/CSV -> conversion job -> load_dataset -> the same values."""

from __future__ import annotations

import decimal
import json
import math
import shutil
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import tensorflow as tf

import pipeline.reader.dataset as reader_module
from pipeline.cli.main import main
from pipeline.output.manifest import StoredFeature, read_manifest
from pipeline.reader import (
    PRESENT_SUFFIX,
    feature_spec,
    load_dataset,
    parse_spec,
    read_features,
    restore,
)
from transforms.encode.records import encode_table
from transforms.encode.schema import ColumnOptions, plan_features

ROOT = Path(__file__).resolve().parent.parent
SAMPLE = ROOT / "sample"
ROWS = 700
BATCH = 64  # 10 full batches and one of 60 rows
I64_MIN, I64_MAX = -(2**63), 2**63 - 1
NAN, INF = float("nan"), float("inf")


# ---------------------------------------------------------------------------------------------
# The source table: every supported type, with nulls, zeros, "", False and empty lists.


def _nullify(rng, values, fraction=0.15, keep=()):
    """Some values -> None (never the rows in `keep`, where the edge cases are)."""
    mask = rng.random(len(values)) < fraction
    mask[list(keep)] = False
    return [None if m else v for v, m in zip(values, mask, strict=True)]


def _with_edges(values, edges):
    """The first rows hold the edge cases."""
    return list(edges) + list(values[len(edges) :])


def make_columns(rows=ROWS, seed=3):
    """name -> (python values, Arrow type). The values are the oracle the tests compare with."""
    rng = np.random.default_rng(seed)
    n = rows

    def ints(lo, hi, edges, nulls=True):
        vals = _with_edges([int(v) for v in rng.integers(lo, hi, n, endpoint=True)], edges)
        return _nullify(rng, vals, keep=range(len(edges))) if nulls else vals

    def floats(edges, nulls=True, scale=100.0):
        vals = _with_edges(rng.normal(0, scale, n).tolist(), edges)
        return _nullify(rng, vals, keep=range(len(edges))) if nulls else vals

    def words(edges, nulls=True):
        pool = ["a", "taxi", "ünïcödé ✓", "with space", "x" * 40]
        vals = _with_edges([str(rng.choice(pool)) + str(i) for i in range(n)], edges)
        return _nullify(rng, vals, keep=range(len(edges))) if nulls else vals

    def lists(make, max_len, edges, nulls=True):
        vals = [[make() for _ in range(rng.integers(0, max_len + 1))] for _ in range(n)]
        vals = _with_edges(vals, edges)
        return _nullify(rng, vals, keep=range(len(edges))) if nulls else vals

    def arrays(shape, make, nulls, edges=()):
        count = math.prod(shape)

        def one():
            flat = [make() for _ in range(count)]
            return np.array(flat, dtype=object).reshape(shape).tolist()

        vals = _with_edges([one() for _ in range(n)], edges)
        return _nullify(rng, vals, keep=range(max(1, len(edges)))) if nulls else vals

    def small_int():
        return int(rng.integers(-50, 50))

    def f32():
        return float(np.float32(rng.normal(0, 10)))

    def f64():
        return float(rng.normal(0, 1e6))

    dec = [decimal.Decimal(int(v)).scaleb(-3) for v in rng.integers(-(10**7), 10**7, n)]
    dec = _nullify(rng, _with_edges(dec, [decimal.Decimal(0).scaleb(-3)]), keep=[0])
    struct_values = [
        {
            "a": None if rng.random() < 0.1 else int(rng.integers(-5, 5)),
            "b": {"c": str(rng.choice(["", "p", "qq"])), "d": float(rng.normal())},
            "e": [int(v) for v in rng.integers(0, 9, rng.integers(0, 4))],
        }
        for _ in range(n)
    ]
    struct_values[0] = {"a": 0, "b": {"c": "", "d": 0.0}, "e": []}
    struct_values[1] = {"a": 1, "b": None, "e": None}
    struct_values = _nullify(rng, struct_values, keep=[0, 1])
    struct_type = pa.struct(
        [
            ("a", pa.int32()),
            ("b", pa.struct([("c", pa.string()), ("d", pa.float64())])),
            ("e", pa.list_(pa.int64())),
        ]
    )
    day_ms = 86_400_000
    return {
        "id": (list(range(n)), pa.int64()),
        "i8": (ints(-128, 127, [0, -128, 127]), pa.int8()),
        "i16": (ints(-(2**15), 2**15 - 1, [0, -(2**15)], nulls=False), pa.int16()),
        "i32": (ints(-(2**31), 2**31 - 1, [0, 2**31 - 1]), pa.int32()),
        "i64": (ints(I64_MIN, I64_MAX, [0, I64_MIN, I64_MAX, -1]), pa.int64()),
        "u8": (ints(0, 255, [0, 255]), pa.uint8()),
        "u16": (ints(0, 2**16 - 1, [0, 2**16 - 1], nulls=False), pa.uint16()),
        "u32": (ints(0, 2**32 - 1, [0, 2**32 - 1]), pa.uint32()),
        "u64": (ints(0, I64_MAX, [0, I64_MAX]), pa.uint64()),
        "flag": (
            _nullify(rng, [False, True] + [bool(v) for v in rng.random(n - 2) < 0.5], keep=[0, 1]),
            pa.bool_(),
        ),
        "flag_full": ([bool(v) for v in rng.random(n) < 0.3], pa.bool_()),
        "f16": (
            [
                float(np.float16(v)) if v is not None else None
                for v in floats([0.0, -0.0, 65504.0, NAN, -INF], scale=50.0)
            ],
            pa.float16(),
        ),
        "f32": (
            [float(np.float32(v)) for v in floats([0.0, -0.0, NAN, INF, 1e-40], nulls=False)],
            pa.float32(),
        ),
        "f64": (floats([0.0, -0.0, 0.1, 1e30, NAN]), pa.float64()),
        "f64_keep": (floats([0.0, -0.0, 0.1, 1e300, 5e-324, NAN, -INF]), pa.float64()),
        "f64_keep_list": (lists(f64, 4, [[], [0.0, -0.0, 0.1]]), pa.list_(pa.float64())),
        "f64_keep_fixed": (
            arrays((2,), f64, nulls=False, edges=[[0.0, -0.0]]),
            pa.list_(pa.float64(), 2),
        ),
        "f64_keep_vec": (
            arrays((2,), f64, nulls=True, edges=[[0.1, -0.0]]),
            pa.list_(pa.float64()),
        ),
        "s": (words(["", "ünïcödé ✓", "y" * 1000]), pa.string()),
        "ls": (words([""], nulls=False), pa.large_string()),
        "b": (
            _nullify(
                rng,
                _with_edges(
                    [
                        bytes(rng.integers(0, 256, rng.integers(0, 6), dtype=np.uint8))
                        for _ in range(n)
                    ],
                    [b"", b"\x00\xff\x00"],
                ),
                keep=[0, 1],
            ),
            pa.binary(),
        ),
        "lb": ([bytes([i % 256, 0, 255]) for i in range(n)], pa.large_binary()),
        "ts": (ints(-(10**15), 4 * 10**15, [0, -1]), pa.timestamp("us")),
        "ts_tz": (ints(0, 4 * 10**15, [0]), pa.timestamp("us", tz="America/Chicago")),
        "d32": (ints(-40_000, 40_000, [0, -1]), pa.date32()),
        "d64": (
            [None if v is None else v * day_ms for v in ints(-40_000, 40_000, [0, -1])],
            pa.date64(),
        ),
        "dec": (dec, pa.decimal128(12, 3)),
        "li": (
            lists(
                lambda: int(rng.integers(I64_MIN, I64_MAX)),
                5,
                [[], [0], [I64_MIN], list(range(-100, 200))],
            ),
            pa.list_(pa.int64()),
        ),
        "lf": (lists(f32, 5, [[], [0.0, -0.0]], nulls=False), pa.large_list(pa.float32())),
        "lstr": (
            lists(lambda: str(rng.choice(["", "ab", "ç"])), 3, [[], [""], ["", "x"]]),
            pa.list_(pa.string()),
        ),
        "fsl3": (arrays((3,), small_int, nulls=False, edges=[[0, 0, 0]]), pa.list_(pa.int32(), 3)),
        "fsl22": (arrays((2, 2), small_int, nulls=False), pa.list_(pa.list_(pa.int32(), 2), 2)),
        "grid": (
            arrays((2, 2), small_int, nulls=True, edges=[[[0, 0], [0, 0]]]),
            pa.list_(pa.list_(pa.int32())),
        ),
        "vec3": (arrays((3,), small_int, nulls=True), pa.list_(pa.int32())),
        "pairs": (
            lists(lambda: [f32(), f32()], 3, [[], [[0.0, -0.0]]]),
            pa.list_(pa.list_(pa.float32())),
        ),
        "st": (struct_values, struct_type),
    }


CONFIG = {
    "columns": {
        "f64_keep": {"keep_float64": True},
        "f64_keep_list": {"keep_float64": True},
        "f64_keep_fixed": {"keep_float64": True},
        "f64_keep_vec": {"keep_float64": True, "shape": [2]},
        "vec3": {"shape": [3]},
        "pairs": {"shape": [-1, 2]},
    }
}

# name -> (dtype restored, shape in the manifest: () scalar, None variable list)
EXPECTED_LAYOUT = {
    "id": ("int64", ()),
    "i8": ("int8", ()),
    "i16": ("int16", ()),
    "i32": ("int32", ()),
    "i64": ("int64", ()),
    "u8": ("uint8", ()),
    "u16": ("uint16", ()),
    "u32": ("uint32", ()),
    "u64": ("uint64", ()),
    "flag": ("bool", ()),
    "flag_full": ("bool", ()),
    "f16": ("float16", ()),
    "f32": ("float32", ()),
    "f64": ("float64", ()),
    "f64_keep": ("float64", ()),
    "f64_keep_list": ("float64", None),
    "f64_keep_fixed": ("float64", (2,)),
    "f64_keep_vec": ("float64", (2,)),
    "s": ("object", ()),
    "ls": ("object", ()),
    "b": ("object", ()),
    "lb": ("object", ()),
    "ts": ("int64", ()),
    "ts_tz": ("int64", ()),
    "d32": ("int64", ()),
    "d64": ("int64", ()),
    "dec": ("object", ()),
    "li": ("int64", None),
    "lf": ("float32", None),
    "lstr": ("object", None),
    "fsl3": ("int32", (3,)),
    "fsl22": ("int32", (2, 2)),
    "grid": ("int32", (2, 2)),
    "vec3": ("int32", (3,)),
    "pairs": ("float32", (-1, 2)),
    "st.a": ("int32", ()),
    "st.b.c": ("object", ()),
    "st.b.d": ("float64", ()),
    "st.e": ("int64", None),
}


def make_table(rows=ROWS):
    cols = make_columns(rows)
    return pa.table({name: pa.array(vals, t) for name, (vals, t) in cols.items()}), cols


def leaf_values(cols):
    """Feature name -> python values per row, struct leaves flattened (a null parent: None)."""
    out = {}
    for name, (vals, t) in cols.items():
        if pa.types.is_struct(t):
            a = [None if v is None else v["a"] for v in vals]
            b = [None if v is None else v["b"] for v in vals]
            out[f"{name}.a"] = a
            out[f"{name}.b.c"] = [None if v is None else v["c"] for v in b]
            out[f"{name}.b.d"] = [None if v is None else v["d"] for v in b]
            out[f"{name}.e"] = [None if v is None else v["e"] for v in vals]
        else:
            out[name] = vals
    return out


# ---------------------------------------------------------------------------------------------
# Running the job and reading it back.


def convert(tmp_dir: Path, source: Path, name: str, *extra: str, config=None) -> Path:
    out = tmp_dir / name
    args = ["convert", "--input", str(source), "--output", str(out), *extra]
    if config is not None:
        path = tmp_dir / f"{name}.yaml"
        path.write_text(json.dumps(config))  # JSON is YAML
        args += ["--config", str(path)]
    assert main(args) == 0
    return out


def collect(dataset, key="id"):
    """All batches -> name -> rows (numpy for dense, list of lists for ragged), sorted by key."""
    parts: dict[str, list] = {}
    for batch in dataset:
        for name, value in batch.items():
            if isinstance(value, tf.RaggedTensor):
                parts.setdefault(name, []).extend(value.to_list())
            else:
                parts.setdefault(name, []).append(value.numpy())
    out = {}
    order = np.argsort(np.concatenate(parts[key]), kind="stable")
    for name, chunks in parts.items():
        if chunks and isinstance(chunks[0], np.ndarray):
            out[name] = np.concatenate(chunks)[order]
        else:
            out[name] = [chunks[i] for i in order]
    return out


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    return tmp_path_factory.mktemp("reader")


@pytest.fixture(scope="module")
def source(work):
    table, cols = make_table()
    path = work / "all_types.parquet"
    pq.write_table(table, path, row_group_size=250)
    return path, leaf_values(cols)


@pytest.fixture(scope="module")
def output(work, source):
    path, _ = source
    return convert(work, path, "out", "--num-shards", "3", "--batch-rows", "100", config=CONFIG)


@pytest.fixture(scope="module")
def restored(output):
    return collect(load_dataset(str(output), batch_size=BATCH))


# ---------------------------------------------------------------------------------------------
# Comparing.

_NP_DTYPES = {"object": object}


def _expected_scalar(name, v):
    """A non-null source value as the reader returns it."""
    if isinstance(v, str):
        return v.encode("utf-8")
    if isinstance(v, decimal.Decimal):
        return str(v).encode("ascii")
    if name == "d64":
        return v // 86_400_000
    if name in ("f64", "st.b.d"):  # narrowed to float32 by the writer
        return float(np.float32(v))
    return v


def _assert_same(actual, expected, dtype, what):
    expected = np.array(expected, dtype=_NP_DTYPES.get(dtype, dtype))
    assert actual.dtype == expected.dtype, f"{what}: dtype {actual.dtype} != {expected.dtype}"
    assert actual.shape == expected.shape, f"{what}: shape {actual.shape} != {expected.shape}"
    np.testing.assert_array_equal(actual, expected, err_msg=what)
    if actual.dtype.kind == "f":  # -0.0 stays -0.0
        np.testing.assert_array_equal(np.signbit(actual), np.signbit(expected), err_msg=what)


def check_dense(got, name, values, dtype, shape):
    present = np.array([v is not None for v in values])
    mask_key = name + PRESENT_SUFFIX
    if present.all():
        assert mask_key not in got, f"{name}: a mask for a column without nulls"
    else:
        np.testing.assert_array_equal(got[mask_key], present, err_msg=f"{name} mask")
        assert got[mask_key].dtype == np.bool_
    zeros = np.zeros(shape, dtype=_NP_DTYPES.get(dtype, dtype))
    if dtype == "object":
        zeros[...] = b""
    expected = [
        np.array(_expected_nested(name, v), dtype=zeros.dtype) if v is not None else zeros
        for v in values
    ]
    _assert_same(got[name], np.stack(expected) if expected else [], dtype, name)


def _expected_nested(name, v):
    if isinstance(v, list):
        return [_expected_nested(name, x) for x in v]
    return _expected_scalar(name, v)


def check_ragged(got, name, values, dtype):
    if any(v is None for v in values):  # a null row and an empty list read apart
        assert got[name + PRESENT_SUFFIX].tolist() == [v is not None for v in values], name
    else:
        assert name + PRESENT_SUFFIX not in got
    rows = got[name]
    assert len(rows) == len(values)
    for i, (row, v) in enumerate(zip(rows, values, strict=True)):
        expected = [] if v is None else _expected_nested(name, v)  # null -> an empty row
        actual = np.array(row, dtype=_NP_DTYPES.get(dtype, dtype))
        want = np.array(expected, dtype=_NP_DTYPES.get(dtype, dtype))
        if want.size == 0:
            assert actual.size == 0, f"{name} row {i}: {row!r} != {expected!r}"
            continue
        _assert_same(actual, want, dtype, f"{name} row {i}")


def check_all(got, values_by_name, layout=EXPECTED_LAYOUT):
    expected_keys = set(layout) | {
        name + PRESENT_SUFFIX
        for name in layout
        if any(v is None for v in values_by_name[name])  # ragged lists too
    }
    assert set(got) == expected_keys
    for name, (dtype, shape) in layout.items():
        values = values_by_name[name]
        if shape is None or (shape and shape[0] < 0):
            check_ragged(got, name, values, dtype)
        else:
            check_dense(got, name, values, dtype, shape)


# ---------------------------------------------------------------------------------------------
# Tests.


def test_manifest_describes_every_type(output):
    features = {f.name: f for f in read_features(str(output))}
    assert set(features) == set(EXPECTED_LAYOUT)
    for name, (dtype, shape) in EXPECTED_LAYOUT.items():
        spec = features[name].spec
        assert spec.dtype == ("string" if dtype == "object" else dtype), name
        assert spec.shape == shape, name
    assert features["f64_keep"].spec.encoding == "float64_bytes"
    assert features["f64"].spec.encoding == "values"
    train = read_manifest(str(output)).splits["train"]
    assert train.rows == ROWS
    assert len(train.files) == 3


def test_round_trip_every_type(restored, source):
    _, values = source
    check_all(restored, values)


def test_round_trip_spot_checks(restored):
    """A few values spelled out, so a consistent misreading in the oracle cannot hide them."""
    assert restored["i64"][:4].tolist() == [0, I64_MIN, I64_MAX, -1]
    assert restored["u64"][1] == np.uint64(I64_MAX)
    assert restored["f64_keep"][2] == 0.1  # exact, not float32(0.1)
    assert restored["f64"][2] == np.float64(np.float32(0.1))
    assert np.signbit(restored["f64_keep"][1]) and restored["f64_keep__present"][1]
    assert restored["s"][0] == b"" and restored["s__present"][0]
    assert not restored["flag"][0] and restored["flag__present"][0]
    assert restored["dec"][0] == b"0.000"
    assert restored["d64"][1] == -1
    assert restored["grid"].shape == (ROWS, 2, 2) and restored["grid"].dtype == np.int32
    assert restored["grid"][0].tolist() == [[0, 0], [0, 0]] and restored["grid__present"][0]
    assert restored["pairs"][1] == [[0.0, -0.0]]
    assert restored["lstr"][:3] == [[], [b""], [b"", b"x"]]
    assert restored["st.b.c"][1] == b"" and not restored["st.b.c__present"][1]
    assert restored["st.e"][1] == []


def test_batches_have_static_shapes_and_a_partial_last_batch(output):
    ds = load_dataset(str(output), batch_size=BATCH)
    spec = ds.element_spec
    assert spec["fsl22"].shape.as_list() == [None, 2, 2]
    assert spec["grid"].shape.as_list() == [None, 2, 2]
    assert spec["f64_keep_vec"].shape.as_list() == [None, 2]
    assert spec["pairs"].shape.as_list() == [None, None, 2]
    assert isinstance(spec["li"], tf.RaggedTensorSpec)
    sizes = [int(b["id"].shape[0]) for b in ds]
    assert sizes == [BATCH] * (ROWS // BATCH) + [ROWS % BATCH]
    dropped = load_dataset(str(output), batch_size=BATCH, drop_remainder=True)
    assert dropped.element_spec["fsl22"].shape.as_list() == [BATCH, 2, 2]
    assert sum(1 for _ in dropped) == ROWS // BATCH


def test_feature_spec(output):
    spec = feature_spec(str(output))
    assert set(spec) == set(EXPECTED_LAYOUT)
    fixed, ragged = tf.io.FixedLenFeature, tf.io.RaggedFeature
    assert spec["id"] == fixed([], tf.int64)
    assert spec["i16"] == fixed([], tf.int64)
    assert spec["flag_full"] == fixed([], tf.int64)
    assert spec["f32"] == fixed([], tf.float32)
    assert spec["ls"] == fixed([], tf.string)
    assert spec["fsl3"] == fixed([3], tf.int64)
    assert spec["fsl22"] == fixed([4], tf.int64)
    assert spec["f64_keep_fixed"] == fixed([], tf.string)  # one bytes value per row
    assert spec["f64_keep"] == ragged(tf.string, row_splits_dtype=tf.int64)
    for name, dtype in [
        ("i8", tf.int64),
        ("f16", tf.float32),
        ("s", tf.string),
        ("grid", tf.int64),
        ("vec3", tf.int64),
        ("li", tf.int64),
        ("lf", tf.float32),
        ("lstr", tf.string),
        ("pairs", tf.float32),
        ("st.a", tf.int64),
    ]:
        assert spec[name] == ragged(dtype, row_splits_dtype=tf.int64), name


def test_null_masks_off_sequential_reads_moved_output(work, output, restored):
    moved = work / "moved"  # shard paths in the manifest are relative to it
    shutil.copytree(output, moved)
    ds = load_dataset(str(moved), batch_size=300, null_masks=False, num_parallel_reads=None)
    got = collect(ds)
    assert set(got) == set(EXPECTED_LAYOUT)
    np.testing.assert_array_equal(got["i8"], restored["i8"])
    np.testing.assert_array_equal(got["grid"], restored["grid"])


def test_interleaved_blocks_smaller_than_a_shard(monkeypatch, output, restored):
    # Shards hand over blocks of _READ_BLOCK records; with blocks much smaller than a shard,
    # batches are cut across blocks and shards, and every row still comes once.
    monkeypatch.setattr(reader_module, "_READ_BLOCK", 7)
    ds = load_dataset(str(output), batch_size=BATCH)
    sizes = [int(b["id"].shape[0]) for b in ds]
    assert sizes == [BATCH] * (ROWS // BATCH) + [ROWS % BATCH]
    got = collect(ds)
    for name in ("id", "i8", "grid", "f32"):
        np.testing.assert_array_equal(got[name], restored[name], err_msg=name)
    assert got["lstr"] == restored["lstr"]


def _ids(batches):
    return np.concatenate([b["id"].numpy() for b in batches])


def test_shuffle_with_seed(output, restored):
    ds = load_dataset(str(output), batch_size=BATCH, shuffle_buffer=200, seed=5)
    batches = list(ds)
    got = collect(batches)  # sorted by id: the same multiset of rows gives equal columns
    for name, value in restored.items():
        if isinstance(value, np.ndarray):
            np.testing.assert_array_equal(got[name], value, err_msg=name)
        else:
            assert got[name] == value, name
    first = _ids(batches)
    assert not np.array_equal(first, np.sort(first))
    again = _ids(load_dataset(str(output), batch_size=BATCH, shuffle_buffer=200, seed=5))
    np.testing.assert_array_equal(again, first)  # the same seed: the same order
    second_pass = _ids(ds)
    assert not np.array_equal(second_pass, first)  # each pass is shuffled anew
    assert sorted(second_pass.tolist()) == list(range(ROWS))


def test_repeat(output):
    twice = np.concatenate(
        [b["id"].numpy() for b in load_dataset(str(output), batch_size=BATCH, repeat=2)]
    )
    assert len(twice) == 2 * ROWS
    np.testing.assert_array_equal(np.bincount(twice), np.full(ROWS, 2))
    forever = load_dataset(str(output), batch_size=BATCH, repeat=True)
    assert sum(int(b["id"].shape[0]) for b in forever.take(30)) == 30 * BATCH


@pytest.mark.parametrize(
    ("compression", "sink", "suffix", "tf_type"),
    [
        # (the main output is gzip, blocks)
        ("none", "tfrecordio", ".tfrecord", ""),
        ("zlib", "blocks", ".tfrecord.deflate", "ZLIB"),
    ],
)
def test_other_compressions_and_sinks(work, source, restored, compression, sink, suffix, tf_type):
    path, _ = source
    out = convert(
        work,
        path,
        f"out-{compression}-{sink}",
        "--compression",
        compression,
        "--sink",
        sink,
        config=CONFIG,
    )
    manifest = read_manifest(str(out))
    assert manifest.tf_compression_type == tf_type
    assert all(f.endswith(suffix) for f in manifest.splits["train"].files)
    got = collect(load_dataset(str(out), batch_size=100))
    assert set(got) == set(restored)
    for name, value in restored.items():
        if isinstance(value, np.ndarray):
            np.testing.assert_array_equal(got[name], value, err_msg=name)
        else:
            assert got[name] == value, name


def test_csv_round_trip(work):
    out = convert(work, SAMPLE / "trips.csv", "csv")
    features = {f.name: f for f in read_features(str(out))}
    got = collect(load_dataset(str(out), batch_size=300), key="trip_id")
    src = pq.read_table(SAMPLE / "trips.parquet")  # the table the CSV was written from
    src = src.sort_by("trip_id")
    assert len(got["trip_id"]) == src.num_rows
    np.testing.assert_array_equal(got["trip_id"], src["trip_id"].to_numpy())
    # Timestamps come back in the unit the manifest names.
    unit = features["pickup_time"].spec.unit
    want = src["pickup_time"].cast(pa.timestamp(unit)).cast(pa.int64()).to_numpy()
    np.testing.assert_array_equal(got["pickup_time"], want)
    for name in ["trip_seconds", "trip_miles", "fare", "company"]:
        values = src[name].to_pylist()
        present = np.array([v is not None for v in values])
        np.testing.assert_array_equal(got[name + PRESENT_SUFFIX], present, err_msg=name)
        if name == "company":  # a quoted "" is an empty string, not a null
            want = [b"" if v is None else v.encode() for v in values]
            assert got[name].tolist() == want
            assert any(v == "" for v in values)
        else:
            want = np.array([0 if v is None else v for v in values], np.float64)
            np.testing.assert_array_equal(got[name], want.astype(np.float32).astype(np.float64))
    np.testing.assert_array_equal(got["tips"], src["tips"].to_numpy().astype(np.float64))
    np.testing.assert_array_equal(got["passengers"], src["passengers"].to_numpy())
    np.testing.assert_array_equal(got["airport"], src["airport"].to_numpy())
    assert got["payment_type"].tolist() == [v.encode() for v in src["payment_type"].to_pylist()]


def _through_encoder(table, columns):
    """A table through plan + encode_table in memory, then parse_example + restore."""
    specs = plan_features(table.schema, {k: ColumnOptions(**v) for k, v in columns.items()})
    encoded, stats = encode_table(table, specs, "memory", 0)
    features = [StoredFeature(s, stats.nulls[s.name]) for s in specs]
    parsed = tf.io.parse_example(tf.constant(encoded.records()), parse_spec(features))
    return features, restore(parsed, features)


def test_in_memory_types_parquet_cannot_carry():
    """date64 comes back from Parquet as date32, and a null fixed-size list cannot be read
    back from Parquet by this pyarrow: these, a dictionary and a fixed-size binary column go
    through the encoder in memory, then parse_example + restore."""
    table = pa.table(
        {
            "d64": pa.array([0, -86_400_000, None, 86_400_000 * 400], pa.date64()),
            "fsl": pa.array([[1, 2, 3], None, [0, 0, 0], None], pa.list_(pa.int32(), 3)),
            "fsl_f64": pa.array(
                [[0.1, -0.0], None, [1e300, 5e-324], [0.0, 0.0]], pa.list_(pa.float64(), 2)
            ),
            "dict": pa.array(["a", None, "", "a"]).dictionary_encode(),
            "fsb": pa.array([b"ab", b"\0\0", None, b"zz"], pa.binary(2)),
        }
    )
    _, got = _through_encoder(table, {"fsl_f64": {"keep_float64": True}})
    assert got["d64"].numpy().tolist() == [0, -1, 0, 400]
    assert got["d64__present"].numpy().tolist() == [True, True, False, True]
    assert got["fsl"].dtype == tf.int32
    assert got["fsl"].numpy().tolist() == [[1, 2, 3], [0, 0, 0], [0, 0, 0], [0, 0, 0]]
    assert got["fsl__present"].numpy().tolist() == [True, False, True, False]
    assert got["fsl_f64"].numpy().tolist() == [[0.1, -0.0], [0, 0], [1e300, 5e-324], [0, 0]]
    assert np.signbit(got["fsl_f64"].numpy()[0, 1])
    assert got["fsl_f64__present"].numpy().tolist() == [True, False, True, True]
    assert got["dict"].numpy().tolist() == [b"a", b"", b"", b"a"]
    assert got["dict__present"].numpy().tolist() == [True, False, True, True]
    assert got["fsb"].numpy().tolist() == [b"ab", b"\0\0", b"", b"zz"]


def test_float64_bytes_variable_lengths():
    """keep_float64 lists: with and without nulls, and with a variable outer dimension."""
    table = pa.table(
        {
            "var": pa.array([[0.1, -0.5, 2.0], None, [], [1e-300]], pa.list_(pa.float64())),
            "var_full": pa.array([[], [0.1], [-0.0, 1e300], [5e-324]], pa.list_(pa.float64())),
            "rows": pa.array(
                [[[0.1, 0.2]], None, [], [[1.0, 2.0], [3.0, -0.0]]],
                pa.list_(pa.list_(pa.float64())),
            ),
        }
    )
    keep = {"keep_float64": True}
    features, got = _through_encoder(
        table, {"var": keep, "var_full": keep, "rows": {**keep, "shape": [-1, 2]}}
    )
    spec = parse_spec(features)
    assert spec["var_full"] == tf.io.FixedLenFeature([], tf.string)  # one bytes value per row
    assert spec["var"] == tf.io.RaggedFeature(tf.string, row_splits_dtype=tf.int64)
    assert got["var"].to_list() == [[0.1, -0.5, 2.0], [], [], [1e-300]]
    assert got["var_full"].to_list() == [[], [0.1], [-0.0, 1e300], [5e-324]]
    assert got["var_full"].dtype == tf.float64
    assert got["rows"].shape.as_list() == [4, None, 2]
    assert got["rows"].to_list() == [[[0.1, 0.2]], [], [], [[1.0, 2.0], [3.0, -0.0]]]
    assert not any(key.endswith(PRESENT_SUFFIX) for key in got)


def test_restore_a_subset_and_unknown_keys(output):
    features = read_features(str(output))
    spec = parse_spec(features)
    manifest = read_manifest(str(output))
    files = [str(output / name) for name in manifest.splits["train"].files]
    ds = tf.data.TFRecordDataset(files, compression_type=manifest.tf_compression_type)
    records = next(iter(ds.batch(5)))
    parsed = tf.io.parse_example(records, {k: spec[k] for k in ("id", "grid")})
    got = restore(parsed, features)
    assert set(got) == {"id", "grid", "grid__present"}
    assert got["grid"].shape == (5, 2, 2)
    with pytest.raises(KeyError, match="not_a_feature"):
        restore({"not_a_feature": parsed["id"]}, features)


def _write_manifest(directory: Path, features, rows=0, files=()):
    directory.mkdir(parents=True, exist_ok=True)
    manifest = {
        "manifest_version": 1,
        "tf_compression_type": "",
        "splits": {"train": {"rows": rows, "files": list(files)}},
        "features": features,
    }
    (directory / "manifest.json").write_text(json.dumps(manifest))


def _entry(name, kind, dtype, shape, null_count):
    return {
        "name": name,
        "path": [name],
        "kind": kind,
        "dtype": dtype,
        "shape": shape,
        "encoding": "values",
        "source_type": dtype,
        "null_count": null_count,
    }


def test_mask_name_collision(tmp_path):
    features = [
        _entry("a", "int64", "int64", [], 3),
        _entry("a__present", "int64", "bool", [], 0),
    ]
    _write_manifest(tmp_path / "clash", features)
    with pytest.raises(ValueError, match="a__present"):
        load_dataset(str(tmp_path / "clash"))
    stored = [StoredFeature.from_json(f) for f in features]
    parsed = {"a": tf.RaggedTensor.from_row_lengths(tf.constant([1], tf.int64), [1, 0])}
    with pytest.raises(ValueError, match="null mask key 'a__present'"):
        restore(parsed, stored)
    assert restore(parsed, stored, null_masks=False)["a"].numpy().tolist() == [1, 0]
    ds = load_dataset(str(tmp_path / "clash"), null_masks=False)  # fine without masks
    assert list(ds) == []  # a split with no files is empty


def test_errors(tmp_path, output):
    with pytest.raises(FileNotFoundError, match="no manifest"):
        load_dataset(str(tmp_path / "missing"))
    with pytest.raises(FileNotFoundError, match="no manifest"):
        feature_spec(str(tmp_path))
    with pytest.raises(ValueError, match=r"split 'test' is not in the manifest.*'train'"):
        load_dataset(str(output), split="test")
    with pytest.raises(ValueError, match="batch_size"):
        load_dataset(str(output), batch_size=0)
    with pytest.raises(ValueError, match="repeat"):
        load_dataset(str(output), repeat=0)


def test_unknown_encoding(tmp_path):
    entry = {**_entry("a", "int64", "int64", [], 0), "encoding": "varint_zigzag"}
    _write_manifest(tmp_path / "newer", [entry])
    with pytest.raises(ValueError, match=r"'a'.*varint_zigzag"):
        feature_spec(str(tmp_path / "newer"))
