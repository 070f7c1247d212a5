"""Every supported Arrow type through plan_features + encode_table, values read back by
TensorFlow: nulls absent, zeros present, the documented Example kind and value per type."""

from __future__ import annotations

import datetime
import decimal
import math
import struct

import numpy as np
import pyarrow as pa
import pytest
import tensorflow as tf
from conftest import decode_rows, encode_rows, plan_specs

from transforms.encode.lists import infer_shape
from transforms.encode.schema import ConversionError, SchemaError

ABSENT = object()  # the row has no such feature
D = decimal.Decimal
F32 = np.float32


def column_values(arr: pa.Array, columns: dict | None = None, name: str = "c") -> list:
    """Per row: the feature's values, or ABSENT."""
    rows = decode_rows(pa.table({name: arr}), {name: columns} if columns else None)
    for row in rows:
        assert set(row) <= {name}
    return [row.get(name, ABSENT) for row in rows]


def feature_kinds(arr: pa.Array, name: str = "c") -> list[str | None]:
    """Per row: which list the Feature holds (int64_list, float_list, bytes_list) or None."""
    out = []
    for record in encode_rows(pa.table({name: arr})):
        features = tf.train.Example.FromString(record).features.feature
        out.append(features[name].WhichOneof("kind") if name in features else None)
    return out


def spec_of(arr: pa.Array, columns: dict | None = None, name: str = "c"):
    (spec,) = plan_specs(pa.table({name: arr}), {name: columns} if columns else None)
    return spec


# ----------------------------------------------------------------------------- integers, bool

INT_CASES = [
    (pa.int8(), -(2**7), 2**7 - 1),
    (pa.int16(), -(2**15), 2**15 - 1),
    (pa.int32(), -(2**31), 2**31 - 1),
    (pa.int64(), -(2**63), 2**63 - 1),
    (pa.uint8(), 0, 2**8 - 1),
    (pa.uint16(), 0, 2**16 - 1),
    (pa.uint32(), 0, 2**32 - 1),
    (pa.uint64(), 0, 2**63 - 1),
]


def test_uint64_past_int64_is_stored_as_its_bits():
    """A uint64 above 2**63 - 1 is a value like any other: the records hold its 64 bits as
    int64 (two's complement), which the readers restore as the same uint64."""
    arr = pa.array([2**64 - 1, 2**63, None, 2**63 - 1], pa.uint64())
    assert column_values(arr) == [[-1], [-(2**63)], ABSENT, [2**63 - 1]]
    assert spec_of(arr).dtype == "uint64"


@pytest.mark.parametrize(
    ("arrow_type", "values", "unit"),
    [
        (pa.time32("s"), [0, 86_399], "s"),
        (pa.time32("ms"), [0, 86_399_999], "ms"),
        (pa.time64("us"), [1, 86_399_999_999], "us"),
        (pa.time64("ns"), [1, 86_399_999_999_999], "ns"),
        (pa.duration("s"), [-(2**63), 2**63 - 1], "s"),
        (pa.duration("ns"), [-1, 0], "ns"),
    ],
    ids=str,
)
def test_times_and_durations_are_counts_of_their_unit(arrow_type, values, unit):
    arr = pa.array([*values, None], arrow_type)
    assert column_values(arr) == [[v] for v in values] + [ABSENT]
    spec = spec_of(arr)
    assert (spec.kind, spec.dtype, spec.unit) == ("int64", "int64", unit)
    listed = pa.array([values, None, []], pa.list_(arrow_type))
    assert column_values(listed) == [values, ABSENT, []]


@pytest.mark.parametrize(("arrow_type", "lo", "hi"), INT_CASES, ids=lambda v: str(v))
def test_integers_are_int64_lists(arrow_type, lo, hi):
    arr = pa.array([lo, 0, None, hi, 1], arrow_type)
    assert column_values(arr) == [[lo], [0], ABSENT, [hi], [1]]
    assert feature_kinds(arr) == ["int64_list", "int64_list", None, "int64_list", "int64_list"]
    spec = spec_of(arr)
    assert (spec.kind, spec.dtype, spec.shape, spec.unit) == ("int64", str(arrow_type), (), None)


