"""The Example encoder: bytes equal TensorFlow's deterministic serialization, framing and crc32c
readable by TensorFlow and Beam, and a property test over random Arrow tables."""

from __future__ import annotations

import decimal
import io
import itertools
import math
import struct
from typing import Any

import google_crc32c
import numpy as np
import pyarrow as pa
import pytest
import tensorflow as tf
from apache_beam.io.tfrecordio import _TFRecordUtil
from conftest import encode_rows, example_to_dict
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from transforms.encode.kernel.example import FRAME_OVERHEAD, crc32c, masked_crc32c

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1


def make_example(features: dict[str, tuple[str, list[Any]]]) -> tf.train.Example:
    """An Example with `features` name -> (kind, values); a kind with no values is still set."""
    example = tf.train.Example()
    example.features.SetInParent()
    for name, (kind, values) in features.items():
        feature = example.features.feature[name]
        target = {"int64": feature.int64_list, "float": feature.float_list}.get(
            kind, feature.bytes_list
        )
        target.SetInParent()
        target.value.extend(values)
    return example


def golden(example: tf.train.Example) -> bytes:
    return example.SerializeToString(deterministic=True)


def varint(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def sorted_serialization(example: tf.train.Example) -> bytes:
    """The Example with its map entries in UTF-8 byte order of the keys, each entry serialized
    by protobuf (C++ and pure-Python protobuf order keys this way; see the prefix test)."""
    items = sorted(example.features.feature.items(), key=lambda kv: kv[0].encode("utf-8"))
    entries = b"".join(
        tf.train.Features(feature={k: v}).SerializeToString(deterministic=True) for k, v in items
    )
    return b"\x0a" + varint(len(entries)) + entries


def has_prefix_pair(names) -> bool:
    encoded = sorted(n.encode("utf-8") for n in names)
    return any(b.startswith(a) for a, b in itertools.pairwise(encoded))


# ----------------------------------------------------------------------------- golden bytes


def test_literal_bytes_of_one_int_feature():
    # Example{features{feature{key:"a" value{int64_list{value:[1]}}}}}, written out by hand.
    expected = b"\x0a\x0c\x0a\x0a\x0a\x01a\x12\x05\x1a\x03\x0a\x01\x01"
    records = encode_rows(pa.table({"a": pa.array([1], pa.int64())}))
    assert records == [expected]
    assert golden(make_example({"a": ("int64", [1])})) == expected


def test_row_without_features_is_an_empty_features_message():
    records = encode_rows(pa.table({"a": pa.array([None], pa.int64())}))
    assert records == [b"\x0a\x00"]
    assert records == [golden(make_example({}))]
    assert example_to_dict(tf.train.Example.FromString(records[0])) == {}


GOLDEN_CASES = [
    pytest.param(
        pa.table({"x": pa.array([0, -1, INT64_MIN, INT64_MAX], pa.int64())}),
        [{"x": ("int64", [v])} for v in (0, -1, INT64_MIN, INT64_MAX)],
        id="int64-extremes",
    ),
    pytest.param(
        pa.table(
            {
                "zeta": pa.array([1.5, 0.0], pa.float32()),
                "alpha": pa.array([b"", b"\x00\xff"], pa.binary()),
                "Mid": pa.array([True, False]),
            }
        ),
        [
            {"zeta": ("float", [1.5]), "alpha": ("bytes", [b""]), "Mid": ("int64", [1])},
            {"zeta": ("float", [0.0]), "alpha": ("bytes", [b"\x00\xff"]), "Mid": ("int64", [0])},
        ],
        id="keys-out-of-order",
    ),
    pytest.param(
        pa.table({"k" * 200: pa.array([list(range(300)), []], pa.list_(pa.int64()))}),
        [{"k" * 200: ("int64", list(range(300)))}, {"k" * 200: ("int64", [])}],
        id="long-key-long-list-empty-list",
    ),
    pytest.param(
        pa.table(
            {
                "s": pa.array(["x" * 200, "", None], pa.string()),
                "f": pa.array([[1.0, -2.5], None, []], pa.list_(pa.float64())),
            }
        ),
        [
            {"s": ("bytes", [b"x" * 200]), "f": ("float", [1.0, -2.5])},
            {"s": ("bytes", [b""])},
            {"f": ("float", [])},
        ],
        id="long-bytes-nulls-empty-float-list",
    ),
    pytest.param(
        pa.table({"u": pa.array(["é", "日本"], pa.large_string()), "é": pa.array([1, 2])}),
        [
            {"u": ("bytes", ["é".encode()]), "é": ("int64", [1])},
            {"u": ("bytes", ["日本".encode()]), "é": ("int64", [2])},
        ],
        id="unicode-keys-and-values",
    ),
]


def test_keys_that_prefix_others_come_first():
    # Keys are written in UTF-8 byte order, so "trip" precedes "trip_id" and "0" precedes "00".
    # C++ and pure-Python protobuf serialize deterministically in that order; the upb backend
    # puts the longer key first when one key is a prefix of the other, so for such key sets the
    # bytes equal the byte-ordered serialization, and parse to the same Example.
    table = pa.table({"trip_id": [7], "trip": ["x"], "00": [-128], "0": [False]})
    features = {
        "trip_id": ("int64", [7]),
        "trip": ("bytes", [b"x"]),
        "00": ("int64", [-128]),
        "0": ("int64", [0]),
    }
    (record,) = encode_rows(table)
    assert record == sorted_serialization(make_example(features))
    parsed = tf.train.Example.FromString(record)
    assert parsed == make_example(features)
    assert list(entry_keys(record)) == ["0", "00", "trip", "trip_id"]


def entry_keys(record: bytes):
    """The map keys of a serialized Example, in the order they are written."""
    assert record[0] == 0x0A
    pos = 1
    _, pos = read_varint(record, pos)
    while pos < len(record):
        assert record[pos] == 0x0A
        length, pos = read_varint(record, pos + 1)
        entry = record[pos : pos + length]
        assert entry[0] == 0x0A
        key_len, key_pos = read_varint(entry, 1)
        yield entry[key_pos : key_pos + key_len].decode("utf-8")
        pos += length


def read_varint(data: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = data[pos]
        value |= (byte & 0x7F) << shift
        pos += 1
        if byte < 0x80:
            return value, pos
        shift += 7


@pytest.mark.parametrize(("table", "features"), GOLDEN_CASES)
def test_bytes_equal_deterministic_serialization(table, features):
    records = encode_rows(table)
    expected = [golden(make_example(f)) for f in features]
    assert records == expected
    for record, feats in zip(records, features, strict=True):
        parsed = tf.train.Example.FromString(record)
        assert parsed == make_example(feats)


# ----------------------------------------------------------------------------- framing, crc32c


FRAMING_TABLE = pa.table(
    {
        "id": pa.array(range(50), pa.int64()),
        "name": pa.array([f"row {i}" if i % 7 else None for i in range(50)]),
        "vec": pa.array([[float(i)] * (i % 5) for i in range(50)], pa.list_(pa.float32())),
    }
)


def split_frames(buffer: bytes) -> list[bytes]:
    out, handle = [], io.BytesIO(buffer)
    while (record := _TFRecordUtil.read_record(handle)) is not None:
        out.append(record)
    return out


def test_framed_records_are_tfrecord_frames_around_the_unframed_ones():
    unframed = encode_rows(FRAMING_TABLE)
    framed = encode_rows(FRAMING_TABLE, framed=True)
    assert len(framed) == len(unframed) == 50
    for frame, record in zip(framed, unframed, strict=True):
        assert len(frame) == len(record) + FRAME_OVERHEAD
        length, length_crc = struct.unpack("<QI", frame[:12])
        assert length == len(record)
        assert length_crc == masked_crc32c(frame[:8])
        assert frame[12:-4] == record
        assert struct.unpack("<I", frame[-4:])[0] == masked_crc32c(record)


def test_framed_buffer_read_by_beam(tmp_path):
    unframed = encode_rows(FRAMING_TABLE)
    buffer = b"".join(encode_rows(FRAMING_TABLE, framed=True))
    assert split_frames(buffer) == unframed  # Beam checks both masked crcs of every record


def test_framed_buffer_read_by_tensorflow(tmp_path):
    unframed = encode_rows(FRAMING_TABLE)
    path = tmp_path / "framed.tfrecord"
    path.write_bytes(b"".join(encode_rows(FRAMING_TABLE, framed=True)))
    records = list(tf.data.TFRecordDataset(str(path)).as_numpy_iterator())
    assert records == unframed
    ids = [
        tf.train.Example.FromString(r).features.feature["id"].int64_list.value[0] for r in records
    ]
    assert ids == list(range(50))


def test_corrupted_frame_is_rejected_by_both_readers(tmp_path):
    buffer = bytearray(b"".join(encode_rows(FRAMING_TABLE, framed=True)))
    buffer[20] ^= 0x01  # inside the first record's data
    with pytest.raises(ValueError, match="data mask"):
        split_frames(bytes(buffer))
    path = tmp_path / "bad.tfrecord"
    path.write_bytes(bytes(buffer))
    with pytest.raises(tf.errors.DataLossError):
        list(tf.data.TFRecordDataset(str(path)).as_numpy_iterator())


@pytest.mark.parametrize("size", [0, 1, 3, 7, 8, 9, 15, 16, 17, 63, 64, 65, 1000, 4096 + 5])
def test_crc32c_matches_google_crc32c(size):
    rng = np.random.default_rng(size)
    data = rng.integers(0, 256, size, dtype=np.uint8).tobytes()
    assert crc32c(data) == google_crc32c.value(data)
    assert crc32c(np.frombuffer(data, np.uint8)) == google_crc32c.value(data)
    assert masked_crc32c(data) == _TFRecordUtil._masked_crc32c(data)
    if size > 8:  # an unaligned view
        view = np.frombuffer(data, np.uint8)[3:]
        assert crc32c(view) == google_crc32c.value(data[3:])


def test_crc32c_known_value():
    # The CRC-32C check value (RFC 3720, B.4).
    assert crc32c(b"123456789") == 0xE3069283


@settings(max_examples=50, deadline=None)
@given(st.binary(max_size=300))
def test_crc32c_property(data):
    assert crc32c(data) == google_crc32c.value(data)


# ----------------------------------------------------------------------------- property test

NAME_ALPHABET = "ab-/_Aé0"  # neighbours of "." (struct separator) and a multi-byte letter

INT_TYPES = [
    (pa.int8(), -(2**7), 2**7 - 1),
    (pa.int16(), -(2**15), 2**15 - 1),
    (pa.int32(), -(2**31), 2**31 - 1),
    (pa.int64(), INT64_MIN, INT64_MAX),
    (pa.uint8(), 0, 2**8 - 1),
    (pa.uint16(), 0, 2**16 - 1),
    (pa.uint32(), 0, 2**32 - 1),
    (pa.uint64(), 0, INT64_MAX),
]
FLOAT_EDGES = [0.0, -0.0, math.inf, -math.inf, math.nan, 1e300, -1e-300, 5e-324, 3.4028235e38]

# A column generator draws (array, leaves, options); leaves: [(suffix, per-row expectation)],
# a per-row expectation is None (absent) or (kind, values).


def rows_of(draw, n: int, values: st.SearchStrategy, null_rate: float) -> list[Any]:
    nullable = values if null_rate == 0 else st.none() | values
    return draw(st.lists(nullable, min_size=n, max_size=n))


def per_row(values: list[Any], kind: str, convert=lambda v: [v]) -> list[Any]:
    return [None if v is None else (kind, convert(v)) for v in values]


def ints(lo: int, hi: int) -> st.SearchStrategy[int]:
    return st.sampled_from([lo, hi, 0, -1 if lo < 0 else 1]) | st.integers(lo, hi)


def float_values(width: int) -> st.SearchStrategy[float]:
    edges = [v for v in FLOAT_EDGES if width == 64 or abs(v) in (0.0, math.inf) or v != v]
    return st.sampled_from(edges) | st.floats(width=width)


@st.composite
def int_column(draw, n, nulls):
    t, lo, hi = draw(st.sampled_from(INT_TYPES))
    values = rows_of(draw, n, ints(lo, hi), nulls)
    return pa.array(values, t), [("", per_row(values, "int64"))], {}


@st.composite
def bool_column(draw, n, nulls):
    values = rows_of(draw, n, st.booleans(), nulls)
    return pa.array(values, pa.bool_()), [("", per_row(values, "int64", lambda v: [int(v)]))], {}


@st.composite
def float_column(draw, n, nulls):
    t, width = draw(st.sampled_from([(pa.float16(), 16), (pa.float32(), 32), (pa.float64(), 64)]))
    values = rows_of(draw, n, float_values(width), nulls)
    if t == pa.float16():
        data = np.array([0.0 if v is None else v for v in values], np.float16)
        arr = pa.array(data, pa.float16(), mask=np.array([v is None for v in values], bool))
    else:
        arr = pa.array(values, t)
    return arr, [("", per_row(values, "float"))], {}


@st.composite
def float64_bytes_column(draw, n, nulls):
    scalar = draw(st.booleans())
    if scalar:
        values = rows_of(draw, n, float_values(64), nulls)
        arr = pa.array(values, pa.float64())
        expected = per_row(values, "bytes", lambda v: [struct.pack("<d", v)])
    else:
        values = rows_of(draw, n, st.lists(float_values(64), max_size=4), nulls)
        arr = pa.array(values, pa.list_(pa.float64()))
        expected = per_row(values, "bytes", lambda v: [struct.pack(f"<{len(v)}d", *v)])
    return arr, [("", expected)], {"keep_float64": True}


@st.composite
def bytes_column(draw, n, nulls):
    t = draw(
        st.sampled_from(
            [pa.string(), pa.large_string(), pa.binary(), pa.large_binary(), pa.binary(3)]
        )
    )
    if pa.types.is_fixed_size_binary(t):
        values = rows_of(draw, n, st.binary(min_size=3, max_size=3), nulls)
    elif pa.types.is_string(t) or pa.types.is_large_string(t):
        values = rows_of(draw, n, st.text(max_size=8), nulls)
    else:
        values = rows_of(draw, n, st.binary(max_size=8), nulls)
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        expected = per_row(values, "bytes", lambda v: [v.encode("utf-8")])
    else:
        expected = per_row(values, "bytes")
    return pa.array(values, t), [("", expected)], {}


@st.composite
def temporal_column(draw, n, nulls):
    t = draw(
        st.sampled_from(
            [
                pa.timestamp("s"),
                pa.timestamp("ms"),
                pa.timestamp("us", "UTC"),
                pa.timestamp("ns"),
                pa.date32(),
                pa.date64(),
            ]
        )
    )
    if pa.types.is_timestamp(t):
        values = rows_of(draw, n, ints(-(2**62), 2**62), nulls)
        return pa.array(values, pa.int64()).cast(t), [("", per_row(values, "int64"))], {}
    days = rows_of(draw, n, ints(-(10**6), 10**6), nulls)
    if t == pa.date32():
        arr = pa.array(days, pa.int32()).cast(t)
    else:
        ms = [None if d is None else d * 86_400_000 for d in days]
        arr = pa.array(ms, pa.int64()).cast(t)
    return arr, [("", per_row(days, "int64"))], {}


@st.composite
def decimal_column(draw, n, nulls):
    precision = draw(st.integers(1, 38))
    scale = draw(st.integers(0, precision))
    unscaled = rows_of(draw, n, ints(-(10**precision) + 1, 10**precision - 1), nulls)
    exact = decimal.Context(prec=100)
    values = [None if u is None else decimal.Decimal(u).scaleb(-scale, exact) for u in unscaled]
    arr = pa.array(values, pa.decimal128(precision, scale))
    return arr, [("", per_row(values, "bytes", lambda v: [format(v, "f").encode()]))], {}


@st.composite
def list_column(draw, n, nulls):
    leaf, kind, values_st = draw(
        st.sampled_from(
            [
                (pa.int64(), "int64", ints(INT64_MIN, INT64_MAX)),
                (pa.int16(), "int64", ints(-(2**15), 2**15 - 1)),
                (pa.float32(), "float", st.floats(width=32)),
                (pa.string(), "bytes", st.text(max_size=4)),
            ]
        )
    )
    large = draw(st.booleans())
    values = rows_of(draw, n, st.lists(values_st, max_size=5), nulls)
    t = pa.large_list(leaf) if large else pa.list_(leaf)
    convert = (lambda v: [s.encode() for s in v]) if kind == "bytes" else list
    return pa.array(values, t), [("", per_row(values, kind, convert))], {}


@st.composite
def fixed_list_column(draw, n, nulls):
    size = draw(st.integers(1, 4))
    values = rows_of(
        draw, n, st.lists(ints(-(2**31), 2**31 - 1), min_size=size, max_size=size), nulls
    )
    arr = pa.array(values, pa.list_(pa.int32(), size))
    return arr, [("", per_row(values, "int64", list))], {}


@st.composite
def nested_list_column(draw, n, nulls):
    a, b = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    matrix = st.lists(
        st.lists(ints(INT64_MIN, INT64_MAX), min_size=b, max_size=b), min_size=a, max_size=a
    )
    values = rows_of(draw, n, matrix, nulls)
    arr = pa.array(values, pa.list_(pa.list_(pa.int64())))
    flat = per_row(values, "int64", lambda m: [x for row in m for x in row])
    return arr, [("", flat)], {}


@st.composite
def struct_column(draw, n, nulls):
    xs = rows_of(draw, n, ints(INT64_MIN, INT64_MAX), 0.3)
    ys = rows_of(draw, n, st.text(max_size=3), 0.3)
    present = rows_of(draw, n, st.just(True), nulls)
    rows = [
        None if p is None else {"x": x, "y": y} for p, x, y in zip(present, xs, ys, strict=True)
    ]
    arr = pa.array(rows, pa.struct([("x", pa.int64()), ("y", pa.string())]))
    x_exp = [None if r is None or r["x"] is None else ("int64", [r["x"]]) for r in rows]
    y_exp = [None if r is None or r["y"] is None else ("bytes", [r["y"].encode()]) for r in rows]
    return arr, [(".x", x_exp), (".y", y_exp)], {}


@st.composite
def dictionary_column(draw, n, nulls):
    values = rows_of(draw, n, st.sampled_from(["", "red", "green", "blü"]), nulls)
    arr = pa.array(values, pa.string()).dictionary_encode()
    return arr, [("", per_row(values, "bytes", lambda v: [v.encode()]))], {}


GENERATORS = [
    int_column,
    bool_column,
    float_column,
    float64_bytes_column,
    bytes_column,
    temporal_column,
    decimal_column,
    list_column,
    fixed_list_column,
    nested_list_column,
    struct_column,
    dictionary_column,
]


@st.composite
def random_tables(draw):
    n = draw(st.integers(0, 12))
    skip = draw(st.integers(0, 3))  # rows sliced off the front: arrays with an offset
    names = draw(
        st.lists(
            st.text(NAME_ALPHABET, min_size=1, max_size=3), min_size=1, max_size=5, unique=True
        )
    )
    arrays, expected_rows, columns = {}, [{} for _ in range(n)], {}
    for name in names:
        generator = draw(st.sampled_from(GENERATORS))
        nulls = draw(st.sampled_from([0, 0.5]))
        arr, leaves, options = draw(generator(n + skip, nulls))
        if generator is nested_list_column and all(v is None for v in leaves[0][1][skip:]):
            options = {"shape": [1, 1]}  # no value to infer the shape from: the job needs one
        arrays[name] = arr
        if options:
            columns[name] = options
        for suffix, per_row_values in leaves:
            for row, feature in enumerate(per_row_values[skip:]):
                if feature is not None:
                    expected_rows[row][name + suffix] = feature
    table = pa.table(arrays).slice(skip)
    if n > 1 and draw(st.booleans()):  # several chunks per column
        cut = draw(st.integers(1, n - 1))
        table = pa.concat_tables([table.slice(0, cut), table.slice(cut)])
    return table, columns, expected_rows


def comparable(features: dict[str, list[Any] | None]) -> dict[str, list[Any] | None]:
    """NaN != NaN: compare NaNs as a marker."""
    return {
        k: [("nan" if isinstance(x, float) and x != x else x) for x in v]
        for k, v in features.items()
    }


@settings(
    max_examples=50,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(random_tables())
def test_random_tables_encode_like_tensorflow(case):
    table, columns, expected_rows = case
    records = encode_rows(table, columns)
    assert len(records) == table.num_rows == len(expected_rows)
    for record, features in zip(records, expected_rows, strict=True):
        expected = make_example(features)
        parsed = tf.train.Example.FromString(record)
        assert comparable(example_to_dict(parsed)) == comparable(example_to_dict(expected))
        assert record == sorted_serialization(expected)
        if not has_prefix_pair(features):
            assert record == golden(expected)
        assert list(entry_keys(record)) == sorted(features, key=lambda k: k.encode("utf-8"))


_MANY_LISTS = """
import numpy as np, pyarrow as pa
from transforms.encode.records import encode_table
from transforms.encode.schema import plan_features
n = 40000
rng = np.random.default_rng(0)
flat = [list(range(int(k))) for k in rng.integers(0, 4, n)]
deep = [[[list(range(int(z))) for z in rng.integers(0, 3, int(y))]
         for y in rng.integers(0, 3, int(x))] for x in rng.integers(1, 3, n)]
table = pa.table({"a": pa.array(flat, pa.list_(pa.int64())),
                  "r": pa.array(deep, pa.list_(pa.list_(pa.list_(pa.int64()))))})
specs = plan_features(table.schema, {}, {"r": (-1, -1, -1)})
batch, _ = encode_table(table, specs, "t", 0)
import tensorflow as tf  # after the encode: its import changes how malloc maps large blocks
last = tf.train.Example.FromString(batch.buffer[batch.offsets[-2]:batch.offsets[-1]].tobytes())
assert list(last.features.feature["a"].int64_list.value) == flat[-1]
print(len(batch.offsets) - 1)
"""


def test_many_list_features_over_many_rows_encode():
    """Four list features (a list and a list ragged at three levels: values and two row-length
    features) over 40,000 rows, in a fresh process: the kernel's per-row payload table is then
    about a megabyte, which malloc maps on its own and unmaps when it is freed. The kernel read
    it through its address after numba had freed it (a segfault); it now keeps it alive."""
    import subprocess
    import sys
    from pathlib import Path

    repo = Path(__file__).resolve().parent.parent
    done = subprocess.run(
        [sys.executable, "-c", _MANY_LISTS], cwd=repo, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split()[-1] == "40000"
