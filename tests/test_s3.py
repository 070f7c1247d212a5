"""The job end to end on S3: s3:// inputs and outputs through Beam's own S3 filesystem
(apache_beam.io.aws.s3filesystem, boto3), against moto's S3 server on 127.0.0.1
(tests/s3_emulator.py).

Covered: Parquet and CSV in, records out on s3:// equal to a local run's (as multisets of bytes);
the endpoint given as Beam's `--s3_endpoint_url` instead of boto3's environment; bad rows in
`_errors/` on s3://; `--overwrite`; a run killed with SIGKILL mid-write, then a re-run into the
same output (no temp or orphan object left, the records of a clean run); `verify --source`,
`inspect`, `plan` and the numpy reader on the s3:// output; two runs at once (one wins, its
output verifies); a lease nothing here can prove dead; the lease's conditional writes
(`If-None-Match: *`, `If-Match: <ETag>`). Records are read back through Beam's filesystem:
TensorFlow 2.21 has no s3:// filesystem of its own (docs/object-stores.md).
"""

from __future__ import annotations

import collections
import json
import os
import subprocess
import sys

import numpy as np
import object_store
import pytest
import tensorflow as tf
from conftest import REPO, SAMPLE_CSV, SAMPLE_PARQUET, run_cli_captured
from object_store import (
    BAD_CSV,
    BUCKET,
    convert,
    listed,
    local_run,
    manifest_of,
    objects,
    records,
)
from s3_emulator import S3Emulator

from pipeline.reader.arrays import Ragged, iter_batches
from pipeline.reader.index import RecordIndex


@pytest.fixture(scope="module")
def s3():
    """The emulator with one bucket; this process's environment set to use it."""
    with S3Emulator((BUCKET,)) as emulator, emulator.environ():
        yield emulator


def upload(local, name: str) -> str:
    return object_store.upload(local, f"s3://{BUCKET}/{name}")


@pytest.fixture(scope="module")
def sample_out(s3, splits) -> str:
    """The sample Parquet, uploaded, converted into s3://bucket/sample with two splits."""
    output = f"s3://{BUCKET}/sample"
    convert("--input", upload(SAMPLE_PARQUET, "in/sample.parquet"), "--output", output, *splits)
    assert list(manifest_of(output)["splits"]) == ["train", "eval"]
    return output


def test_parquet_on_s3_equals_a_local_run(s3, sample_out, local_sample):
    expected = records(local_sample)
    assert records(sample_out) == expected and sum(expected.values()) == 2000
    assert objects(s3, sample_out) == listed(sample_out)  # no temp object, no lease
    assert manifest_of(sample_out)["splits"] == manifest_of(local_sample)["splits"]
    assert manifest_of(sample_out)["sources"] == [f"s3://{BUCKET}/in/sample.parquet"]