def test_bool_is_int64_zero_and_one():
    arr = pa.array([True, False, None, False])
    assert column_values(arr) == [[1], [0], ABSENT, [0]]
    assert feature_kinds(arr) == ["int64_list", "int64_list", None, "int64_list"]
    assert (spec_of(arr).kind, spec_of(arr).dtype) == ("int64", "bool")


def test_zero_empty_and_false_are_written_not_dropped():
    table = pa.table(
        {
            "i": pa.array([0], pa.int64()),
            "f": pa.array([0.0], pa.float64()),
            "s": pa.array([""], pa.string()),
            "b": pa.array([False]),
            "l": pa.array([[]], pa.list_(pa.int64())),
        }
    )
    assert decode_rows(table) == [{"i": [0], "f": [0.0], "s": [b""], "b": [0], "l": []}]


# ----------------------------------------------------------------------------- floats


def test_float16_is_float_list():
    arr = pa.array(np.array([1.5, 0.0, -2.0, 65504.0], np.float16))
    arr = pa.concat_arrays([arr, pa.array([None], pa.float16())])
    assert column_values(arr) == [[1.5], [0.0], [-2.0], [65504.0], ABSENT]
    assert feature_kinds(arr)[0] == "float_list"
    assert (spec_of(arr).kind, spec_of(arr).dtype) == ("float", "float16")


def test_float32_values_exact():
    values = [0.1, -0.0, 3.4028235e38, 1e-45, None]
    got = column_values(pa.array(values, pa.float32()))
    assert got[:4] == [[F32(v)] for v in values[:4]]
    assert math.copysign(1.0, got[1][0]) == -1.0
    assert got[4] is ABSENT


def test_float64_narrowed_to_float32():
    values = [0.1, 1e300, -1e300, 1e-300, 2.5, 0.0, None, math.inf, math.nan]
    got = column_values(pa.array(values, pa.float64()))
    assert got[0] == [F32(0.1)] and got[0] != [0.1]
    assert got[1:6] == [[math.inf], [-math.inf], [0.0], [2.5], [0.0]]
    assert got[6] is ABSENT
    assert got[7] == [math.inf]
    assert math.isnan(got[8][0])
    spec = spec_of(pa.array(values, pa.float64()))
    assert (spec.kind, spec.dtype, spec.encoding) == ("float", "float64", "values")


def test_keep_float64_writes_exact_little_endian_bytes():
    values = [0.1, 1e300, -0.0, 5e-324, 1 / 3, None, 0.0]
    got = column_values(pa.array(values, pa.float64()), {"keep_float64": True})
    assert got[5] is ABSENT
    for value, feature in zip(values, got, strict=True):
        if value is None:
            continue
        assert feature == [struct.pack("<d", value)]
        (back,) = struct.unpack("<d", feature[0])
        assert back == value and math.copysign(1.0, back) == math.copysign(1.0, value)
    spec = spec_of(pa.array(values, pa.float64()), {"keep_float64": True})
    assert (spec.kind, spec.dtype, spec.encoding) == ("bytes", "float64", "float64_bytes")


def test_keep_float64_list_is_one_bytes_value_per_row():
    rows = [[0.1, 1e300, -2.0], [], None, [1e-300]]
    got = column_values(pa.array(rows, pa.list_(pa.float64())), {"keep_float64": True})
    assert got == [
        [struct.pack("<3d", 0.1, 1e300, -2.0)],
        [b""],
        ABSENT,
        [struct.pack("<d", 1e-300)],
    ]
    assert np.frombuffer(got[0][0], "<f8").tolist() == [0.1, 1e300, -2.0]


def test_keep_float64_on_a_float32_column_is_a_schema_error():
    with pytest.raises(SchemaError, match=r"'c'.*keep_float64.*float"):
        spec_of(pa.array([1.0], pa.float32()), {"keep_float64": True})


# ----------------------------------------------------------------------------- bytes


@pytest.mark.parametrize(
    "arrow_type",
    [pa.string(), pa.large_string(), pa.string_view()],
    ids=str,
)
def test_strings_are_utf8_bytes(arrow_type):
    arr = pa.array(["abc", "", None, "日本 ü", 'a\nb"c'], arrow_type)
    got = column_values(arr)
    assert got == [[b"abc"], [b""], ABSENT, ["日本 ü".encode()], [b'a\nb"c']]
    assert feature_kinds(arr)[:2] == ["bytes_list", "bytes_list"]
    assert (spec_of(arr).kind, spec_of(arr).dtype) == ("bytes", "string")


