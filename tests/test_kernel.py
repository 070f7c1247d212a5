"""The encoder kernel on its own: every way it writes a column (header templates for float
columns with a fixed count per row and for int64 scalars, computed headers for the rest),
nulls, the varint sizes at their edges, long keys and entries, both crc paths, and the checks
on its input arrays. Each record is compared with TensorFlow's deterministic serialization."""

from __future__ import annotations

import itertools
import struct
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
import tensorflow as tf
from conftest import encode_rows

from transforms.encode.kernel import example as example_kernel
from transforms.encode.kernel.example import (
    FRAME_OVERHEAD,
    KernelColumn,
    encode_records,
    masked_crc32c,
)
from transforms.encode.kernel.layout import (
    BYTES_LIST,
    BYTES_SCALAR,
    FLOAT_FIXED,
    FLOAT_LIST,
    INT64_LIST,
    INT64_SCALAR,
    plan,
)

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
# Values whose varints take 1, 2, ..., 10 bytes, each at both ends of its size.
VARINT_EDGES = [0, 127, 128, 2**14 - 1, 2**14, 2**21, 2**28, 2**35, 2**42, 2**49, 2**56]
VARINT_EDGES += [2**63 - 1, -1, INT64_MIN, -(2**31)]


def expected_record(row: dict[str, tuple[str, list[Any]]]) -> bytes:
    """Features `name -> (kind, values)` of one record, serialized by TensorFlow."""
    example = tf.train.Example()
    example.features.SetInParent()
    for name, (kind, values) in row.items():
        feature = example.features.feature[name]
        target = {"int64": feature.int64_list, "float": feature.float_list}.get(
            kind, feature.bytes_list
        )
        target.SetInParent()
        target.value.extend(values)
    return example.SerializeToString(deterministic=True)


def records(buffer: np.ndarray, offsets: np.ndarray) -> list[bytes]:
    return [bytes(buffer[a:b]) for a, b in itertools.pairwise(offsets.tolist())]


def offsets_of(lists: list[list[Any] | None]) -> np.ndarray:
    return np.concatenate([[0], np.cumsum([len(v or []) for v in lists])]).astype(np.int64)


def valid_of(lists: list[Any]) -> np.ndarray | None:
    valid = np.array([v is not None for v in lists], dtype=bool)
    return None if valid.all() else valid


def scalar_column(kind: str, key: str, rows: list[Any]) -> KernelColumn:
    """One value per row (None: the row lacks the feature)."""
    valid = valid_of(rows)
    if kind == "bytes":
        values = [b"" if v is None else v for v in rows]
        value_off = offsets_of(values)
        data = np.frombuffer(b"".join(values), np.uint8)
        return KernelColumn(kind, key, valid, None, value_off=value_off, data=data)
    dtype = np.int64 if kind == "int64" else np.float32
    values = np.array([0 if v is None else v for v in rows], dtype=dtype)
    return KernelColumn(kind, key, valid, None, values=values)


def list_column(kind: str, key: str, rows: list[list[Any] | None]) -> KernelColumn:
    """A list per row (None: the row lacks the feature)."""
    valid, row_off = valid_of(rows), offsets_of(rows)
    flat = [v for row in rows for v in (row or [])]
    if kind == "bytes":
        value_off = offsets_of(flat)
        data = np.frombuffer(b"".join(flat), np.uint8)
        return KernelColumn(kind, key, valid, row_off, value_off=value_off, data=data)
    values = np.array(flat, dtype=np.int64 if kind == "int64" else np.float32)
    return KernelColumn(kind, key, valid, row_off, values=values)


def expected_rows(columns: list[tuple[str, str, list[Any]]], scalar: bool) -> list[bytes]:
    n = len(columns[0][2])
    out = []
    for i in range(n):
        row = {}
        for kind, key, rows in columns:
            if rows[i] is not None:
                values = [rows[i]] if scalar else rows[i]
                row[key] = (
                    kind,
                    [float(np.float32(v)) for v in values] if kind == "float" else values,
                )
        out.append(expected_record(row))
    return out


def modes_of(columns: list[KernelColumn], n: int) -> list[int]:
    desc, keys, _keep = example_kernel._describe(columns, n)
    return list(plan(desc, keys, n)[3])


