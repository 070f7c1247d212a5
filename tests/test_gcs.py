"""The job end to end on an object store: gs:// inputs and outputs through Beam's own GCS
filesystem (apache_beam.io.gcp.gcsfilesystem, google-cloud-storage), against a GCS emulator on
127.0.0.1 (tests/gcs_emulator.py).

Covered: Parquet and CSV in, records out on gs:// equal to a local run's (as multisets of bytes);
bad rows in `_errors/` on gs://; `--overwrite`; a run killed with SIGKILL mid-write, then a re-run
into the same output (no temp or orphan object left, the records of a clean run); `verify
--source` and `inspect` on the gs:// output; two runs at once (one wins, its output verifies);
a lease nothing here can prove dead. Records are read back through Beam's filesystem: TensorFlow's
own gs:// reader (`load_dataset`) has its endpoints built in (https://www.googleapis.com) and
reads no emulator setting, so it cannot be pointed at the emulator (docs/object-stores.md).
"""

from __future__ import annotations

import collections
import json

import numpy as np
import object_store
import pytest
import tensorflow as tf
from apache_beam.io.filesystems import FileSystems
from conftest import SAMPLE_CSV, SAMPLE_PARQUET, run_cli_captured
from gcs_emulator import GcsEmulator
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

from pipeline.output.directory import clear_previous_output
from pipeline.reader.arrays import Ragged, iter_batches
from pipeline.reader.index import RecordIndex


@pytest.fixture(scope="module")
def gcs():
    """The emulator with one bucket; this process's environment set to use it."""
    with GcsEmulator((BUCKET,)) as emulator, emulator.environ():
        yield emulator


def upload(local, name: str) -> str:
    return object_store.upload(local, f"gs://{BUCKET}/{name}")


@pytest.fixture(scope="module")
def sample_out(gcs, splits) -> str:
    """The sample Parquet, uploaded, converted into gs://bucket/sample with two splits."""
    output = f"gs://{BUCKET}/sample"
    convert("--input", upload(SAMPLE_PARQUET, "in/sample.parquet"), "--output", output, *splits)
    assert list(manifest_of(output)["splits"]) == ["train", "eval"]
    return output


def test_parquet_on_gs_equals_a_local_run(gcs, sample_out, local_sample):
    expected = records(local_sample)
    assert records(sample_out) == expected and sum(expected.values()) == 2000
    assert objects(gcs, sample_out) == listed(sample_out)  # no temp object, no lease
    assert manifest_of(sample_out)["splits"] == manifest_of(local_sample)["splits"]
    assert manifest_of(sample_out)["sources"] == [f"gs://{BUCKET}/in/sample.parquet"]


def test_csv_on_gs_equals_a_local_run(gcs, tmp_path, splits):
    output = f"gs://{BUCKET}/csv"
    convert("--input", upload(SAMPLE_CSV, "in/sample.csv"), "--output", output, *splits)
    local = local_run(tmp_path, SAMPLE_CSV, *splits)
    expected = records(local)
    assert records(output) == expected and sum(expected.values()) == 2000
    assert objects(gcs, output) == listed(output)
    assert manifest_of(output)["splits"] == manifest_of(local)["splits"]


def test_bad_rows_land_in_errors_on_gs(gcs, tmp_path):
    local_csv = tmp_path / "bad.csv"
    local_csv.write_text(BAD_CSV, encoding="utf-8")
    output = f"gs://{BUCKET}/bad"
    source = upload(local_csv, "in/bad.csv")
    convert("--input", source, "--output", output, "--max-bad-rows", "5")
    manifest = manifest_of(output)
    assert manifest["rows"] == 3 and manifest["bad_rows"]["count"] == 2
    errors = sorted(name for name in objects(gcs, output) if name.startswith("_errors/"))
    assert errors == ["_errors/errors-00000-of-00001.jsonl"]
    assert manifest["bad_rows"]["files"] == [f"{output}/{errors[0]}"]
    rows = [json.loads(line) for line in gcs.read(BUCKET, f"bad/{errors[0]}").splitlines()]
    reason = "2 fields where the header has 3"
    assert sorted(rows, key=lambda r: r["row"]) == [
        {"source": source, "row": row, "column": None, "stage": "read", "reason": reason,
         "values": {"text": text}}
        for row, text in [(1, "2,7.5"), (3, "4,2.5")]
    ]  # fmt: skip
    assert objects(gcs, output) == listed(output)
    examples = [tf.train.Example.FromString(r) for r in records(output)]
    assert sorted(e.features.feature["id"].int64_list.value[0] for e in examples) == [1, 3, 5]


