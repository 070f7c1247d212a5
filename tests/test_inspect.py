"""`tfrecord-etl inspect PATH`: manifest summary and first records as JSON, for an output dir, one
of its shards, or a TFRecord file another program wrote (schema inferred from the records)."""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import tensorflow as tf
from conftest import run_cli, run_cli_captured


@pytest.fixture
def output(tmp_path):
    path = tmp_path / "t.parquet"
    pq.write_table(pa.table({"id": range(10), "name": [f"n{i}" for i in range(10)]}), path)
    out = tmp_path / "out"
    assert run_cli(["convert", "--input", path, "--output", out, "--batch-rows", "3"]) == 0
    return out


def inspect(*args) -> dict:
    result = run_cli_captured(["inspect", *args])
    assert result.code == 0, result.err
    return json.loads(result.out)


def test_output_dir(output):
    report = inspect(output, "-n", "4")
    assert report["manifest"]["rows"] == 10
    assert report["manifest"]["features"]["id"]["dtype"] == "int64"
    assert report["records"] == [{"id": [i], "name": [f"n{i}"]} for i in range(4)]


def test_one_shard_of_several_gzip_members(output):
    (shard,) = sorted(output.glob("train-*.tfrecord.gz"))
    report = inspect(shard, "-n", "100")
    assert len(report["records"]) == 10
    assert report["inferred_schema"]["name"] == {"kind": "bytes", "lengths": [1], "in_records": 10}


@pytest.mark.parametrize(
    ("suffix", "compression"), [(".tfrecord.gz", "GZIP"), (".zz", "ZLIB"), (".tfrecord", "")]
)
def test_a_file_another_program_wrote(tmp_path, suffix, compression):
    path = tmp_path / f"foreign{suffix}"
    with tf.io.TFRecordWriter(str(path), options=compression or None) as w:
        for i in range(3):
            feature = {
                "x": tf.train.Feature(float_list=tf.train.FloatList(value=[0.5] * i)),
                "b": tf.train.Feature(bytes_list=tf.train.BytesList(value=[b"\xff"])),
            }
            w.write(
                tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString()
            )
    report = inspect(path)
    assert report["inferred_schema"] == {
        "b": {"kind": "bytes", "lengths": [1], "in_records": 3},
        "x": {"kind": "float", "lengths": [0, 1, 2], "in_records": 3},
    }
    assert report["records"][2] == {"b": [{"base64": "/w=="}], "x": [0.5, 0.5]}


def test_missing_path(tmp_path):
    result = run_cli_captured(["inspect", tmp_path / "nope"])
    assert result.code == 1 and "no such file" in result.err
