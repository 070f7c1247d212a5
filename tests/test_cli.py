"""`tfrecord-etl convert` end to end on the bundled samples: exit codes, the summary line, the
manifest, shards, sinks, compressions, config vs flags, and `python -m pipeline`."""

from __future__ import annotations

import collections
import gzip
import io
import json
import os
import shutil
import subprocess
import sys
import zlib
from pathlib import Path

import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import pytest
from apache_beam.io.tfrecordio import _TFRecordUtil
from conftest import (
    REPO,
    SAMPLE_CSV,
    SAMPLE_PARQUET,
    canonical,
    read_manifest,
    read_output,
    read_raw_records,
    reference_rows,
    run_cli_captured,
)

ROWS = 2000


@pytest.fixture(scope="module")
def work(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("cli")


def convert(out: Path, *args) -> tuple:
    result = run_cli_captured(["convert", "--output", out, *args])
    assert result.code == 0, result.err
    return result, out


@pytest.fixture(scope="module")
def parquet_out(work):
    return convert(work / "parquet", "--input", SAMPLE_PARQUET)


@pytest.fixture(scope="module")
def csv_out(work):
    return convert(work / "csv", "--input", SAMPLE_CSV)


@pytest.fixture(scope="module")
def three_shards(work):
    return convert(work / "three", "--input", SAMPLE_PARQUET, "--num-shards", "3")[1]


@pytest.fixture(scope="module")
def tfrecordio_out(work):
    return convert(work / "tfrecordio", "--input", SAMPLE_PARQUET, "--sink", "tfrecordio")[1]


@pytest.fixture(scope="module")
def source_rows():
    return reference_rows(pq.read_table(SAMPLE_PARQUET))


def by_trip_id(rows):
    return sorted(rows, key=lambda r: r["trip_id"][0])


# ----------------------------------------------------------------------------- default runs


def test_parquet_converts_with_summary(parquet_out):
    result, out = parquet_out
    assert "rows: 2000" in result.out
    assert "shards: 1" in result.out
    assert "compression: gzip" in result.out
    assert str(out / "manifest.json") in result.out


def test_parquet_manifest(parquet_out):
    _, out = parquet_out
    manifest = read_manifest(out)
    assert manifest["rows"] == ROWS
    assert manifest["splits"]["train"]["rows"] == ROWS
    assert manifest["compression"] == "gzip"
    assert manifest["tf_compression_type"] == "GZIP"
    assert manifest["source_format"] == "parquet"
    assert manifest["sources"] == [str(SAMPLE_PARQUET)]
    files = manifest["splits"]["train"]["files"]
    assert files == ["train-00000-of-00001.tfrecord.gz"]
    on_disk = sorted(p.name for p in out.iterdir() if p.name != "manifest.json")
    assert on_disk == sorted([*files, "schema.pbtxt", "statistics"])
    assert manifest["statistics"] == {"train": "statistics/train/FeatureStats.pb"}
    names = [f["name"] for f in manifest["features"]]
    assert names == sorted(names)
    assert "driver.id" in names and "driver.rating" in names and "driver" not in names
    by_name = {f["name"]: f for f in manifest["features"]}
    source = pq.read_table(SAMPLE_PARQUET)
    assert by_name["company"]["null_count"] == source["company"].null_count
    assert by_name["fare"]["null_count"] == source["fare"].null_count
    assert by_name["trip_id"]["null_count"] == 0
    assert by_name["pickup_grid"]["shape"] == [2, 2]
    assert by_name["tags"]["shape"] is None
    assert by_name["pickup_time"]["unit"] == "us"


def test_parquet_records_equal_source(parquet_out, source_rows):
    _, out = parquet_out
    records = read_output(out)
    assert len(records) == ROWS
    assert by_trip_id(records) == by_trip_id(source_rows)


def test_parquet_spot_values(parquet_out):
    _, out = parquet_out
    records = {r["trip_id"][0]: r for r in read_output(out)}
    table = pq.read_table(SAMPLE_PARQUET)
    row = table.slice(0, 1).to_pylist()[0]
    record = records[row["trip_id"]]
    assert record["toll"] == [format(row["toll"], "f").encode()]
    assert record["pickup_grid"] == [x for inner in row["pickup_grid"] for x in inner]
    assert len(record["pickup_grid"]) == 4
    # nulls are absent features, real zeros are values
    null_company = [r for r in table.to_pylist() if r["company"] is None]
    assert null_company and all("company" not in records[r["trip_id"]] for r in null_company)
    zero_tips = [r for r in table.to_pylist() if r["tips"] == 0.0]
    assert zero_tips and all(records[r["trip_id"]]["tips"] == [0.0] for r in zero_tips)
    empty_company = [r for r in table.to_pylist() if r["company"] == ""]
    assert empty_company and all(records[r["trip_id"]]["company"] == [b""] for r in empty_company)


def test_csv_converts(csv_out):
    result, out = csv_out
    assert "rows: 2000" in result.out
    manifest = read_manifest(out)
    assert manifest["rows"] == ROWS
    assert manifest["source_format"] == "csv"
    records = read_output(out)
    table = pacsv.read_csv(
        SAMPLE_CSV,
        convert_options=pacsv.ConvertOptions(
            strings_can_be_null=True, quoted_strings_can_be_null=False
        ),
    )
    assert by_trip_id(records) == by_trip_id(reference_rows(table))
    # the CSV writes company "" quoted: an empty string, not a null
    assert any(r.get("company") == [b""] for r in records)


# ----------------------------------------------------------------------------- shards, sinks


def test_num_shards_three(three_shards, source_rows):
    manifest = read_manifest(three_shards)
    files = manifest["splits"]["train"]["files"]
    assert files == [f"train-0000{i}-of-00003.tfrecord.gz" for i in range(3)]
    assert sorted(p.name for p in three_shards.glob("train-*")) == files
    records = read_output(three_shards)
    ids = collections.Counter(r["trip_id"][0] for r in records)
    assert ids == collections.Counter(range(1, ROWS + 1))  # no loss, no duplicates
    assert manifest["rows"] == ROWS
    assert collections.Counter(map(canonical, records)) == collections.Counter(
        map(canonical, source_rows)
    )


def test_tfrecordio_sink_writes_the_same_records(tfrecordio_out, parquet_out):
    blocks = collections.Counter(read_raw_records(parquet_out[1]))
    beam_sink = collections.Counter(read_raw_records(tfrecordio_out))
    assert sum(beam_sink.values()) == ROWS
    assert beam_sink == blocks
    assert read_manifest(tfrecordio_out)["rows"] == ROWS


def test_gzip_shard_is_a_plain_gzip_stream_of_tfrecord_frames(parquet_out):
    _, out = parquet_out
    (name,) = read_manifest(out)["splits"]["train"]["files"]
    data = gzip.decompress((out / name).read_bytes())
    handle, count = io.BytesIO(data), 0
    while _TFRecordUtil.read_record(handle) is not None:  # checks both crcs of every frame
        count += 1
    assert count == ROWS


@pytest.mark.parametrize(
    ("compression", "suffix", "tf_type"),
    [("none", ".tfrecord", ""), ("zlib", ".tfrecord.deflate", "ZLIB")],
)
def test_other_compressions_are_readable(work, parquet_out, compression, suffix, tf_type):
    _, out = convert(
        work / f"c-{compression}", "--input", SAMPLE_PARQUET, "--compression", compression
    )
    manifest = read_manifest(out)
    assert manifest["compression"] == compression
    assert manifest["tf_compression_type"] == tf_type
    (name,) = manifest["splits"]["train"]["files"]
    assert name.endswith(suffix)
    raw = (out / name).read_bytes()
    if compression == "zlib":
        raw = zlib.decompress(raw)
    frames = []
    handle = io.BytesIO(raw)
    while (record := _TFRecordUtil.read_record(handle)) is not None:
        frames.append(record)
    assert len(frames) == ROWS
    assert collections.Counter(read_raw_records(out)) == collections.Counter(
        read_raw_records(parquet_out[1])
    )


# ----------------------------------------------------------------------------- config, flags


def test_flag_overrides_config(work):
    config = work / "job.yaml"
    config.write_text(
        f"input: {SAMPLE_PARQUET}\n"
        "compression: none\n"
        "num_shards: 2\n"
        "columns:\n"
        "  fare: {null_policy: default, default: -1.0}\n",
        encoding="utf-8",
    )
    _, out = convert(work / "configured", "--config", config, "--compression", "zlib")
    manifest = read_manifest(out)
    assert manifest["compression"] == "zlib"  # the flag wins
    files = manifest["splits"]["train"]["files"]
    assert len(files) == 2 and all(f.endswith(".tfrecord.deflate") for f in files)  # config
    records = read_output(out)
    assert len(records) == ROWS
    fares = collections.Counter(tuple(r["fare"]) for r in records)
    assert fares[(-1.0,)] == pq.read_table(SAMPLE_PARQUET)["fare"].null_count  # config default
    by_name = {f["name"]: f for f in manifest["features"]}
    assert by_name["fare"]["null_policy"] == "default"


def test_overwrite_replaces_a_complete_output(work, three_shards):
    target = work / "overwrite"
    shutil.copytree(three_shards, target)
    old = set(read_manifest(target)["splits"]["train"]["files"])
    assert len(old) == 3
    result = run_cli_captured(
        ["convert", "--input", SAMPLE_CSV, "--output", target, "--overwrite", "--num-shards", "1"]
    )
    assert result.code == 0, result.err
    manifest = read_manifest(target)
    assert manifest["source_format"] == "csv"
    assert manifest["splits"]["train"]["files"] == ["train-00000-of-00001.tfrecord.gz"]
    assert sorted(p.name for p in target.iterdir()) == [
        "manifest.json",
        "schema.pbtxt",
        "statistics",
        "train-00000-of-00001.tfrecord.gz",
    ]
    assert len(read_output(target)) == ROWS


def test_python_dash_m_pipeline(work):
    out = work / "subprocess"
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pipeline",
            "convert",
            "--input",
            str(SAMPLE_CSV),
            "--output",
            str(out),
            "--compression",
            "none",
        ],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert "rows: 2000" in proc.stdout
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["rows"] == ROWS
    assert len(read_output(out)) == ROWS


def test_python_dash_m_usage_error_exit_code(work):
    proc = subprocess.run(
        [sys.executable, "-m", "pipeline", "convert", "--output", str(work / "nothing")],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 2
    assert "--input is required" in proc.stderr


def test_reference_oracle_is_not_vacuous():
    rows = reference_rows(pa.table({"a": [1, None], "s": [{"x": 1.5}, None]}))
    assert rows == [{"a": [1], "s.x": [1.5]}, {}]