@pytest.mark.parametrize("arrow_type", [pa.binary(), pa.large_binary(), pa.binary_view()], ids=str)
def test_binary_is_bytes(arrow_type):
    arr = pa.array([b"\x00\xff", b"", None, bytes(range(256))], arrow_type)
    assert column_values(arr) == [[b"\x00\xff"], [b""], ABSENT, [bytes(range(256))]]


def test_fixed_size_binary_is_bytes():
    arr = pa.array([b"ab\x00", None, b"\x00\x00\x00"], pa.binary(3))
    assert column_values(arr) == [[b"ab\x00"], ABSENT, [b"\x00\x00\x00"]]
    assert (spec_of(arr).kind, spec_of(arr).dtype) == ("bytes", "string")


# ----------------------------------------------------------------------------- time, decimal


@pytest.mark.parametrize(
    ("unit", "tz"), [("s", None), ("ms", None), ("us", None), ("ns", None), ("us", "UTC")]
)
def test_timestamp_is_int64_in_its_unit(unit, tz):
    arrow_type = pa.timestamp(unit, tz)
    raw = [0, -1, 1_700_000_000, None, 2**62]
    arr = pa.array(raw, pa.int64()).cast(arrow_type)
    assert column_values(arr) == [[0], [-1], [1_700_000_000], ABSENT, [2**62]]
    spec = spec_of(arr)
    assert (spec.kind, spec.dtype) == ("int64", "int64")
    assert spec.unit == (unit if tz is None else f"{unit} {tz}")


def test_timestamp_from_datetimes():
    when = datetime.datetime(2026, 11, 1, 12, 30, 15, 250000)
    arr = pa.array([when, None], pa.timestamp("ms"))
    seconds = int((when - datetime.datetime(1970, 1, 1)).total_seconds())
    assert column_values(arr) == [[seconds * 1000 + 250], ABSENT]


def test_date32_is_days():
    dates = [datetime.date(1970, 1, 1), datetime.date(2026, 11, 2), datetime.date(1969, 12, 31)]
    arr = pa.array([*dates, None], pa.date32())
    assert column_values(arr) == [[0], [20759], [-1], ABSENT]
    assert spec_of(arr).unit == "days"


def test_date64_is_days_too():
    dates = [datetime.date(1970, 1, 1), datetime.date(2026, 11, 2), datetime.date(1969, 12, 31)]
    arr = pa.array([*dates, None], pa.date64())
    assert column_values(arr) == [[0], [20759], [-1], ABSENT]
    assert (spec_of(arr).kind, spec_of(arr).unit) == ("int64", "days")


@pytest.mark.parametrize(
    ("arrow_type", "values", "expected"),
    [
        (
            pa.decimal128(8, 2),
            [D("1.50"), D("0.00"), D("-0.05"), D("123456.78")],
            ["1.50", "0.00", "-0.05", "123456.78"],
        ),
        (pa.decimal128(5, 0), [D("12345"), D("0"), D("-7")], ["12345", "0", "-7"]),
        (
            pa.decimal256(40, 10),
            [D("123456789012345678901234567890.0123456789"), D("1.5")],
            ["123456789012345678901234567890.0123456789", "1.5000000000"],
        ),
        # small values with a scale above 6: plain digits, not "1E-7"
        (
            pa.decimal128(9, 7),
            [D("0.0000001"), D("0"), D("-0.0000012"), D("0.1")],
            ["0.0000001", "0.0000000", "-0.0000012", "0.1000000"],
        ),
        (pa.decimal128(12, 10), [D("1E-10"), D("1E-9")], ["0.0000000001", "0.0000000010"]),
    ],
    ids=["dec128-8-2", "dec128-5-0", "dec256-40-10", "dec128-scale7", "dec128-scale10"],
)
def test_decimal_is_its_exact_string(arrow_type, values, expected):
    arr = pa.array([*values, None], arrow_type)
    got = column_values(arr)
    assert got == [[e.encode()] for e in expected] + [ABSENT]
    for value, text in zip(values, expected, strict=True):
        assert D(text) == value  # exact: parses back to the same number
    assert (spec_of(arr).kind, spec_of(arr).dtype) == ("bytes", "string")


# ----------------------------------------------------------------------------- lists


