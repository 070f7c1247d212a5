"""Re-runs: a run killed mid-write leaves no manifest, and a re-run into the same directory
gives a complete, correct output with no stale shards or temp files of the killed run."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from conftest import REPO, read_manifest, run_cli

from pipeline.reader import load_dataset

ROWS = 100_000


def big_input(tmp_path: Path) -> Path:
    rng = np.random.default_rng(7)
    table = pa.table(
        {
            "id": np.arange(ROWS),
            "x": rng.random(ROWS),
            "s": pa.array([f"value {i % 977}" for i in range(ROWS)]),
        }
    )
    path = tmp_path / "big.parquet"
    pq.write_table(table, path, row_group_size=5_000)
    return path


def kill_mid_write(path: Path, out: Path) -> int:
    """Start the job in its own process group and SIGKILL it as soon as it writes anything."""
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "pipeline",
            "convert",
            "--input",
            str(path),
            "--output",
            str(out),
            "--num-shards",
            "5",
            "--batch-rows",
            "2000",
        ],
        cwd=REPO,
        env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    deadline = time.monotonic() + 300
    try:
        while time.monotonic() < deadline and proc.poll() is None:
            if out.exists() and any(p.name != "_LEASE" for p in out.rglob("*")):
                break  # the run wrote something besides its lease
            time.sleep(0.01)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=60)
    return proc.returncode


def test_killed_run_leaves_no_manifest_and_a_rerun_is_complete(tmp_path):
    path = big_input(tmp_path)
    out = tmp_path / "out"
    assert kill_mid_write(path, out) == -signal.SIGKILL
    assert not (out / "manifest.json").exists()
    assert any(out.rglob("*"))  # the killed run left something behind
    # What a kill between the shards' rename and the manifest leaves: shards of another count.
    (out / "train-00003-of-00005.tfrecord.gz").write_bytes(b"stale")
    assert run_cli(["convert", "--input", path, "--output", out, "--num-shards", "2"]) == 0
    manifest = read_manifest(out)
    assert manifest["rows"] == ROWS
    files = manifest["splits"]["train"]["files"]
    assert files == ["train-00000-of-00002.tfrecord.gz", "train-00001-of-00002.tfrecord.gz"]
    left = sorted(str(p.relative_to(out)) for p in out.rglob("*"))
    stats = ["statistics", "statistics/train", "statistics/train/FeatureStats.pb"]
    assert left == sorted(["manifest.json", "schema.pbtxt", *stats, *files])
    (batch,) = list(load_dataset(str(out), batch_size=ROWS))
    assert sorted(batch["id"].numpy().tolist()) == list(range(ROWS))


def test_a_complete_output_is_not_overwritten_without_overwrite(tmp_path):
    path = tmp_path / "t.parquet"
    pq.write_table(pa.table({"id": range(10)}), path)
    out = tmp_path / "out"
    assert run_cli(["convert", "--input", path, "--output", out]) == 0
    before = {p.name: p.read_bytes() for p in out.rglob("*") if p.is_file()}
    assert run_cli(["convert", "--input", path, "--output", out, "--num-shards", "3"]) == 2
    assert {p.name: p.read_bytes() for p in out.rglob("*") if p.is_file()} == before
    args = ["convert", "--input", path, "--output", out, "--num-shards", "3", "--overwrite"]
    assert run_cli(args) == 0
    assert len(read_manifest(out)["splits"]["train"]["files"]) == 3
    assert sorted(p.name for p in out.iterdir()) == sorted(
        [
            "manifest.json",
            "schema.pbtxt",
            "statistics",
            *(f"train-0000{i}-of-00003.tfrecord.gz" for i in range(3)),
        ]
    )
