"""The job end to end on Azure Blob Storage: azfs:// inputs and outputs through Beam's Azure
filesystem (apache_beam.io.azure, azure-storage-blob) and transforms/fs_azure.py, against
azurite on 127.0.0.1 (tests/azure_emulator.py). Skipped when azurite or node is not installed.

Covered: Parquet and CSV in, records out on azfs:// equal to a local run's (as multisets of
bytes); the connection string given only as Beam's `--azure_connection_string` (no environment
variable); the in-process engine reading `files:` references on azfs:// with the environment's
connection string; bad rows in `_errors/`; `--overwrite`; a run killed with SIGKILL mid-write,
then a re-run (no temp or orphan blob left, the records of a clean run); `verify --source`,
`inspect`, `plan` and the numpy reader on the azfs:// output; two runs at once (one wins, its
output verifies); a lease nothing here can prove dead; the lease's conditional writes
(`If-None-Match: *`, `If-Match: <ETag>`) and what azurite honours; `convert --incremental`.
TensorFlow 2.21 has no azfs:// filesystem: `load_dataset` says so (docs/object-stores.md).
"""

from __future__ import annotations

import collections
import json
import os
import re
import subprocess
import sys

import numpy as np
import object_store
import pytest
import tensorflow as tf
from azure_emulator import ACCOUNT, AzureEmulator, installed
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

from pipeline.reader.arrays import Ragged, iter_batches
from pipeline.reader.index import RecordIndex
from transforms import fs_azure
from transforms.fs import FileSystems
from transforms.fs_match import translate_pattern

pytestmark = pytest.mark.skipif(installed() is not None, reason=str(installed()))

ROOT = f"azfs://{ACCOUNT}/{BUCKET}"


@pytest.fixture(scope="module")
def azure():
    """The emulator with one container; this process's environment set to use it."""
    with AzureEmulator((BUCKET,)) as emulator, emulator.environ():
        yield emulator


def upload(local, name: str) -> str:
    return object_store.upload(local, f"{ROOT}/{name}")


@pytest.fixture(scope="module")
def sample_out(azure, splits) -> str:
    """The sample Parquet, uploaded, converted into azfs://.../bucket/sample with two splits."""
    output = f"{ROOT}/sample"
    convert("--input", upload(SAMPLE_PARQUET, "in/sample.parquet"), "--output", output, *splits)
    assert list(manifest_of(output)["splits"]) == ["train", "eval"]
    return output


def test_parquet_on_azure_equals_a_local_run(azure, sample_out, local_sample):
    expected = records(local_sample)
    assert records(sample_out) == expected and sum(expected.values()) == 2000
    assert objects(azure, sample_out) == listed(sample_out)  # no temp blob, no lease
    assert manifest_of(sample_out)["splits"] == manifest_of(local_sample)["splits"]
    assert manifest_of(sample_out)["sources"] == [f"{ROOT}/in/sample.parquet"]


