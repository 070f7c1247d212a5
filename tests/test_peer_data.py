"""Data written by another project (TFX's Chicago taxi test data): converted with the CLI and
compared value by value with the source, and with the Examples TFX ExampleGen wrote."""

from __future__ import annotations

import collections

import numpy as np
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import pytest
import tensorflow as tf
from conftest import (
    canonical,
    example_to_dict,
    read_manifest,
    read_output,
    reference_rows,
    run_cli_captured,
)

ROWS = 10_000
EMPTY_COLUMN = "pickup_census_tract"  # no value in any row


def convert(peer_data, work, name: str, *extra: str):
    out = work / name.replace(".", "_")
    result = run_cli_captured(["convert", "--input", peer_data / name, "--output", out, *extra])
    assert result.code == 0, result.err
    return out


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    return tmp_path_factory.mktemp("peer-out")


@pytest.fixture(scope="module")
def csv_out(peer_data, work):
    return convert(peer_data, work, "data.csv")


@pytest.fixture(scope="module")
def parquet_out(peer_data, work):
    return convert(peer_data, work, "data.parquet")


@pytest.fixture(scope="module")
def csv_records(csv_out):
    return read_output(csv_out)


@pytest.fixture(scope="module")
def parquet_records(parquet_out):
    return read_output(parquet_out)


@pytest.fixture(scope="module")
def csv_source(peer_data):
    # The CSV contract: an unquoted empty cell is a null, a quoted "" an empty string.
    options = pacsv.ConvertOptions(strings_can_be_null=True, quoted_strings_can_be_null=False)
    return pacsv.read_csv(peer_data / "data.csv", convert_options=options)


@pytest.fixture(scope="module")
def tfx_records(peer_data):
    files = sorted(str(p) for p in peer_data.glob("tfx-examplegen-*.tfrecord.gz"))
    assert len(files) == 2
    dataset = tf.data.TFRecordDataset(files, compression_type="GZIP")
    return [example_to_dict(tf.train.Example.FromString(r)) for r in dataset.as_numpy_iterator()]


def multiset(rows):
    return collections.Counter(map(canonical, rows))


# ----------------------------------------------------------------------------- data.csv


def test_csv_every_value_matches_the_source(csv_records, csv_source):
    assert len(csv_records) == ROWS == csv_source.num_rows
    expected = reference_rows(csv_source)
    assert multiset(csv_records) == multiset(expected)


def test_csv_nulls_absent_values_present(csv_records, csv_source):
    for name in csv_source.column_names:
        column = csv_source[name]
        present = sum(name in r for r in csv_records)
        assert present == ROWS - column.null_count, name
    # spot-check kinds and values of one row by its unique-enough key
    first = csv_source.slice(0, 1).to_pylist()[0]
    matches = [
        r
        for r in csv_records
        if r["trip_start_timestamp"] == [first["trip_start_timestamp"]]
        and r["pickup_community_area"] == [first["pickup_community_area"]]
        and r["fare"] == [float(np.float32(first["fare"]))]
    ]
    assert matches
    row = matches[0]
    assert row["payment_type"] == [first["payment_type"].encode()]
    assert row["trip_miles"] == [0.0]  # a real zero is a value
    assert "dropoff_latitude" not in row and first["dropoff_latitude"] is None
    assert row["pickup_latitude"] == [float(np.float32(first["pickup_latitude"]))]
    assert row["pickup_latitude"] != [first["pickup_latitude"]]  # float32, not float64


def test_csv_empty_column_is_absent_everywhere(csv_records, csv_out):
    assert all(EMPTY_COLUMN not in r for r in csv_records)
    features = {f["name"]: f for f in read_manifest(csv_out)["features"]}
    assert features[EMPTY_COLUMN]["null_count"] == ROWS
    assert features[EMPTY_COLUMN]["kind"] == "bytes"  # no value to infer from: read as text
    assert len(features) == 18


def test_csv_manifest_counts(csv_out, csv_source):
    manifest = read_manifest(csv_out)
    assert manifest["rows"] == ROWS
    counts = {f["name"]: f["null_count"] for f in manifest["features"]}
    assert counts == {name: csv_source[name].null_count for name in csv_source.column_names}
    kinds = {f["name"]: f["kind"] for f in manifest["features"]}
    assert kinds["pickup_community_area"] == "int64"
    assert kinds["fare"] == "float"
    assert kinds["company"] == "bytes"


# ----------------------------------------------------------------------------- data.parquet


def test_parquet_every_value_matches_the_source(parquet_records, peer_data):
    table = pq.read_table(peer_data / "data.parquet")
    assert len(parquet_records) == ROWS == table.num_rows
    assert multiset(parquet_records) == multiset(reference_rows(table))


def test_parquet_empty_column_is_absent_everywhere(parquet_records, parquet_out):
    assert all(EMPTY_COLUMN not in r for r in parquet_records)
    features = {f["name"]: f for f in read_manifest(parquet_out)["features"]}
    assert features[EMPTY_COLUMN]["null_count"] == ROWS
    assert features[EMPTY_COLUMN]["source_type"] == "double"
    assert features[EMPTY_COLUMN]["kind"] == "float"


