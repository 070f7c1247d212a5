"""The peer data (TFX's Chicago taxi table) in the two new input layouts: a Hive-partitioned
copy written by pyarrow's dataset writer (by year and payment type, files of one partition with
different row-group layouts) gives the records of the unpartitioned file with the partition
columns added; the CSV written as JSON Lines gives the records of the CSV (byte for byte, as
multisets). Both are also read back
through `load_dataset` and compared with the source values, nulls included."""

from __future__ import annotations

import collections
import gzip
import json

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest
import tensorflow as tf
from conftest import encode_rows, read_manifest, run_cli_captured

from pipeline.reader import load_dataset

ROWS = 10_000


def _convert(source, out, *extra):
    result = run_cli_captured(["convert", "--input", source, "--output", out, *extra])
    assert result.code == 0, result.err
    return out


def _records(output) -> collections.Counter:
    """The output's serialized records as a multiset of bytes (an Example's bytes are its keys
    in order and its values: equal bytes, equal records), read a batch at a time."""
    manifest = read_manifest(output)
    files = [str(output / f) for f in manifest["splits"]["train"]["files"]]
    data = tf.data.TFRecordDataset(files, compression_type=manifest["tf_compression_type"])
    return collections.Counter(r for batch in data.batch(4096) for r in batch.numpy().tolist())


def _python(value, t: pa.DataType):
    """A source value as `load_dataset` restores it (float64 through the float32 feature)."""
    if value is None:
        return None
    if pa.types.is_floating(t):
        return float(np.float32(value))
    if isinstance(value, str):
        return value.encode()
    return value


def _source_rows(table: pa.Table) -> collections.Counter:
    names = sorted(table.column_names)
    columns = {n: table.column(n).to_pylist() for n in names}
    types = {n: table.schema.field(n).type for n in names}
    return collections.Counter(
        tuple(_python(columns[n][i], types[n]) for n in names) for i in range(table.num_rows)
    )


def _loaded_rows(output, names) -> collections.Counter:
    """Every row `load_dataset` gives, a null (its `__present` mask False) as None; a column
    without nulls has no mask."""
    names = sorted(names)
    rows: collections.Counter = collections.Counter()
    for batch in load_dataset(str(output), batch_size=4096):
        values = {n: batch[n].numpy().tolist() for n in names}
        count = len(values[names[0]])
        present = {
            n: batch[f"{n}__present"].numpy().tolist()
            if f"{n}__present" in batch
            else [True] * count
            for n in names
        }
        for i in range(count):
            rows[tuple(values[n][i] if present[n][i] else None for n in names)] += 1
    return rows


# ----------------------------------------------------------------------------- partitions


@pytest.fixture(scope="module")
def taxi(peer_data) -> pa.Table:
    return pq.read_table(peer_data / "data.parquet")


@pytest.fixture(scope="module")
def partitioned(peer_data, taxi, tmp_path_factory):
    """The table with a `year` column, written partitioned by year and payment type (columns
    moved into the paths) in two writes of different row-group sizes, and converted."""
    seconds = taxi.column("trip_start_timestamp").cast(pa.timestamp("s"))
    table = taxi.append_column("year", pc.year(seconds).cast(pa.int64()))
    work = tmp_path_factory.mktemp("hive")
    root = work / "taxi"
    half = ROWS // 2
    for name, part, group in (("a", table.slice(0, half), 300), ("b", table.slice(half), 4096)):
        ds.write_dataset(
            part,
            root,
            format="parquet",
            partitioning=["year", "payment_type"],
            partitioning_flavor="hive",
            basename_template=f"{name}-{{i}}.parquet",
            min_rows_per_group=min(group, 1024),
            max_rows_per_group=group,
            existing_data_behavior="overwrite_or_ignore",
        )
    return table, root, _convert(root, work / "hive-out")


def test_partitioned_copy_gives_the_records_plus_the_partition_columns(partitioned):
    table, root, out = partitioned
    files = sorted(root.rglob("*.parquet"))
    assert any("%20" in str(f) for f in files)  # "Credit Card": a percent-encoded value
    assert all("payment_type" not in pq.read_schema(f).names for f in files)
    layouts = {pq.ParquetFile(f).metadata.num_row_groups for f in files}
    assert len(layouts) > 1  # files with one row group and files with several
    records = _records(out)
    assert sum(records.values()) == ROWS
    # the records of the unpartitioned table with the year column, as the encoder writes them
    # (an Example's bytes do not depend on the order of the table's columns)
    assert records == collections.Counter(encode_rows(table))
    features = {f["name"]: f for f in read_manifest(out)["features"]}
    assert features["year"]["source_type"] == "int64"
    assert features["payment_type"]["source_type"] == "string"


def test_partitioned_copy_through_load_dataset(partitioned):
    table, _, out = partitioned
    assert _loaded_rows(out, table.column_names) == _source_rows(table)


# ----------------------------------------------------------------------------- JSON Lines


@pytest.fixture(scope="module")
def csv_table(peer_data) -> pa.Table:
    # The CSV contract: an unquoted empty cell is a null.
    options = pacsv.ConvertOptions(strings_can_be_null=True, quoted_strings_can_be_null=False)
    return pacsv.read_csv(peer_data / "data.csv", convert_options=options)


@pytest.fixture(scope="module")
def jsonl_and_csv(peer_data, csv_table, tmp_path_factory):
    work = tmp_path_factory.mktemp("jsonl")
    lines = "".join(json.dumps(row) + "\n" for row in csv_table.to_pylist())
    source = work / "data.jsonl.gz"
    source.write_bytes(gzip.compress(lines.encode()))
    jsonl = _convert(source, work / "jsonl-out")
    csv = _convert(peer_data / "data.csv", work / "csv-out")
    return jsonl, csv


def test_jsonl_gives_the_records_of_the_csv(jsonl_and_csv):
    jsonl, csv = jsonl_and_csv
    records = _records(jsonl)
    assert sum(records.values()) == ROWS
    assert records == _records(csv)
    kinds = lambda out: {f["name"]: f["kind"] for f in read_manifest(out)["features"]}  # noqa: E731
    assert kinds(jsonl) == kinds(csv)
    assert read_manifest(jsonl)["source_format"] == "jsonl"


def test_jsonl_through_load_dataset(jsonl_and_csv, csv_table):
    jsonl, _ = jsonl_and_csv
    assert _loaded_rows(jsonl, csv_table.column_names) == _source_rows(csv_table)
