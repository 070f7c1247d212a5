"""What the object-store tests (tests/test_gcs.py, tests/test_s3.py, tests/test_azure.py)
share: the bucket, moving files in, reading an output back through Beam's filesystems, the
local run to compare with and its fixtures (`splits`, `local_sample`: tests/conftest.py loads
this module as a plugin, so pytest finds them by name)."""

from __future__ import annotations

import collections
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import REPO, SAMPLE_PARQUET, run_cli_captured

from pipeline.output.lease import (
    LEASE_NAME,
    LeaseLostError,
    OutputLeasedError,
    acquire_lease,
    check_lease,
    release_lease,
)
from transforms.fs import FileSystems
from transforms.write.tfrecord import read_records

BUCKET = "bucket"
ROWS = 30_000
BAD_CSV = "id,amount,name\n1,1.5,a\n2,7.5\n3,0,c\n4,2.5\n5,3.5,e\n"  # 2 short rows


class Emulator(Protocol):
    def objects(self, bucket: str, prefix: str) -> list[str]: ...

    def environment(self) -> dict[str, str]: ...


def upload(local, url: str) -> str:
    """Copy the local file `local` to `url` (an object); `url` back."""
    with open(local, "rb") as f, FileSystems.create(url) as g:
        g.write(f.read())
    return url


def manifest_of(output: str) -> dict:
    with FileSystems.open(f"{output}/manifest.json") as f:
        return json.loads(f.read().decode("utf-8"))


def records(output: str) -> collections.Counter:
    """Every record of every split the manifest lists, read through Beam's filesystem, as a
    multiset of bytes."""
    manifest = manifest_of(output)
    files = [f"{output.rstrip('/')}/{f}" for s in manifest["splits"].values() for f in s["files"]]
    return collections.Counter(r for f in files for r in read_records(f, sys.maxsize))


def objects(emulator: Emulator, output: str) -> set[str]:
    """Every object under the output (`scheme://bucket/prefix`, or `azfs://account/container/
    prefix`), relative to it."""
    where = output.split("://", 1)[1]
    if output.startswith("azfs://"):
        where = where.split("/", 1)[1]  # the account: the emulator lists one account's blobs
    prefix = where.removeprefix(f"{BUCKET}/").rstrip("/") + "/"
    return {name.removeprefix(prefix) for name in emulator.objects(BUCKET, prefix)}


def listed(output: str) -> set[str]:
    """What the manifest says the output holds (with the manifest itself)."""
    manifest = manifest_of(output)
    shards = {f for s in manifest["splits"].values() for f in s["files"]}
    errors = {f"_errors/{f.rsplit('/', 1)[-1]}" for f in manifest["bad_rows"]["files"]}
    metadata = [*manifest.get("statistics", {}).values(), manifest["schema"]]
    transform = manifest.get("transform", {}).get("files", [])
    return {"manifest.json", *shards, *errors, *transform, *metadata}


def convert(*args) -> None:
    result = run_cli_captured(["convert", *map(str, args)])
    assert result.code == 0, result.err


def local_run(tmp_path, source, *args) -> str:
    """The same job into a new local directory: the clean run to compare with."""
    out = tmp_path / f"local-{uuid.uuid4().hex[:8]}"
    convert("--input", source, "--output", out, *args)
    return str(out)


@pytest.fixture(scope="module")
def splits(tmp_path_factory) -> list[str]:
    """Two splits, train and eval (a config key: there is no flag for it)."""
    config = tmp_path_factory.mktemp("config") / "splits.yaml"
    config.write_text("splits: {train: 8, eval: 2}\n", encoding="utf-8")
    return ["--config", str(config)]


@pytest.fixture(scope="module")
def local_sample(tmp_path_factory, splits) -> str:
    """The sample Parquet converted into a local directory: the clean run to compare with."""
    return local_run(tmp_path_factory.mktemp("local"), SAMPLE_PARQUET, *splits)


# ----------------------------------------------------------------------------- runs as processes

# The checks below are the same on every store; each store's test module calls them with its
# emulator, the output's URL and its upload.


def big_input(upload: Callable[[Path, str], str], tmp_path: Path) -> tuple[str, Path]:
    """A 30,000-row Parquet file in 2,000-row groups, uploaded: (its URL, the local file)."""
    rng = np.random.default_rng(11)
    table = pa.table({"id": np.arange(ROWS), "x": rng.random(ROWS)})
    path = tmp_path / "big.parquet"
    pq.write_table(table, path, row_group_size=2_000)
    return upload(path, f"in/{tmp_path.name}.parquet"), path


