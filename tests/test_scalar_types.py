"""The scalar types beyond the common ones round trip (docs/types.md): uint64 over its whole
range, time32/time64 and duration (int64 counts of their unit), decimals of every width and
precision, half floats, dictionaries of any value type, string and binary views, and lists of
these. Source Parquet and CSV -> convert on both engines -> `load_dataset` and `iter_batches` ->
the source's values; the statistics, `verify --source`, `inspect`, the report and the tfds
layout on the same output."""

from __future__ import annotations

import decimal
import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import tensorflow as tf
from conftest import read_output, run_cli_captured
from stats_oracle import check_statistics, expected_statistics
from tensorflow_metadata.proto.v0 import statistics_pb2
from test_reader_arrays import assert_readers_agree

from pipeline.output.manifest import StoredFeature, read_manifest
from pipeline.reader import load_dataset, parse_spec, restore
from pipeline.reader.arrays import Layout, decode_batch
from pipeline.reader.records import RecordBlock
from transforms.encode.features import FeatureSpec
from transforms.encode.records import encode_table
from transforms.encode.schema import plan_features

ROWS = 300
BATCH = 64
U64_MAX, I64_MIN, I64_MAX = 2**64 - 1, -(2**63), 2**63 - 1


def dec(k: int, scale: int) -> decimal.Decimal:
    """The decimal k * 10**-scale, exact at any precision."""
    return decimal.Decimal(f"{k}E-{scale}")


def dec_text(k: int, scale: int) -> bytes:
    """What the records hold for that decimal: its plain text with `scale` decimals."""
    digits = str(abs(k)).rjust(scale + 1, "0")
    text = f"{digits[:-scale]}.{digits[-scale:]}" if scale else digits
    return (("-" if k < 0 else "") + text).encode("ascii")