@pytest.mark.parametrize("list_type", [pa.list_, pa.large_list], ids=["list", "large_list"])
def test_variable_length_lists(list_type):
    ints = pa.array([[1, 2, 3], [], None, [0], [-(2**63)]], list_type(pa.int64()))
    assert column_values(ints) == [[1, 2, 3], [], ABSENT, [0], [-(2**63)]]
    assert feature_kinds(ints) == ["int64_list", "int64_list", None, "int64_list", "int64_list"]
    assert spec_of(ints).shape is None

    strings = pa.array([["a", ""], [], None, ["é"]], list_type(pa.string()))
    assert column_values(strings) == [[b"a", b""], [], ABSENT, ["é".encode()]]
    assert feature_kinds(strings)[1] == "bytes_list"

    floats = pa.array([[0.5, 0.1], [], None], list_type(pa.float32()))
    assert column_values(floats) == [[0.5, F32(0.1)], [], ABSENT]
    assert feature_kinds(floats)[1] == "float_list"

    bools = pa.array([[True, False], None, []], list_type(pa.bool_()))
    assert column_values(bools) == [[1, 0], ABSENT, []]


def test_list_of_timestamps_and_decimals():
    ts = pa.array([[0, 5], None, []], pa.list_(pa.int64())).cast(pa.list_(pa.timestamp("s")))
    assert column_values(ts) == [[0, 5], ABSENT, []]
    dec = pa.array([[D("1.50"), D("0.00")], None], pa.list_(pa.decimal128(6, 2)))
    assert column_values(dec) == [[b"1.50", b"0.00"], ABSENT]


def test_fixed_size_list_has_shape():
    arr = pa.array([[1, 2, 3], [0, 0, 0], None], pa.list_(pa.int32(), 3))
    assert column_values(arr) == [[1, 2, 3], [0, 0, 0], ABSENT]
    assert spec_of(arr).shape == (3,)


def test_nested_lists_with_equal_inner_lengths_are_flattened_row_major():
    rows = [[[1, 2, 3], [4, 5, 6]], None, [[0, 0, 0], [7, 8, 9]]]
    arr = pa.array(rows, pa.list_(pa.list_(pa.int64())))
    assert column_values(arr) == [[1, 2, 3, 4, 5, 6], ABSENT, [0, 0, 0, 7, 8, 9]]
    assert spec_of(arr).shape == (2, 3)


def test_nested_fixed_size_lists_and_mixed_nesting():
    fixed = pa.array([[[1.5, 2.5], [3.5, 4.5]], None], pa.list_(pa.list_(pa.float32(), 2), 2))
    assert column_values(fixed) == [[1.5, 2.5, 3.5, 4.5], ABSENT]
    assert spec_of(fixed).shape == (2, 2)

    mixed = pa.array([[[1, 2]], [[3, 4]]], pa.list_(pa.list_(pa.int64(), 2)))
    assert column_values(mixed) == [[1, 2], [3, 4]]
    assert spec_of(mixed).shape == (1, 2)

    deep = pa.array([[[["a"], ["b"]]], [[["c"], ["d"]]]], pa.list_(pa.list_(pa.list_(pa.string()))))
    assert column_values(deep) == [[b"a", b"b"], [b"c", b"d"]]
    assert spec_of(deep).shape == (1, 2, 1)


def test_nested_list_with_configured_variable_outer_dim():
    arr = pa.array([[[1, 2]], [[3, 4], [5, 6]], []], pa.list_(pa.list_(pa.int64())))
    got = column_values(arr, {"shape": [-1, 2]})
    assert got == [[1, 2], [3, 4, 5, 6], []]
    assert spec_of(arr, {"shape": [-1, 2]}).shape == (-1, 2)


def test_a_nested_lists_shape_is_inferred_from_the_whole_batch():
    """Each level's length where every list of that level in the batch has it, else -1; a
    first value that is empty no longer hides the inner dims."""
    arr = pa.array([[], [[1, 2]]], pa.list_(pa.list_(pa.int64())))
    assert spec_of(arr).shape == (-1, 2)
    assert column_values(arr) == [[], [1, 2]]
    ragged = pa.array([[[1, 2]], None, [[3], [4, 5, 6]]], pa.list_(pa.list_(pa.int64())))
    assert spec_of(ragged).shape == (-1, -1)
    assert infer_shape(pa.array([[[]], [[]]], pa.list_(pa.list_(pa.int64())))) == (1, -1)
    assert infer_shape(pa.array([[], []], pa.list_(pa.list_(pa.int64())))) == (-1, -1)
    assert infer_shape(pa.array([None], pa.list_(pa.list_(pa.int64())))) is None
    fixed = pa.array([[[1, 2]], [[3, 4], [5, 6]]], pa.list_(pa.list_(pa.int64(), 2)))
    assert infer_shape(fixed) == (-1, 2)