def check(columns: list[KernelColumn], n: int, expected: list[bytes]) -> None:
    """Unframed records equal `expected`; framed ones are TFRecord frames around them."""
    got = records(*encode_records(columns, n))
    assert got == expected
    frames = records(*encode_records(columns, n, framed=True))
    for frame, record in zip(frames, expected, strict=True):
        assert len(frame) == len(record) + FRAME_OVERHEAD
        length, length_crc = struct.unpack("<QI", frame[:12])
        assert (length, length_crc) == (len(record), masked_crc32c(frame[:8]))
        assert frame[12:-4] == record
        assert struct.unpack("<I", frame[-4:])[0] == masked_crc32c(record)


# ----------------------------------------------------------------------------- int64 scalars


def test_int64_scalars_every_varint_size_and_nulls():
    rows = [*VARINT_EDGES, None, 5, None]
    columns = [scalar_column("int64", "i", rows)]
    assert modes_of(columns, len(rows)) == [INT64_SCALAR]
    check(columns, len(rows), expected_rows([("int64", "i", rows)], scalar=True))


def test_int64_scalars_all_null():
    rows = [None, None, None]
    check([scalar_column("int64", "i", rows)], 3, [b"\x0a\x00"] * 3)


# ----------------------------------------------------------------------------- float templates


def test_float_scalars_template_with_nulls_and_edge_values():
    rows = [0.0, -0.0, 1.5, None, float("inf"), -3.4028235e38, 1e-45, None]
    columns = [scalar_column("float", "f", rows)]
    assert modes_of(columns, len(rows)) == [FLOAT_FIXED]
    check(columns, len(rows), expected_rows([("float", "f", rows)], scalar=True))


def test_float_nan_bytes_are_copied_as_they_are():
    nan = np.frombuffer(struct.pack("<I", 0x7FC00001), np.float32)
    col = KernelColumn("float", "f", None, None, values=nan)
    (record,) = records(*encode_records([col], 1))
    assert record.endswith(struct.pack("<I", 0x7FC00001))


@pytest.mark.parametrize("m", [1, 2, 8, 31, 32, 33, 100])
def test_fixed_float_lists_template(m):
    # 4 * m crosses one-byte lengths at m = 32 (payload 128 bytes).
    rng = np.random.default_rng(m)
    rows = [list(rng.normal(size=m).astype(np.float32)) for _ in range(5)]
    rows[2] = None
    columns = [list_column("float", "emb", rows)]
    assert modes_of(columns, 5) == [FLOAT_FIXED]
    check(columns, 5, expected_rows([("float", "emb", rows)], scalar=False))


def test_float_lists_all_empty_use_the_template():
    rows = [[], None, []]
    columns = [list_column("float", "e", rows)]
    assert modes_of(columns, 3) == [FLOAT_FIXED]
    check(columns, 3, expected_rows([("float", "e", rows)], scalar=False))


def test_null_rows_do_not_count_against_a_fixed_length():
    # A null row's own offsets span 1 element here: only rows with the feature decide.
    values = np.array([1.0, 2.0, 9.0, 3.0, 4.0], np.float32)
    row_off = np.array([0, 2, 3, 5], np.int64)
    valid = np.array([True, False, True])
    col = KernelColumn("float", "f", valid, row_off, values=values)
    assert modes_of([col], 3) == [FLOAT_FIXED]
    expected = [
        expected_record({"f": ("float", [1.0, 2.0])}),
        expected_record({}),
        expected_record({"f": ("float", [3.0, 4.0])}),
    ]
    check([col], 3, expected)


def test_variable_float_lists_are_written_row_by_row():
    rows = [[1.0], [], None, [2.0, 3.0, 4.0], [0.5] * 40]
    columns = [list_column("float", "v", rows)]
    assert modes_of(columns, len(rows)) == [FLOAT_LIST]
    check(columns, len(rows), expected_rows([("float", "v", rows)], scalar=False))


# ----------------------------------------------------------------------------- computed headers


def test_bytes_scalars_empty_long_and_null():
    rows = [b"", b"x", None, b"\x00\xff" * 64, b"y" * 127, b"z" * 128, b"w" * 20000]
    columns = [scalar_column("bytes", "s", rows)]
    assert modes_of(columns, len(rows)) == [BYTES_SCALAR]
    check(columns, len(rows), expected_rows([("bytes", "s", rows)], scalar=True))


def test_int64_lists_negative_empty_and_null():
    rows = [[1, -1, INT64_MIN], [], None, VARINT_EDGES, [7] * 200]
    columns = [list_column("int64", "l", rows)]
    assert modes_of(columns, len(rows)) == [INT64_LIST]
    check(columns, len(rows), expected_rows([("int64", "l", rows)], scalar=False))