def convert_process(emulator: Emulator, source: str, output: str, *extra: str) -> subprocess.Popen:
    """`convert` in a process of its own (its own process group), set to reach the emulator."""
    args = ["convert", "--input", source, "--output", output, "--batch-rows", "2000", *extra]
    return subprocess.Popen(
        [sys.executable, "-m", "pipeline", *args],
        cwd=REPO,
        env=dict(
            os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONPATH=str(REPO), **emulator.environment()
        ),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )


def stop(proc: subprocess.Popen) -> tuple[str, str]:
    """The process group killed if it still runs; what the process wrote (stdout, stderr)."""
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
    return proc.communicate(timeout=60)


def _kill_while_writing(emulator: Emulator, source: str, output: str) -> set[str] | None:
    """Start a run and SIGKILL it as soon as a temp shard of it is listed; what it left, or
    None when the run ended (and succeeded) before it could be killed."""
    proc = convert_process(emulator, source, output, "--shard-mb", "0.1")
    try:
        deadline = time.monotonic() + 240
        while proc.poll() is None and time.monotonic() < deadline:
            if any(name.startswith("beam-temp-") for name in objects(emulator, output)):
                break  # a temp shard is written
            time.sleep(0.02)
        ended = proc.poll() is not None
    finally:
        _, err = stop(proc)
    if ended:
        assert proc.returncode == 0, err
        return None
    assert proc.returncode == -signal.SIGKILL
    return objects(emulator, output)


def check_killed_run_then_rerun(emulator: Emulator, output: str, upload, tmp_path: Path) -> None:
    """A run killed (SIGKILL) once it writes a temp shard leaves its lease and temp objects and
    no manifest; a re-run takes over the dead run's lease and leaves exactly a clean run's
    output, with the local run's records.

    On a loaded machine the listing that sees the first temp shard can come late, when the run
    is already moving its temp shards to their names, or after the run has ended: such a run
    is cleared and run again (at most five runs), since what is checked is what a re-run does
    with a run killed while it writes."""
    source, local_source = big_input(upload, tmp_path)
    left: set[str] = set()
    for _ in range(5):
        killed = _kill_while_writing(emulator, source, output)
        if killed is None:  # it ended first
            delete_objects(output, objects(emulator, output))
            continue
        left = killed
        assert LEASE_NAME in left and "manifest.json" not in left, left
        if any(name.startswith("beam-temp-") for name in left):
            break
        delete_objects(output, left)
    assert any(name.startswith("beam-temp-") for name in left), left  # what a killed run leaves
    convert("--input", source, "--output", output)  # takes over the dead run's lease
    assert objects(emulator, output) == listed(output)  # no temp, orphan or lease object
    assert manifest_of(output)["rows"] == ROWS
    assert records(output) == records(local_run(tmp_path, local_source))


def delete_objects(output: str, names: set[str]) -> None:
    """Delete the objects `names` under `output` (a run killed too late, cleared for the next)."""
    FileSystems.delete([f"{output}/{name}" for name in sorted(names)])


def check_two_runs_at_once(emulator: Emulator, output: str, upload, tmp_path: Path) -> None:
    """Two runs into one output at once: one wins, the other stops naming the lease, and the
    output verifies."""
    source, _ = big_input(upload, tmp_path)
    procs = [convert_process(emulator, source, output) for _ in range(2)]
    results = []
    try:
        for proc in procs:
            _, err = proc.communicate(timeout=300)
            results.append((proc.returncode, err))
    finally:
        for proc in procs:
            stop(proc)
    codes = sorted(code for code, _ in results)
    assert codes[0] == 0 and codes[1] != 0, results
    (loser,) = [err for code, err in results if code != 0]
    assert "another run holds the output" in loser and f"{output}/{LEASE_NAME}" in loser
    assert objects(emulator, output) == listed(output)
    assert manifest_of(output)["rows"] == ROWS
    verify = run_cli_captured(["verify", output])
    assert verify.code == 0, verify.out + verify.err


def check_a_lease_from_another_host_refuses_a_run(emulator: Emulator, output: str) -> None:
    lease = {
        "run_id": "beef",
        "host": "elsewhere",
        "pid": 7,
        "started": "2026-01-01T00:00:00+00:00",
    }
    with FileSystems.create(f"{output}/{LEASE_NAME}") as f:
        f.write(json.dumps(lease).encode("utf-8"))
    result = run_cli_captured(["convert", "--input", SAMPLE_PARQUET, "--output", output])
    assert result.code == 2
    assert "another run holds the output: run beef (host elsewhere, pid 7" in result.err
    assert f"delete {output}/{LEASE_NAME} and run again" in result.err
    assert objects(emulator, output) == {LEASE_NAME}