def test_list_with_null_element_writes_zero_and_its_position():
    arr = pa.array([[1], [2, None, None], [None, 3.5]], pa.list_(pa.float32()))
    rows = decode_rows(pa.table({"c": arr}))
    assert [row["c"] for row in rows] == [[1.0], [2.0, 0.0, 0.0], [0.0, 3.5]]
    assert [row.get("c__nulls_1", ABSENT) for row in rows] == [ABSENT, [1, 2], [0]]


# ----------------------------------------------------------------------------- struct, dict


def test_struct_leaves_are_parent_dot_child():
    struct_type = pa.struct(
        [("id", pa.int64()), ("name", pa.string()), ("loc", pa.struct([("lat", pa.float64())]))]
    )
    rows = [
        {"id": 1, "name": "a", "loc": {"lat": 41.5}},
        None,
        {"id": 0, "name": None, "loc": None},
        {"id": None, "name": "", "loc": {"lat": 0.0}},
    ]
    table = pa.table({"driver": pa.array(rows, struct_type), "z": pa.array([1, 2, 3, 4])})
    assert [s.name for s in plan_specs(table)] == [
        "driver.id",
        "driver.loc.lat",
        "driver.name",
        "z",
    ]
    assert [s.path for s in plan_specs(table)][1] == ("driver", "loc", "lat")
    assert decode_rows(table) == [
        {"driver.id": [1], "driver.name": [b"a"], "driver.loc.lat": [41.5], "z": [1]},
        {"z": [2]},
        {"driver.id": [0], "z": [3]},
        {"driver.name": [b""], "driver.loc.lat": [0.0], "z": [4]},
    ]


def test_struct_with_list_leaf():
    struct_type = pa.struct([("tags", pa.list_(pa.string()))])
    arr = pa.array([{"tags": ["x", "y"]}, {"tags": []}, None, {"tags": None}], struct_type)
    rows = decode_rows(pa.table({"s": arr}))
    assert rows == [{"s.tags": [b"x", b"y"]}, {"s.tags": []}, {}, {}]


def test_dictionary_columns_are_decoded():
    strings = pa.array(["red", None, "green", "red", ""]).dictionary_encode()
    assert column_values(strings) == [[b"red"], ABSENT, [b"green"], [b"red"], [b""]]
    assert spec_of(strings).dtype == "string"
    ints = pa.array([5, 7, None, 5], pa.int16()).dictionary_encode()
    assert column_values(ints) == [[5], [7], ABSENT, [5]]
    assert spec_of(ints).dtype == "int16"
    in_list = pa.array([["a"], None, ["b", "a"]], pa.list_(pa.dictionary(pa.int8(), pa.string())))
    assert column_values(in_list) == [[b"a"], ABSENT, [b"b", b"a"]]


def test_all_null_column_is_always_absent():
    assert column_values(pa.array([None, None], pa.null())) == [ABSENT, ABSENT]
    assert column_values(pa.array([None, None], pa.float64())) == [ABSENT, ABSENT]


def test_feature_keys_sorted_and_sliced_batches():
    table = pa.table({"b": [1, 2, 3], "a": ["x", "y", "z"], "B": [0.5, 1.5, 2.5]})
    assert [s.name for s in plan_specs(table)] == ["B", "a", "b"]
    part = table.slice(1, 2)
    assert decode_rows(part) == [
        {"B": [1.5], "a": [b"y"], "b": [2]},
        {"B": [2.5], "a": [b"z"], "b": [3]},
    ]


# ----------------------------------------------------------------------------- null policies


def test_null_policy_default_writes_the_default():
    arr = pa.array([1, None, 0, None], pa.int64())
    got = column_values(arr, {"null_policy": "default", "default": 7})
    assert got == [[1], [7], [0], [7]]