def test_parquet_and_csv_agree_except_where_the_files_differ(csv_records, parquet_records):
    # pandas wrote the CSV's empty company cells as the text "nan" in the Parquet file: it is
    # a value there, and is written as such; float64 values that differ in the last digit of
    # the two files (41.904712 vs 41.904711999999996) are one float32.
    missing_company = sum("company" not in r for r in csv_records)
    assert missing_company == 3462
    nan_company = sum(r.get("company") == [b"nan"] for r in parquet_records)
    assert nan_company == missing_company
    normalized = [
        {k: v for k, v in r.items() if not (k == "company" and v == [b"nan"])}
        for r in parquet_records
    ]
    assert multiset(normalized) == multiset(csv_records)


# ----------------------------------------------------------------------------- small CSVs


def test_multi_line_string(peer_data, work):
    out = convert(peer_data, work, "multi_line_string.csv")
    raw = (peer_data / "multi_line_string.csv").read_bytes()
    assert b'"""2,\n""3"",\n4\n5"""' in raw  # a quoted field over 4 lines, with "" escapes
    records = read_output(out)
    assert records == [
        {"A": [1], "B": [b"2"], "C": [3], "D": [4]},
        {"A": [1], "B": [b'"2,\n"3",\n4\n5"'], "C": [6], "D": [7]},
        {"A": [1], "B": [b"2"], "C": [3], "D": [4]},
    ]
    features = {f["name"]: f for f in read_manifest(out)["features"]}
    assert features["B"]["kind"] == "bytes"


def test_empty_csv(peer_data, work):
    out = convert(peer_data, work, "empty.csv")
    records = read_output(out)
    assert records == [
        {"A": [1], "C": [b"x"], "D": [float(np.float32(0.1))]},
        {"A": [2], "C": [b"y"], "D": [float(np.float32(0.2))]},
        {"A": [3], "D": [float(np.float32(0.3))]},
    ]
    counts = {f["name"]: f["null_count"] for f in read_manifest(out)["features"]}
    assert counts == {"A": 0, "B": 3, "C": 1, "D": 0}


# ----------------------------------------------------------------------------- TFX ExampleGen


def test_tfx_writes_empty_features_where_we_omit_them(tfx_records, csv_records):
    assert len(tfx_records) == 15_000
    # TFX: every record has all 18 keys; a missing value is an empty Feature {} (None here).
    assert all(len(r) == 18 for r in tfx_records)
    assert all(r[EMPTY_COLUMN] is None for r in tfx_records)
    tfx_missing_company = sum(r["company"] is None for r in tfx_records)
    assert tfx_missing_company > 0
    # Ours: the feature is absent; no record holds an empty Feature.
    assert all(EMPTY_COLUMN not in r for r in csv_records)
    assert all(v is not None for r in csv_records for v in r.values())
    assert sum("company" not in r for r in csv_records) > 0


def test_every_record_we_write_is_a_tfx_record_without_its_empty_features(tfx_records, csv_records):
    # TFX's 15,000 records include the 10,000 rows of data.csv. With TFX's empty features
    # dropped, each of our records equals one of TFX's: same keys, kinds and values.
    tfx = multiset({k: v for k, v in r.items() if v is not None} for r in tfx_records)
    ours = multiset(csv_records)
    assert sum(ours.values()) == ROWS
    assert ours - tfx == collections.Counter()
    assert sum((ours & tfx).values()) == ROWS


def test_kinds_match_tfx(tfx_records, csv_out):
    tfx_kinds = collections.defaultdict(set)
    for record in tfx_records[:2000]:
        for name, values in record.items():
            if values:
                kind = type(values[0]).__name__
                tfx_kinds[name].add({"int": "int64", "float": "float", "bytes": "bytes"}[kind])
    ours = {f["name"]: f["kind"] for f in read_manifest(csv_out)["features"]}
    for name, kinds in tfx_kinds.items():
        assert kinds == {ours[name]}, name


def test_real_zeros_are_values_in_both(tfx_records, csv_records, csv_source):
    zero_tips_source = sum(1 for v in csv_source["tips"].to_pylist() if v == 0.0)
    assert zero_tips_source > 0
    assert sum(r["tips"] == [0.0] for r in csv_records) == zero_tips_source
    # These TFX records keep zeros too (they came through TFX's CSV path).
    assert sum(r["tips"] == [0.0] for r in tfx_records) >= zero_tips_source


def test_floats_are_float32_of_the_source(csv_records, csv_source):
    source = sorted(v for v in csv_source["pickup_longitude"].to_pylist() if v is not None)
    written = sorted(r["pickup_longitude"][0] for r in csv_records)
    assert written == [float(np.float32(v)) for v in source]
    assert written != source  # narrowed: float64 values float32 cannot hold do not survive