def make_columns(n: int = ROWS, seed: int = 5) -> dict[str, tuple[list, pa.DataType, list, str]]:
    """name -> (source values, Arrow type, values restored per row (None: null), dtype)."""
    rng = np.random.default_rng(seed)

    def nullify(values: list, edges: list) -> list:
        """`edges` first, then random values with some nulls."""
        values = list(edges) + list(values[len(edges) :])
        mask = rng.random(n) < 0.15
        mask[: len(edges)] = False
        return [None if m else v for v, m in zip(values, mask, strict=True)]

    def ints(lo: int, hi: int, edges: list, dtype: type = np.int64) -> list:
        drawn = rng.integers(lo, hi, n, dtype=dtype, endpoint=True)
        return nullify([int(v) for v in drawn], edges)

    def same(values: list, t: pa.DataType, dtype: str) -> tuple[list, pa.DataType, list, str]:
        return values, t, values, dtype

    def decimals(precision: int, scale: int, t: pa.DataType) -> tuple:
        top = 10**precision - 1
        ks = ints(-min(top, I64_MAX), min(top, I64_MAX), [0, 1, -1, top, -top])
        return (
            [None if k is None else dec(k, scale) for k in ks],
            t,
            [None if k is None else dec_text(k, scale) for k in ks],
            "string",
        )

    day_ns = 86_400 * 10**9
    u64 = ints(0, U64_MAX, [0, I64_MAX, 2**63, U64_MAX, U64_MAX - 1], np.uint64)
    f16 = [float(np.float16(v)) for v in rng.normal(0, 100, n)]
    f16 = nullify(f16, [0.0, -0.0, 65504.0, -65504.0, 6e-08, float("inf"), float("nan")])
    words = nullify([str(rng.choice(["a", "bb", "", "ünï"])) for _ in range(n)], ["", "a"])
    lists_u64 = nullify(
        [
            [int(v) for v in rng.integers(0, U64_MAX, rng.integers(0, 4), np.uint64)]
            for _ in range(n)
        ],
        [[], [U64_MAX, 0, 2**63]],
    )
    lists_t64 = nullify(
        [
            [int(v) for v in rng.integers(0, day_ns // 1000 - 1, rng.integers(0, 3))]
            for _ in range(n)
        ],
        [[], [0]],
    )
    lists_words = nullify(
        [[str(rng.choice(["x", "", "yy"]))] * int(rng.integers(0, 3)) for _ in range(n)], [[], [""]]
    )

    def as_bytes(values: list) -> list:
        return [None if v is None else v.encode() for v in values]

    return {
        "id": same(list(range(n)), pa.int64(), "int64"),
        "u64": same(u64, pa.uint64(), "uint64"),
        "t32ms": same(ints(0, 86_400_000 - 1, [0, 86_399_999]), pa.time32("ms"), "int64"),
        "t64us": same(ints(0, day_ns // 1000 - 1, [0, 1]), pa.time64("us"), "int64"),
        "t64ns": same(ints(0, day_ns - 1, [0, day_ns - 1]), pa.time64("ns"), "int64"),
        "dur_s": same(ints(I64_MIN, I64_MAX, [0, -1, I64_MIN, I64_MAX]), pa.duration("s"), "int64"),
        "dur_ms": same(ints(-(10**12), 10**12, [0, -1]), pa.duration("ms"), "int64"),
        "dur_us": same(ints(-(10**15), 10**15, [0, 1]), pa.duration("us"), "int64"),
        "dur_ns": same(ints(I64_MIN, I64_MAX, [0, I64_MAX]), pa.duration("ns"), "int64"),
        "dec32": decimals(9, 2, pa.decimal32(9, 2)),
        "dec64": decimals(18, 6, pa.decimal64(18, 6)),
        "dec128": decimals(38, 0, pa.decimal128(38, 0)),
        "dec256": decimals(76, 38, pa.decimal256(76, 38)),
        "f16": same(f16, pa.float16(), "float16"),
        "dict_s": (
            words,
            pa.dictionary(pa.int16(), pa.string()),
            [None if w is None else w.encode() for w in words],
            "string",
        ),
        "sv": (words, pa.string_view(), as_bytes(words), "string"),
        "bv": (as_bytes(words), pa.binary_view(), as_bytes(words), "string"),
        "lu64": same(lists_u64, pa.list_(pa.uint64()), "uint64"),
        "lt64": same(lists_t64, pa.large_list(pa.time64("us")), "int64"),
        "ldict": (
            lists_words,
            pa.list_(pa.dictionary(pa.int8(), pa.string())),
            [None if v is None else [w.encode() for w in v] for v in lists_words],
            "string",
        ),
        "lsv": (
            lists_words,
            pa.list_(pa.string_view()),
            [None if v is None else [w.encode() for w in v] for v in lists_words],
            "string",
        ),
    }


COLUMNS = make_columns()
UNITS = {"t32ms": "ms", "t64us": "us", "t64ns": "ns", "dur_s": "s", "dur_ms": "ms"}
UNITS |= {"dur_us": "us", "dur_ns": "ns", "lt64": "us"}
RAGGED = {"lu64", "lt64", "ldict", "lsv"}


def source_table() -> pa.Table:
    arrays = {}
    for name, (values, t, _, _) in COLUMNS.items():
        if pa.types.is_dictionary(t):
            arrays[name] = pa.array(values, t.value_type).dictionary_encode().cast(t)
        elif pa.types.is_list(t) and pa.types.is_dictionary(t.value_type):
            plain = pa.array(values, pa.list_(t.value_type.value_type))
            arrays[name] = plain.cast(t)
        else:
            arrays[name] = pa.array(values, t)
    return pa.table(arrays)


def collect(dataset) -> dict[str, list | np.ndarray]:
    """All batches -> name -> the rows ordered by id: a numpy array for a dense feature, a list
    of python lists for a ragged one."""
    parts: dict[str, list] = {}
    for batch in dataset:
        for name, value in batch.items():
            if isinstance(value, tf.RaggedTensor):
                parts.setdefault(name, []).extend(value.to_list())
            else:
                parts.setdefault(name, []).append(value.numpy())
    order = np.argsort(np.concatenate(parts["id"]), kind="stable")
    return {
        name: [rows[i] for i in order]
        if rows and not isinstance(rows[0], np.ndarray)
        else np.concatenate(rows)[order]
        for name, rows in parts.items()
    }


def check_column(got: dict[str, list], name: str, expected: list, dtype: str) -> None:
    np_dtype = object if dtype == "string" else np.dtype(dtype)
    if name in RAGGED:  # a null and an empty list are both an empty row
        assert len(got[name]) == len(expected), name
        for i, (row, want) in enumerate(zip(got[name], expected, strict=True)):
            want = np.array([] if want is None else want, np_dtype)
            np.testing.assert_array_equal(np.array(row, np_dtype), want, f"{name} row {i}")
        return
    zero = b"" if dtype == "string" else 0
    want = np.array([zero if v is None else v for v in expected], np_dtype)
    actual = got[name]
    assert actual.dtype == want.dtype, (name, actual.dtype, want.dtype)
    np.testing.assert_array_equal(actual, want, name)
    if want.dtype.kind == "f":  # -0.0 stays -0.0
        np.testing.assert_array_equal(np.signbit(actual), np.signbit(want), name)
    present = [v is not None for v in expected]
    if all(present):
        assert name + "__present" not in got, name
    else:
        assert got[name + "__present"].tolist() == present, name


def convert(out: Path, source: Path, *flags: str) -> Path:
    args = ["convert", "--input", source, "--output", out, "--batch-rows", "70", *flags]
    result = run_cli_captured(args)
    assert result.code == 0, result.err
    return out


@pytest.fixture(scope="module")
def source(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("scalars") / "scalars.parquet"
    pq.write_table(source_table(), path, row_group_size=100)
    return path


@pytest.fixture(scope="module", params=["in-process", "beam"])
def output(request, source) -> Path:
    out = source.parent / f"out-{request.param}"
    return convert(out, source, "--engine", request.param, "--num-shards", "2")


def test_the_source_keeps_its_types(source):
    """The Parquet file holds the types under test (so the job sees them, not others)."""
    schema = pq.read_schema(source)
    for name, (_, t, _, _) in COLUMNS.items():
        assert schema.field(name).type == t, name


def test_manifest_dtypes_and_units(output):
    features = {f.name: f.spec for f in read_manifest(str(output)).features}
    assert set(features) == set(COLUMNS)
    for name, (_, _, _, dtype) in COLUMNS.items():
        spec = features[name]
        assert spec.dtype == dtype, name
        assert spec.unit == UNITS.get(name), name
        assert spec.shape == (None if name in RAGGED else ()), name
    assert features["u64"].kind == "int64" and features["dec256"].kind == "bytes"


def test_load_dataset_restores_every_value(output):
    got = collect(load_dataset(str(output), batch_size=BATCH))
    for name, (_, _, expected, dtype) in COLUMNS.items():
        check_column(got, name, expected, dtype)
    assert got["u64"][:5].tolist() == [0, I64_MAX, 2**63, U64_MAX, U64_MAX - 1]
    assert got["dur_s"][2:4].tolist() == [I64_MIN, I64_MAX]
    assert got["dec256"][3] == b"9" * 38 + b"." + b"9" * 38
    assert got["lu64"][1] == [U64_MAX, 0, 2**63]


def test_iter_batches_equals_load_dataset(output):
    assert assert_readers_agree(output) == ROWS


def test_statistics_of_the_values(output):
    """uint64 statistics are those of the column's values (not of the int64 bits stored)."""
    manifest = read_manifest(str(output))
    path = output / manifest.statistics["train"]
    (stats,) = statistics_pb2.DatasetFeatureStatisticsList.FromString(path.read_bytes()).datasets
    records = read_output(output)  # each record's features as stored
    specs = [f.spec for f in manifest.features]
    check_statistics(stats, expected_statistics(records, specs))
    (u64,) = [f for f in stats.features if f.path.step[0] == "u64"]
    assert u64.num_stats.max == float(U64_MAX) and u64.num_stats.min == 0.0


def test_verify_inspect_and_report(output, source):
    result = run_cli_captured(["verify", output, "--source", source])
    assert result.code == 0, result.out + result.err
    assert json.loads(result.out.strip().splitlines()[-1])["status"] == "passed"
    result = run_cli_captured(["inspect", output, "-n", str(ROWS)])
    assert result.code == 0, result.err
    report = json.loads(result.out)
    (row,) = [r for r in report["records"] if r["id"] == [3]]
    assert row["u64"] == [-1]  # the bits of 2**64 - 1, as stored
    assert report["manifest"]["features"]["t64ns"]["dtype"] == "int64"
    result = run_cli_captured(["report", output])
    assert result.code == 0, result.err
    page = (output / "report.html").read_text(encoding="utf-8")
    assert "duration[ns]" in page and "decimal256(76, 38)" in page and "(ns)" in page


def test_both_engines_write_the_same_records(source, tmp_path):
    """One shard each: the two engines' records are the same bytes."""
    outs = [
        convert(tmp_path / engine, source, "--engine", engine, "--num-shards", "1")
        for engine in ("in-process", "beam")
    ]
    shards = [sorted(out.glob("train-*")) for out in outs]
    assert [len(s) for s in shards] == [1, 1]
    records = [list(tf.data.TFRecordDataset(str(s[0]), "GZIP").as_numpy_iterator()) for s in shards]
    assert len(records[0]) == ROWS and sorted(records[0]) == sorted(records[1])


# ----------------------------------------------------------------------------- text sources


def test_csv_uint64_and_times(tmp_path):
    """CSV carries uint64 over its whole range and times of day: the same values come back."""
    lines = ["id,u,t,tus", f"0,{U64_MAX},23:59:59,00:00:00.000001", "1,0,00:00:00,12:00:00"]
    lines += [f"2,{2**63},,", "3,,01:02:03,"]
    path = tmp_path / "t.csv"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    config = tmp_path / "job.yaml"
    config.write_text(
        "csv:\n  column_types: {id: int64, u: uint64, t: 'time32[s]', tus: 'time64[us]'}\n",
        encoding="utf-8",
    )
    for engine in ("in-process", "beam"):
        out = convert(tmp_path / engine, path, "--engine", engine, "--config", str(config))
        features = {f.name: f.spec for f in read_manifest(str(out)).features}
        assert (features["u"].dtype, features["t"].unit, features["tus"].unit) == (
            "uint64",
            "s",
            "us",
        )
        got = collect(load_dataset(str(out), batch_size=BATCH))
        assert got["u"].tolist() == [U64_MAX, 0, 2**63, 0]
        assert got["u__present"].tolist() == [True, True, True, False]
        assert got["t"].tolist() == [86_399, 0, 0, 3723]
        assert got["tus"].tolist() == [1, 12 * 3600 * 10**6, 0, 0]
        assert assert_readers_agree(out) == 4


def test_json_lines_uint64(tmp_path):
    """JSON Lines carries uint64 over its whole range once the field's type is set."""
    lines = [f'{{"id": 0, "u": {U64_MAX}}}', '{"id": 1, "u": 0}', '{"id": 2, "u": null}']
    lines.append(f'{{"id": 3, "u": {2**63}}}')
    path = tmp_path / "t.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    config = tmp_path / "job.yaml"
    config.write_text("columns:\n  u: {type: uint64}\n", encoding="utf-8")
    out = convert(tmp_path / "out", path, "--config", str(config))
    got = collect(load_dataset(str(out), batch_size=BATCH))
    assert got["u"].tolist() == [U64_MAX, 0, 0, 2**63]
    assert got["u__present"].tolist() == [True, True, False, True]
    assert assert_readers_agree(out) == 4


# ----------------------------------------------------------------------------- in memory


def dictionary(values: list, value_type: pa.DataType) -> pa.DictionaryArray:
    """A dictionary array of `values` (built by hand: not every type has dictionary_encode)."""
    distinct = [v for i, v in enumerate(values) if v is not None and v not in values[:i]]
    indices = [None if v is None else distinct.index(v) for v in values]
    return pa.DictionaryArray.from_arrays(
        pa.array(indices, pa.int8()), pa.array(distinct, value_type)
    )


DICTIONARIES = {
    "int": (dictionary([7, None, -1, 7], pa.int32()), "int32", [7, 0, -1, 7]),
    "u64": (
        dictionary([U64_MAX, None, 0, U64_MAX], pa.uint64()),
        "uint64",
        [U64_MAX, 0, 0, U64_MAX],
    ),
    "f16": (dictionary([1.5, None, -0.0, 1.5], pa.float16()), "float16", [1.5, 0.0, -0.0, 1.5]),
    "f64": (dictionary([0.25, None, 0.5, 0.25], pa.float64()), "float64", [0.25, 0.0, 0.5, 0.25]),
    "ts": (dictionary([5, None, 6, 5], pa.timestamp("ms")), "int64", [5, 0, 6, 5]),
    "date": (dictionary([1, None, -1, 1], pa.date32()), "int64", [1, 0, -1, 1]),
    "time": (dictionary([3, None, 4, 3], pa.time64("ns")), "int64", [3, 0, 4, 3]),
    "dur": (dictionary([-3, None, 4, -3], pa.duration("s")), "int64", [-3, 0, 4, -3]),
    "dec": (
        dictionary([dec(150, 2), None, dec(-1, 2), dec(150, 2)], pa.decimal32(5, 2)),
        "string",
        [b"1.50", b"", b"-0.01", b"1.50"],
    ),
    "fsb": (
        dictionary([b"ab", None, b"\0\0", b"ab"], pa.binary(2)),
        "string",
        [b"ab", b"", b"\0\0", b"ab"],
    ),
    "ls": (dictionary(["x", None, "", "x"], pa.large_string()), "string", [b"x", b"", b"", b"x"]),
}


def test_dictionaries_of_any_value_type_in_memory():
    """Dictionary columns of every value type (Parquet decodes most of them on read): encoded
    in memory, restored alike by parse_example + restore and by the numpy decoder."""
    table = pa.table({name: arr for name, (arr, _, _) in DICTIONARIES.items()})
    specs = plan_features(table.schema)
    encoded, stats = encode_table(table, specs, "memory", 0)
    features = [StoredFeature(s, stats.nulls[s.name]) for s in specs]
    parsed = tf.io.parse_example(tf.constant(encoded.records()), parse_spec(features))
    theirs = restore(parsed, features)
    records = encoded.records()
    buffer = np.frombuffer(b"".join(records), np.uint8)
    stops = np.cumsum([len(r) for r in records])
    block = RecordBlock(buffer, stops - [len(r) for r in records], stops)
    manifest = _Manifest(features)
    ours = decode_batch(block, Layout(manifest, None, True))  # type: ignore[arg-type]
    assert sorted(ours) == sorted(theirs)
    for name, (_, dtype, expected) in DICTIONARIES.items():
        spec = {s.name: s for s in specs}[name]
        assert spec.dtype == dtype, name
        got = theirs[name].numpy()
        want = np.array(expected, object if dtype == "string" else dtype)
        np.testing.assert_array_equal(got, want, name)
        np.testing.assert_array_equal(ours[name], got, name)
        assert ours[name].dtype == got.dtype, name
        assert theirs[name + "__present"].numpy().tolist() == [True, False, True, True], name
        assert ours[name + "__present"].tolist() == [True, False, True, True], name
    assert np.signbit(theirs["f16"].numpy()[2]) and np.signbit(ours["f16"][2])


class _Manifest:
    """What `Layout` reads of a manifest: its features, and no sequence."""

    def __init__(self, features: list[StoredFeature]) -> None:
        self.features = features
        self.sequence = None


def test_spec_units_round_trip_through_json():
    spec = plan_features(pa.schema([("t", pa.time64("ns")), ("d", pa.duration("ms"))]))
    assert [(s.kind, s.dtype, s.unit) for s in spec] == [
        ("int64", "int64", "ms"),
        ("int64", "int64", "ns"),
    ]
    assert [FeatureSpec.from_json(s.to_json()) for s in spec] == spec


def test_tfds_reads_what_load_dataset_reads(source, tmp_path):
    """The tfds layout's features.json restores these types as load_dataset does (uint64 past
    int64 included)."""
    import tensorflow_datasets as tfds
    from test_layouts import _assert_same_row, _rows, _tfds_rows

    out = convert(tmp_path / "tfds", source, "--layout", "tfds")
    manifest = json.loads((out / "manifest.json").read_text(encoding="utf-8"))
    got = _tfds_rows(tfds.builder_from_directory(str(out)), "train")
    want = _rows(out, "train")
    assert len(got) == len(want) == ROWS
    for a, b in zip(got, want, strict=True):
        _assert_same_row(a, b, manifest)
    assert sorted(int(row["u64"][0]) for row in got if len(row["u64"]))[-1] == U64_MAX