@pytest.mark.parametrize(
    ("arr", "default", "expected"),
    [
        (pa.array(["a", None]), "n/a", [[b"a"], [b"n/a"]]),
        (pa.array([1.5, None]), 0, [[1.5], [0.0]]),
        (pa.array([True, None]), False, [[1], [0]]),
        (pa.array([[1], None], pa.list_(pa.int64())), [7, 8], [[1], [7, 8]]),
        (pa.array([D("1.50"), None], pa.decimal128(6, 2)), "0.25", [[b"1.50"], [b"0.25"]]),
        (pa.array(["x", None]).dictionary_encode(), "z", [[b"x"], [b"z"]]),
        (pa.array([1, None], pa.timestamp("s")), 0, [[1], [0]]),
    ],
    ids=["string", "float", "bool", "list", "decimal", "dictionary", "timestamp"],
)
def test_null_policy_default_other_types(arr, default, expected):
    assert column_values(arr, {"null_policy": "default", "default": default}) == expected


@pytest.mark.parametrize(
    ("arr", "default"),
    [
        (pa.array([1, None], pa.int64()), "seven"),
        (pa.array([1, None], pa.int64()), 1.5),
        (pa.array([1, None], pa.uint8()), 300),
        (pa.array([1.0, None]), "x"),
    ],
    ids=["str-for-int", "fraction-for-int", "out-of-range", "str-for-float"],
)
def test_null_policy_default_of_the_wrong_type_is_a_schema_error(arr, default):
    with pytest.raises(SchemaError, match=r"column 'c': default .* type"):
        spec_of(arr, {"null_policy": "default", "default": default})


def test_null_policy_default_needs_a_default():
    with pytest.raises(SchemaError, match=r"'c'.*needs a 'default'"):
        spec_of(pa.array([1]), {"null_policy": "default"})


def test_null_policy_fail_names_row_and_column():
    table = pa.table({"c": pa.array([1, 2, None, 4], pa.int64())})
    specs = plan_specs(table, {"c": {"null_policy": "fail"}})
    from transforms.encode.records import encode_table

    with pytest.raises(ConversionError) as err:
        encode_table(table, specs, "trips.parquet", first_row=100)
    message = str(err.value)
    assert "trips.parquet" in message and "row 102" in message and "'c'" in message
    assert "null" in message


def test_null_policy_fail_without_nulls_writes_all_rows():
    assert column_values(pa.array([0, 1]), {"null_policy": "fail"}) == [[0], [1]]


def test_null_counts_are_reported():
    from transforms.encode.records import encode_table

    table = pa.table({"a": [1, None, None], "b": ["x", None, "z"]})
    _, stats = encode_table(table, plan_specs(table), "t.parquet", 0)
    assert stats.rows == 3
    assert stats.nulls == {"a": 2, "b": 1}


def test_unknown_null_policy_is_a_schema_error():
    with pytest.raises(SchemaError, match="null_policy"):
        spec_of(pa.array([1]), {"null_policy": "sometimes"})


# ----------------------------------------------------------------------------- unsupported


@pytest.mark.parametrize(
    "arr",
    [
        pa.UnionArray.from_sparse(
            pa.array([0], pa.int8()), [pa.array([1]), pa.array(["a"])], ["i", "s"]
        ),
        pa.UnionArray.from_dense(
            pa.array([0], pa.int8()), pa.array([0], pa.int32()), [pa.array([1]), pa.array(["a"])]
        ),
        pa.array([pa.MonthDayNano([1, 2, 3])], pa.month_day_nano_interval()),
    ],
    ids=["sparse-union", "dense-union", "interval"],
)
def test_unsupported_types_are_schema_errors_naming_column_and_type(arr):
    with pytest.raises(SchemaError) as err:
        spec_of(arr, name="odd_col")
    assert "'odd_col'" in str(err.value)
    assert str(arr.type) in str(err.value)


def test_unsupported_struct_leaf_is_named_by_its_path():
    arr = pa.array(
        [{"ok": 1, "kv": [("k", pa.MonthDayNano([1, 2, 3]))]}],
        pa.struct([("ok", pa.int64()), ("kv", pa.map_(pa.string(), pa.month_day_nano_interval()))]),
    )
    with pytest.raises(SchemaError, match=r"'trip\.kv\.value'.*month_day_nano_interval"):
        spec_of(arr, name="trip")