def test_overwrite_on_gs(gcs, sample_out, local_sample, splits):
    source = f"gs://{BUCKET}/in/sample.parquet"
    output = f"gs://{BUCKET}/overwrite"
    convert("--input", source, "--output", output, "--num-shards", "3")
    refused = run_cli_captured(["convert", "--input", source, "--output", output])
    assert refused.code == 2 and "pass --overwrite" in refused.err
    args = ["--num-shards", "2", "--overwrite", *splits]
    convert("--input", source, "--output", output, *args)
    assert objects(gcs, output) == listed(output)  # the 3 shards of the first run are gone
    assert manifest_of(output)["splits"]["train"]["files"] == [
        "train-00000-of-00002.tfrecord.gz",
        "train-00001-of-00002.tfrecord.gz",
    ]
    assert records(output) == records(local_sample)


def test_verify_and_inspect_on_gs(gcs, sample_out):
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


def test_numpy_reader_and_index_on_gs(gcs, local_sample, splits):
    """The TensorFlow-free reader reads an output on gs:// (through the same filesystem layer as
    the job) as it reads the local run; --index writes each shard's index there, and a record
    read by number is the record at that place in the sequential read."""
    output = f"gs://{BUCKET}/indexed"
    source = upload(SAMPLE_PARQUET, "in/indexed.parquet")
    convert("--input", source, "--output", output, "--index", *splits)
    read = {split: rows_of(output, split) for split in ("train", "eval")}
    assert read == {split: rows_of(local_sample, split) for split in read}
    assert sum(sum(rows.values()) for rows in read.values()) == 2000
    manifest = manifest_of(output)
    indexes = [s["index"] for s in manifest["splits"]["train"]["shards"]]
    assert len(indexes) == len(manifest["splits"]["train"]["files"])
    assert set(indexes) <= objects(gcs, output)
    records_index = RecordIndex(output, split="train")
    sequential = next(iter_batches(output, batch_size=len(records_index)))
    picks = [0, 1, len(records_index) // 2, len(records_index) - 1]
    got = records_index.batch(np.asarray(picks))
    for key, column in sequential.items():
        want = column.rows() if isinstance(column, Ragged) else list(column)
        have = got[key].rows() if isinstance(got[key], Ragged) else list(got[key])
        for j, i in enumerate(picks):
            assert np.asarray(have[j]).tolist() == np.asarray(want[i]).tolist(), (key, i)


def test_tfx_layout_on_gs(gcs, sample_out, local_sample):
    """Split directories are object name prefixes: the shards land under them, the artifact
    file beside them, and clearing for --overwrite leaves no object."""
    output = f"gs://{BUCKET}/tfx"
    source = f"gs://{BUCKET}/in/sample.parquet"
    convert("--input", source, "--output", output, "--layout", "tfx", "--num-shards", "2")
    files = manifest_of(output)["splits"]["train"]["files"]
    assert files == [f"Split-train/data_tfrecord-0000{i}-of-00002.gz" for i in range(2)]
    assert objects(gcs, output) == listed(output) | {"examples_artifact.json"}
    assert records(output) == records(local_sample)
    with FileSystems.open(f"{output}/examples_artifact.json") as f:
        assert json.loads(f.read())["properties"] == {"split_names": '["train"]'}
    clear_previous_output(output, overwrite=True)
    assert objects(gcs, output) == set()


# ----------------------------------------------------------------------------- runs as processes


def test_killed_run_then_rerun_on_gs(gcs, tmp_path):
    output = f"gs://{BUCKET}/killed"
    object_store.check_killed_run_then_rerun(gcs, output, upload, tmp_path)


def test_two_runs_at_once_on_gs(gcs, tmp_path):
    object_store.check_two_runs_at_once(gcs, f"gs://{BUCKET}/race", upload, tmp_path)


def test_a_lease_from_another_host_refuses_a_run_on_gs(gcs):
    output = f"gs://{BUCKET}/foreign"
    object_store.check_a_lease_from_another_host_refuses_a_run(gcs, output)


def test_lease_calls_on_gs(gcs):
    object_store.check_lease_calls(gcs, f"gs://{BUCKET}/lease-calls")


def test_incremental_spans_on_gs(gcs, tmp_path):
    object_store.check_incremental_spans(gcs, f"gs://{BUCKET}/incremental", upload, tmp_path)