def test_bytes_lists_empty_values_and_null():
    rows = [[b"a", b"", b"bc"], [], None, [b"q" * 300], [b""] * 3]
    columns = [list_column("bytes", "b", rows)]
    assert modes_of(columns, len(rows)) == [BYTES_LIST]
    check(columns, len(rows), expected_rows([("bytes", "b", rows)], scalar=False))


# ----------------------------------------------------------------------------- all together


def test_every_mode_in_one_record_with_long_keys():
    n = 6
    rng = np.random.default_rng(0)
    key = "k" * 130  # a two-byte key length in every template
    spec = [
        ("bytes", "a_bytes", [b"x" * i if i % 3 else None for i in range(n)], True),
        ("bytes", "b_list", [[b"1", b"22"] if i % 2 else [] for i in range(n)], False),
        ("float", "c_fixed", [list(rng.random(3)) if i != 4 else None for i in range(n)], False),
        ("float", "d_var", [list(rng.random(i)) for i in range(n)], False),
        ("int64", "e_list", [[-i, i, 2**40] if i != 1 else None for i in range(n)], False),
        ("int64", "f_scalar", [VARINT_EDGES[i] if i != 2 else None for i in range(n)], True),
        ("float", key, [float(i) if i % 2 else None for i in range(n)], True),
    ]
    columns, expected = [], [{} for _ in range(n)]
    for kind, name, rows, scalar in spec:
        make = scalar_column if scalar else list_column
        columns.append(make(kind, name, rows))
        for i, v in enumerate(rows):
            if v is not None:
                values = [v] if scalar else v
                if kind == "float":
                    values = [float(np.float32(x)) for x in values]
                expected[i][name] = (kind, values)
    assert modes_of(columns, n) == [
        BYTES_SCALAR,
        BYTES_LIST,
        FLOAT_FIXED,
        FLOAT_LIST,
        INT64_LIST,
        INT64_SCALAR,
        FLOAT_FIXED,
    ]
    check(columns, n, [expected_record(row) for row in expected])


def test_no_rows_and_no_columns():
    assert records(*encode_records([], 3)) == [b"\x0a\x00"] * 3
    buffer, offsets = encode_records([scalar_column("int64", "i", [])], 0, framed=True)
    assert buffer.shape == (0,) and offsets.tolist() == [0]


def test_table_crcs_equal_the_hardware_ones(monkeypatch):
    rows = [[float(i)] * (i % 4) for i in range(300)]
    columns = [list_column("float", "f", rows), scalar_column("int64", "i", list(range(300)))]
    hardware = bytes(encode_records(columns, 300, framed=True)[0])
    monkeypatch.setattr(example_kernel, "_CRC_FN", 0)
    assert bytes(encode_records(columns, 300, framed=True)[0]) == hardware


def test_through_arrow_scalar_and_fixed_list_columns_with_nulls():
    # to_kernel_column hands scalars over without row offsets and fixed-size lists with them.
    table = pa.table(
        {
            "f": pa.array([1.5, None, -2.0], pa.float32()),
            "i": pa.array([None, -5, 2**40], pa.int64()),
            "v": pa.array([[1.0, 2.0], None, [3.0, 4.0]], pa.list_(pa.float32(), 2)),
        }
    )
    expected = [
        expected_record({"f": ("float", [1.5]), "v": ("float", [1.0, 2.0])}),
        expected_record({"i": ("int64", [-5])}),
        expected_record(
            {"f": ("float", [-2.0]), "i": ("int64", [2**40]), "v": ("float", [3.0, 4.0])}
        ),
    ]
    assert encode_rows(table) == expected


# ----------------------------------------------------------------------------- input checks


@pytest.mark.parametrize(
    "column",
    [
        KernelColumn("int64", "i", None, None, values=np.zeros(2, np.int64)),
        KernelColumn("float", "f", np.ones(2, bool), None, values=np.zeros(3, np.float32)),
        KernelColumn("float", "f", None, np.array([0, 1, 2, 4]), values=np.zeros(3, np.float32)),
        KernelColumn("bytes", "b", None, None, value_off=np.array([0, 1, 2, 3])),
        KernelColumn(
            "bytes", "b", None, None, value_off=np.array([0, 1, 2, 9]), data=np.zeros(3, np.uint8)
        ),
    ],
    ids=["values", "valid", "row_off", "no-data", "data"],
)
def test_arrays_shorter_than_their_offsets_are_refused(column):
    with pytest.raises(ValueError, match="needs"):
        encode_records([column], 3)