def test_csv_on_s3_equals_a_local_run(s3, tmp_path, splits):
    """Run as a separate process that has no AWS_ENDPOINT_URL: the endpoint comes from Beam's
    --s3_endpoint_url, which the launcher's own calls (planning, lease, clearing) use too."""
    output = f"s3://{BUCKET}/csv"
    source = upload(SAMPLE_CSV, "in/sample.csv")
    env = {k: v for k, v in s3.environment().items() if k != "AWS_ENDPOINT_URL"}
    flags = ["--input", source, "--output", output, *splits, f"--s3_endpoint_url={s3.url}"]
    done = subprocess.run(
        [sys.executable, "-m", "pipeline", "convert", *flags],
        cwd=REPO,
        env={
            **{k: v for k, v in os.environ.items() if k != "AWS_ENDPOINT_URL"},
            "TF_CPP_MIN_LOG_LEVEL": "2",
            "PYTHONPATH": str(REPO),
            **env,
        },
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    local = local_run(tmp_path, SAMPLE_CSV, *splits)
    expected = records(local)
    assert records(output) == expected and sum(expected.values()) == 2000
    assert objects(s3, output) == listed(output)
    assert manifest_of(output)["splits"] == manifest_of(local)["splits"]


def test_bad_rows_land_in_errors_on_s3(s3, tmp_path):
    local_csv = tmp_path / "bad.csv"
    local_csv.write_text(BAD_CSV, encoding="utf-8")
    output = f"s3://{BUCKET}/bad"
    source = upload(local_csv, "in/bad.csv")
    convert("--input", source, "--output", output, "--max-bad-rows", "5")
    manifest = manifest_of(output)
    assert manifest["rows"] == 3 and manifest["bad_rows"]["count"] == 2
    errors = sorted(name for name in objects(s3, output) if name.startswith("_errors/"))
    assert errors == ["_errors/errors-00000-of-00001.jsonl"]
    assert manifest["bad_rows"]["files"] == [f"{output}/{errors[0]}"]
    rows = [json.loads(line) for line in s3.read(BUCKET, f"bad/{errors[0]}").splitlines()]
    reason = "2 fields where the header has 3"
    assert sorted(rows, key=lambda r: r["row"]) == [
        {"source": source, "row": row, "column": None, "stage": "read", "reason": reason,
         "values": {"text": text}}
        for row, text in [(1, "2,7.5"), (3, "4,2.5")]
    ]  # fmt: skip
    assert objects(s3, output) == listed(output)
    examples = [tf.train.Example.FromString(r) for r in records(output)]
    assert sorted(e.features.feature["id"].int64_list.value[0] for e in examples) == [1, 3, 5]


def test_overwrite_on_s3(s3, sample_out, local_sample, splits):
    source = f"s3://{BUCKET}/in/sample.parquet"
    output = f"s3://{BUCKET}/overwrite"
    convert("--input", source, "--output", output, "--num-shards", "3")
    refused = run_cli_captured(["convert", "--input", source, "--output", output])
    assert refused.code == 2 and "pass --overwrite" in refused.err
    args = ["--num-shards", "2", "--overwrite", *splits]
    convert("--input", source, "--output", output, *args)
    assert objects(s3, output) == listed(output)  # the 3 shards of the first run are gone
    assert manifest_of(output)["splits"]["train"]["files"] == [
        "train-00000-of-00002.tfrecord.gz",
        "train-00001-of-00002.tfrecord.gz",
    ]
    assert records(output) == records(local_sample)


def test_verify_and_inspect_on_s3(s3, sample_out):
    output = sample_out
    verify = run_cli_captured(["verify", output, "--source", "--json"])
    assert verify.code == 0, verify.err
    report = json.loads(verify.out.strip().splitlines()[-1])
    assert report["status"] == "passed"
    assert sum(report["records_read"].values()) == 2000
    inspect = run_cli_captured(["inspect", output, "-n", "3"])
    assert inspect.code == 0, inspect.err
    shown = json.loads(inspect.out)
    assert shown["manifest"]["rows"] == 2000 and len(shown["records"]) == 3


def rows_of(output: str, split: str) -> collections.Counter:
    """Every row iter_batches gives for a split, as a multiset of the rows' values (repr)."""
    rows: collections.Counter = collections.Counter()
    for batch in iter_batches(output, split=split, batch_size=300):
        columns = {k: v.rows() if isinstance(v, Ragged) else list(v) for k, v in batch.items()}
        for i in range(len(next(iter(columns.values())))):
            rows[repr([(k, np.asarray(columns[k][i]).tolist()) for k in sorted(columns)])] += 1
    return rows


def test_numpy_reader_and_index_on_s3(s3, local_sample, splits):
    """The TensorFlow-free reader reads an output on s3:// (through the same filesystem layer as
    the job) as it reads the local run; --index writes each shard's index there, and a record
    read by number is the record at that place in the sequential read."""
    output = f"s3://{BUCKET}/indexed"
    source = upload(SAMPLE_PARQUET, "in/indexed.parquet")
    convert("--input", source, "--output", output, "--index", *splits)
    read = {split: rows_of(output, split) for split in ("train", "eval")}
    assert read == {split: rows_of(local_sample, split) for split in read}
    assert sum(sum(rows.values()) for rows in read.values()) == 2000
    manifest = manifest_of(output)
    indexes = [s["index"] for s in manifest["splits"]["train"]["shards"]]
    assert len(indexes) == len(manifest["splits"]["train"]["files"])
    assert set(indexes) <= objects(s3, output)
    records_index = RecordIndex(output, split="train")
    sequential = next(iter_batches(output, batch_size=len(records_index)))
    picks = [0, 1, len(records_index) // 2, len(records_index) - 1]
    got = records_index.batch(np.asarray(picks))
    for key, column in sequential.items():
        want = column.rows() if isinstance(column, Ragged) else list(column)
        have = got[key].rows() if isinstance(got[key], Ragged) else list(got[key])
        for j, i in enumerate(picks):
            assert np.asarray(have[j]).tolist() == np.asarray(want[i]).tolist(), (key, i)


# ----------------------------------------------------------------------------- runs as processes


def test_killed_run_then_rerun_on_s3(s3, tmp_path):
    output = f"s3://{BUCKET}/killed"
    object_store.check_killed_run_then_rerun(s3, output, upload, tmp_path)


def test_two_runs_at_once_on_s3(s3, tmp_path):
    object_store.check_two_runs_at_once(s3, f"s3://{BUCKET}/race", upload, tmp_path)


def test_a_lease_from_another_host_refuses_a_run_on_s3(s3):
    output = f"s3://{BUCKET}/foreign"
    object_store.check_a_lease_from_another_host_refuses_a_run(s3, output)


def test_lease_calls_on_s3(s3):
    object_store.check_lease_calls(s3, f"s3://{BUCKET}/lease-calls")


def test_the_emulator_honours_the_conditional_writes(s3):
    """The S3 rule the lease relies on, as moto answers it: a PutObject with If-None-Match: *
    is refused (412) while the key exists, a DeleteObject with an If-Match ETag that is not the
    object's is refused (412), and with the object's ETag it deletes."""
    from botocore.exceptions import ClientError

    client, key = s3.client(), "rule/object"
    client.put_object(Bucket=BUCKET, Key=key, Body=b"first", IfNoneMatch="*")
    with pytest.raises(ClientError) as refused:
        client.put_object(Bucket=BUCKET, Key=key, Body=b"second", IfNoneMatch="*")
    assert refused.value.response["ResponseMetadata"]["HTTPStatusCode"] == 412
    assert s3.read(BUCKET, key) == b"first"
    old = client.head_object(Bucket=BUCKET, Key=key)["ETag"]
    client.put_object(Bucket=BUCKET, Key=key, Body=b"replaced")
    with pytest.raises(ClientError) as stale:
        client.delete_object(Bucket=BUCKET, Key=key, IfMatch=old)
    assert stale.value.response["ResponseMetadata"]["HTTPStatusCode"] == 412
    assert s3.read(BUCKET, key) == b"replaced"
    client.delete_object(
        Bucket=BUCKET, Key=key, IfMatch=client.head_object(Bucket=BUCKET, Key=key)["ETag"]
    )
    assert s3.objects(BUCKET, "rule/") == []


def test_plan_on_s3(s3, sample_out):
    """plan reads the Parquet footer on s3://, chooses Beam for an object store, writes nothing."""
    source, output = f"s3://{BUCKET}/in/sample.parquet", f"s3://{BUCKET}/planned"
    plan = run_cli_captured(["plan", "--input", source, "--output", output, "--json"])
    assert plan.code == 0, plan.err
    shown = json.loads(plan.out)
    assert shown["read"]["rows"] == 2000 and shown["read"]["files"] == 1
    assert shown["engine"]["name"] == "beam"
    assert objects(s3, output) == set()


def test_load_dataset_on_s3_says_tensorflow_cannot_read_it(s3, sample_out):
    """TensorFlow 2.21 has no s3:// filesystem: load_dataset says so when it is called, naming
    the shard and the reader that can (the manifest itself is read through Beam's)."""
    from pipeline.reader.dataset import load_dataset

    if "s3" in tf.io.gfile.get_registered_schemes():
        pytest.skip("this TensorFlow has an s3:// filesystem registered")
    with pytest.raises(ValueError, match=r"TensorFlow cannot read s3://.*iter_batches") as err:
        load_dataset(sample_out, split="train")
    assert f"{sample_out}/train-00000-of-" in str(err.value)


def test_incremental_spans_on_s3(s3, tmp_path):
    object_store.check_incremental_spans(s3, f"s3://{BUCKET}/incremental", upload, tmp_path)