def test_csv_on_azure_equals_a_local_run(azure, tmp_path, splits):
    """Run as a separate process that has no AZURE_STORAGE_CONNECTION_STRING: the connection
    string comes from Beam's --azure_connection_string, which the launcher's own calls
    (planning, lease, clearing) use too."""
    output = f"{ROOT}/csv"
    source = upload(SAMPLE_CSV, "in/sample.csv")
    flags = ["--input", source, "--output", output, *splits]
    env = {k: v for k, v in os.environ.items() if k != "AZURE_STORAGE_CONNECTION_STRING"}
    done = subprocess.run(
        [sys.executable, "-m", "pipeline", "convert", *flags,
         f"--azure_connection_string={azure.connection_string}"],
        cwd=REPO,
        env={**env, "TF_CPP_MIN_LOG_LEVEL": "2", "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    local = local_run(tmp_path, SAMPLE_CSV, *splits)
    expected = records(local)
    assert records(output) == expected and sum(expected.values()) == 2000
    assert objects(azure, output) == listed(output)
    assert manifest_of(output)["splits"] == manifest_of(local)["splits"]


def test_in_process_engine_reads_files_on_azure(azure, tmp_path):
    """A local CSV whose `files:` column holds azfs:// URIs: the in-process engine (which takes
    no Beam option) reads the blobs with the environment's connection string; a blob that is
    not there is a bad row."""
    contents = {f"doc-{i}.bin": bytes([i]) * (i + 1) for i in range(5)}
    for name, data in contents.items():
        with FileSystems.create(f"{ROOT}/docs/{name}") as f:
            f.write(data)
    table = tmp_path / "docs.csv"
    uris = [f"{ROOT}/docs/{name}" for name in [*contents, "missing.bin"]]
    table.write_text("id,doc\n" + "".join(f"{i},{u}\n" for i, u in enumerate(uris)), "utf-8")
    config = tmp_path / "c.yaml"
    config.write_text(json.dumps({"files": {"doc": {}}, "max_bad_rows": 1}), encoding="utf-8")
    out = tmp_path / "out"
    result = run_cli_captured(
        ["convert", "--input", table, "--output", out, "--config", config,
         "--engine", "in-process"]
    )  # fmt: skip
    assert result.code == 0, result.err
    assert '"engine":"in-process"' in result.out
    examples = [tf.train.Example.FromString(r) for r in records(str(out))]
    got = {
        e.features.feature["id"].int64_list.value[0]: e.features.feature["doc"].bytes_list.value[0]
        for e in examples
    }
    assert got == {i: data for i, data in enumerate(contents.values())}
    (errors,) = [p for p in (out / "_errors").iterdir()]
    (bad,) = [json.loads(line) for line in errors.read_text("utf-8").splitlines()]
    assert bad["values"]["id"] == 5 and bad["reason"].endswith(f"{uris[-1]}: file not found")


def test_bad_rows_land_in_errors_on_azure(azure, tmp_path):
    local_csv = tmp_path / "bad.csv"
    local_csv.write_text(BAD_CSV, encoding="utf-8")
    output = f"{ROOT}/bad"
    source = upload(local_csv, "in/bad.csv")
    convert("--input", source, "--output", output, "--max-bad-rows", "5")
    manifest = manifest_of(output)
    assert manifest["rows"] == 3 and manifest["bad_rows"]["count"] == 2
    errors = sorted(name for name in objects(azure, output) if name.startswith("_errors/"))
    assert errors == ["_errors/errors-00000-of-00001.jsonl"]
    assert manifest["bad_rows"]["files"] == [f"{output}/{errors[0]}"]
    rows = [json.loads(line) for line in azure.read(BUCKET, f"bad/{errors[0]}").splitlines()]
    reason = "2 fields where the header has 3"
    assert sorted(rows, key=lambda r: r["row"]) == [
        {"source": source, "row": row, "column": None, "stage": "read", "reason": reason,
         "values": {"text": text}}
        for row, text in [(1, "2,7.5"), (3, "4,2.5")]
    ]  # fmt: skip
    assert objects(azure, output) == listed(output)
    examples = [tf.train.Example.FromString(r) for r in records(output)]
    assert sorted(e.features.feature["id"].int64_list.value[0] for e in examples) == [1, 3, 5]


def test_overwrite_on_azure(azure, sample_out, local_sample, splits):
    source = f"{ROOT}/in/sample.parquet"
    output = f"{ROOT}/overwrite"
    convert("--input", source, "--output", output, "--num-shards", "3")
    refused = run_cli_captured(["convert", "--input", source, "--output", output])
    assert refused.code == 2 and "pass --overwrite" in refused.err
    args = ["--num-shards", "2", "--overwrite", *splits]
    convert("--input", source, "--output", output, *args)
    assert objects(azure, output) == listed(output)  # the 3 shards of the first run are gone
    assert manifest_of(output)["splits"]["train"]["files"] == [
        "train-00000-of-00002.tfrecord.gz",
        "train-00001-of-00002.tfrecord.gz",
    ]
    assert records(output) == records(local_sample)


def test_verify_inspect_and_report_on_azure(azure, sample_out):
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
    page = run_cli_captured(["report", output])
    assert page.code == 0, page.err
    html = azure.read(BUCKET, "sample/report.html").decode("utf-8")
    assert html.startswith("<!DOCTYPE html>") and output in html
    azure.service().get_blob_client(BUCKET, "sample/report.html").delete_blob()


def rows_of(output: str, split: str) -> collections.Counter:
    """Every row iter_batches gives for a split, as a multiset of the rows' values (repr)."""
    rows: collections.Counter = collections.Counter()
    for batch in iter_batches(output, split=split, batch_size=300):
        columns = {k: v.rows() if isinstance(v, Ragged) else list(v) for k, v in batch.items()}
        for i in range(len(next(iter(columns.values())))):
            rows[repr([(k, np.asarray(columns[k][i]).tolist()) for k in sorted(columns)])] += 1
    return rows


def test_numpy_reader_and_index_on_azure(azure, local_sample, splits):
    """The TensorFlow-free reader reads an output on azfs:// as it reads the local run; a record
    read by number through the index files is the record at that place in the sequential
    read."""
    output = f"{ROOT}/indexed"
    source = upload(SAMPLE_PARQUET, "in/indexed.parquet")
    convert("--input", source, "--output", output, "--index", *splits)
    read = {split: rows_of(output, split) for split in ("train", "eval")}
    assert read == {split: rows_of(local_sample, split) for split in read}
    assert sum(sum(rows.values()) for rows in read.values()) == 2000
    manifest = manifest_of(output)
    indexes = [s["index"] for s in manifest["splits"]["train"]["shards"]]
    assert len(indexes) == len(manifest["splits"]["train"]["files"])
    assert set(indexes) <= objects(azure, output)
    records_index = RecordIndex(output, split="train")
    sequential = next(iter_batches(output, batch_size=len(records_index)))
    picks = [0, 1, len(records_index) // 2, len(records_index) - 1]
    got = records_index.batch(np.asarray(picks))
    for key, column in sequential.items():
        want = column.rows() if isinstance(column, Ragged) else list(column)
        have = got[key].rows() if isinstance(got[key], Ragged) else list(got[key])
        for j, i in enumerate(picks):
            assert np.asarray(have[j]).tolist() == np.asarray(want[i]).tolist(), (key, i)


def test_plan_on_azure(azure, sample_out):
    """plan reads the Parquet footer on azfs://, chooses Beam for an object store, writes
    nothing."""
    source, output = f"{ROOT}/in/sample.parquet", f"{ROOT}/planned"
    plan = run_cli_captured(["plan", "--input", source, "--output", output, "--json"])
    assert plan.code == 0, plan.err
    shown = json.loads(plan.out)
    assert shown["read"]["rows"] == 2000 and shown["read"]["files"] == 1
    assert shown["engine"]["name"] == "beam"
    assert objects(azure, output) == set()


def test_load_dataset_on_azure_says_tensorflow_cannot_read_it(azure, sample_out):
    """TensorFlow 2.21 has no azfs:// filesystem: load_dataset says so when it is called, naming
    the shard and the reader that can (the manifest itself is read through Beam's)."""
    from pipeline.reader.dataset import load_dataset

    if "azfs" in tf.io.gfile.get_registered_schemes():
        pytest.skip("this TensorFlow has an azfs:// filesystem registered")
    with pytest.raises(ValueError, match=r"TensorFlow cannot read azfs://.*iter_batches") as err:
        load_dataset(sample_out, split="train")
    assert f"{sample_out}/train-00000-of-" in str(err.value)


# ----------------------------------------------------------------------------- the filesystem

TREE = {
    "a.txt": b"a",
    "b.csv": b"bb",
    "x1.txt": b"x1",
    "x2.txt": b"x22",
    "[k].txt": b"k",
    "sub/c.txt": b"ccc",
    "sub/deep/d.txt": b"dddd",
    "subway.txt": b"s",
}
PATTERNS = [
    "*", "*.txt", "**", "**.txt", "sub/*", "sub/**", "sub/", "x?.txt", "x[12].txt",
    "a.txt", "sub/deep/d.txt", "sub", "missing.txt", "missing/*", "s*/d*/*",
]  # fmt: skip


def test_the_filesystem_calls_beam_gets_wrong(azure):
    """exists, match, delete and rename on azfs:// (transforms/fs_azure.py): exists is False for
    a missing blob and for a name prefix; match follows Beam's pattern syntax (a path without a
    wildcard is that blob or nothing), with each blob's size and modification time; delete
    skips what is not there; rename moves a blob."""
    root = f"{ROOT}/fs"
    for name, data in TREE.items():
        with FileSystems.create(f"{root}/{name}") as f:
            f.write(data)
    assert FileSystems.exists(f"{root}/a.txt")
    assert not FileSystems.exists(f"{root}/missing.txt") and not FileSystems.exists(f"{root}/sub")
    assert not FileSystems.exists(f"azfs://{ACCOUNT}/nocontainer/a.txt")
    for pattern in PATTERNS:
        full = f"{root}/{pattern}" + ("*" if pattern.endswith("/") else "")
        want = sorted(
            n for n in TREE if re.match(translate_pattern(full), f"{root}/{n}")
        )  # fmt: skip
        (result,) = FileSystems.match([f"{root}/{pattern}"])
        got = sorted(m.path.removeprefix(f"{root}/") for m in result.metadata_list)
        assert got == want, pattern
        assert all(
            m.size_in_bytes == len(TREE[m.path[len(root) + 1 :]]) for m in result.metadata_list
        )
    (one,) = FileSystems.match([f"{root}/a.txt"])[0].metadata_list
    client = azure.service().get_blob_client(BUCKET, "fs/a.txt")
    assert one.last_updated_in_seconds == client.get_blob_properties().last_modified.timestamp()
    assert len(FileSystems.match([f"{root}/**"], [3])[0].metadata_list) == 3
    FileSystems.rename([f"{root}/a.txt"], [f"{root}/moved/a.txt"])
    assert azure.read(BUCKET, "fs/moved/a.txt") == b"a" and not FileSystems.exists(f"{root}/a.txt")
    FileSystems.delete([f"{root}/x*.txt", f"{root}/missing.txt", f"{root}/sub/", f"{root}/b.csv"])
    assert azure.objects(BUCKET, "fs/") == ["fs/[k].txt", "fs/moved/a.txt", "fs/subway.txt"]
    FileSystems.delete([f"{root}/"])
    assert azure.objects(BUCKET, "fs/") == []
    with pytest.raises(ValueError, match="azfs://<storage-account>/<container>/<path>"):
        fs_azure.split_path("azfs://UPPER/container/x")


# ----------------------------------------------------------------------------- runs as processes


def test_killed_run_then_rerun_on_azure(azure, tmp_path):
    output = f"{ROOT}/killed"
    object_store.check_killed_run_then_rerun(azure, output, upload, tmp_path)


def test_two_runs_at_once_on_azure(azure, tmp_path):
    object_store.check_two_runs_at_once(azure, f"{ROOT}/race", upload, tmp_path)


def test_a_lease_from_another_host_refuses_a_run_on_azure(azure):
    output = f"{ROOT}/foreign"
    object_store.check_a_lease_from_another_host_refuses_a_run(azure, output)


def test_lease_calls_on_azure(azure):
    object_store.check_lease_calls(azure, f"{ROOT}/lease-calls")


def test_the_emulator_honours_the_conditional_writes(azure):
    """The Azure rule the lease relies on, as azurite answers it: a Put Blob with
    If-None-Match: * is refused (409 BlobAlreadyExists) while the blob exists; a Put or a Delete
    Blob with an If-Match ETag that is not the blob's is refused (412 ConditionNotMet); with the
    blob's ETag, both are done."""
    from azure.core.exceptions import HttpResponseError

    blob = azure.service().get_blob_client(BUCKET, "rule/blob")
    blob.upload_blob(b"first", if_none_match="*")
    with pytest.raises(HttpResponseError) as refused:
        blob.upload_blob(b"second", if_none_match="*")
    assert (refused.value.status_code, refused.value.error_code) == (409, "BlobAlreadyExists")
    assert azure.read(BUCKET, "rule/blob") == b"first"
    old = blob.get_blob_properties().etag
    blob.upload_blob(b"renewed", overwrite=True, if_match=old)  # the current ETag: done
    for stale in (
        lambda: blob.upload_blob(b"stale", overwrite=True, if_match=old),
        lambda: blob.delete_blob(if_match=old),
    ):
        with pytest.raises(HttpResponseError) as refused:
            stale()
        assert (refused.value.status_code, refused.value.error_code) == (412, "ConditionNotMet")
    assert azure.read(BUCKET, "rule/blob") == b"renewed"
    blob.delete_blob(if_match=blob.get_blob_properties().etag)
    assert azure.objects(BUCKET, "rule/") == []


def test_two_lease_takers_at_once_one_wins(azure):
    """Many conditional creates of one lease blob at once (threads, each its own client): one
    succeeds, every other is told the lease exists; the blob holds the winner's bytes."""
    from concurrent.futures import ThreadPoolExecutor

    from pipeline.output.lease_azure import create_azure

    path = f"{ROOT}/takers/_LEASE"
    with ThreadPoolExecutor(8) as pool:
        won = list(pool.map(lambda i: create_azure(path, b"%d" % i, None), range(8)))
    assert won.count(True) == 1
    assert azure.read(BUCKET, "takers/_LEASE") == b"%d" % won.index(True)


def test_incremental_spans_on_azure(azure, tmp_path):
    object_store.check_incremental_spans(azure, f"{ROOT}/incremental", upload, tmp_path)