def check_lease_calls(emulator: Emulator, output: str) -> None:
    """The lease's own calls on the store: a second acquire refused while the object exists
    (the store's conditional create), a lease taken over is lost, and only its holder's
    release deletes it (the store's conditional delete)."""
    lease = acquire_lease(output)
    with pytest.raises(OutputLeasedError, match="another run holds the output"):
        acquire_lease(output)
    check_lease(output, lease.run_id)
    replaced = {**lease.to_json(), "run_id": "other"}
    with FileSystems.create(f"{output}/{LEASE_NAME}") as f:  # another run took it over
        f.write(json.dumps(replaced).encode("utf-8"))
    with pytest.raises(LeaseLostError, match="another run holds the output now"):
        check_lease(output, lease.run_id)
    assert not release_lease(output, lease.run_id)  # not ours: kept
    assert objects(emulator, output) == {LEASE_NAME}
    assert release_lease(output, "other")
    assert objects(emulator, output) == set()


def check_incremental_spans(emulator: Emulator, output: str, upload, tmp_path: Path) -> None:
    """`convert --incremental` on the store: a first span of two inputs; then, with one input
    rewritten, a new one and a leftover object of a run that did not commit, one run with
    --reconvert-changed makes span 2 of all three and removes span 1, the leftover and the
    statistics of span 1's commit; a run with nothing new writes nothing. The dataset reads back
    as the inputs, each row once."""
    from pipeline.output.dataset import read_dataset
    from pipeline.reader.arrays import iter_batches

    def table(first: int, rows: int) -> pa.Table:
        return pa.table({"id": np.arange(first, first + rows), "x": np.arange(rows) * 0.5})

    def put(name: str, t: pa.Table) -> str:
        path = tmp_path / name
        pq.write_table(t, path)
        return upload(path, f"inc-{tmp_path.name}/{name}")

    a = put("a.parquet", table(0, 50))
    pattern = a.rsplit("/", 1)[0] + "/*.parquet"
    put("b.parquet", table(100, 50))
    first = run_cli_captured(["convert", "--input", pattern, "--output", output, "--incremental"])
    assert first.code == 0, first.err
    put("b.parquet", table(500, 70))  # rewritten: another size
    put("c.parquet", table(900, 5))
    leftover = tmp_path / "leftover"
    leftover.write_bytes(b"x")
    object_store_leftover = f"{output}/span-00009/train-00000-of-00001.tfrecord.gz"
    with open(leftover, "rb") as f, FileSystems.create(object_store_leftover) as g:
        g.write(f.read())
    second = run_cli_captured(
        ["convert", "--input", pattern, "--output", output, "--incremental", "--reconvert-changed"]
    )
    assert second.code == 0, second.err
    assert "removed span-00009: not committed to the dataset" in second.err
    line = json.loads(second.out.strip().splitlines()[-1])
    assert (line["span"], line["retired"], line["rows_out"]) == (2, [1], 125)
    dataset = read_dataset(output)
    assert dataset is not None and dataset.numbers == [2]
    assert [i.rows for i in dataset.spans[0].inputs] == [50, 70, 5]
    names = objects(emulator, output)
    assert {n.split("/", 1)[0] for n in names} == {"dataset.json", "span-00002", "statistics"}
    whole = sorted(n for n in names if n.startswith("statistics/"))  # span 1's are removed
    assert whole == [
        "statistics/after-span-00002/train/FeatureStats.pb",
        "statistics/after-span-00002/train/sketches.npz",
    ]
    from tensorflow_metadata.proto.v0 import statistics_pb2

    stats = statistics_pb2.DatasetFeatureStatisticsList()
    with FileSystems.open(f"{output}/{whole[0]}") as f:
        stats.ParseFromString(f.read())
    assert stats.datasets[0].num_examples == 125  # the whole dataset's rows
    ids = sorted(v for b in iter_batches(output, batch_size=1000) for v in b["id"].tolist())
    assert ids == [*range(50), *range(500, 570), *range(900, 905)]
    third = run_cli_captured(["convert", "--input", pattern, "--output", output, "--incremental"])
    assert third.code == 0 and "nothing new" in third.out
    assert objects(emulator, output) == names
