"""The output lease on a local directory: two runs started at once into one output, at most one
succeeds and its output verifies; a lease held by a live run refuses a run before anything is
deleted; a dead run's lease on this host is taken over; one from another host is not, and the
error says what to do; a run whose lease was taken over writes no manifest; the lease never
stays in a finished output. (The same on gs://: tests/test_gcs.py.)"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import REPO, run_cli_captured

import pipeline.engines.launch
import pipeline.output.lease
from pipeline.output.lease import (
    LEASE_NAME,
    LeaseLostError,
    OutputLeasedError,
    acquire_lease,
    check_lease,
    release_lease,
)

ROWS = 60_000
HELD = "another run holds the output"


def write_input(path: Path, rows: int = ROWS) -> Path:
    rng = np.random.default_rng(3)
    table = pa.table({"id": np.arange(rows), "x": rng.random(rows)})
    pq.write_table(table, path, row_group_size=2_000)
    return path


def convert_process(source: Path | str, out: Path | str, env: dict | None = None):
    """`tfrecord-etl convert` in a subprocess of its own process group."""
    args = ["convert", "--input", str(source), "--output", str(out), "--batch-rows", "2000"]
    # On Beam: its job lasts longer than the two processes' start-ups differ, which the races
    # need (the in-process engine converts `big` in a tenth of a second); both engines take
    # the lease the same way (pipeline/engines/launch.py, for both engines)
    args += ["--engine", "beam"]
    return subprocess.Popen(
        [sys.executable, "-m", "pipeline", *args],
        cwd=REPO,
        env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONPATH=str(REPO), **(env or {})),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )


def race(source, out, env=None) -> list[tuple[int, str]]:
    """Two converts into `out` started at once: their (exit code, stderr)."""
    procs = [convert_process(source, out, env) for _ in range(2)]
    results = []
    try:
        for proc in procs:
            _, err = proc.communicate(timeout=300)
            results.append((proc.returncode, err))
    finally:
        for proc in procs:
            if proc.poll() is None:
                os.killpg(proc.pid, 9)
                proc.wait()
    return results


def one_winner(results: list[tuple[int, str]]) -> None:
    """Exactly one exit 0; the other non-zero, saying another run holds the output."""
    codes = sorted(code for code, _ in results)
    assert codes[0] == 0 and codes[1] != 0, results
    (loser,) = [err for code, err in results if code != 0]
    assert HELD in loser and LEASE_NAME in loser, loser


def _reaped() -> int:
    """The pid of a process that has ended (and been waited for)."""
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def write_lease(out: Path, **fields) -> Path:
    lease = {
        "run_id": "0123abcd",
        "host": socket.gethostname(),
        "pid": os.getpid(),
        "started": "2026-01-02T03:04:05+00:00",
        "output": str(out),
        **fields,
    }
    out.mkdir(parents=True, exist_ok=True)
    path = out / LEASE_NAME
    path.write_text(json.dumps(lease), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def big(tmp_path_factory):
    """An input whose job lasts longer than the two racing processes' start-up differs."""
    return write_input(tmp_path_factory.mktemp("lease") / "big.parquet")


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    return write_input(tmp_path_factory.mktemp("lease") / "small.parquet", rows=200)


def test_two_runs_at_once_one_succeeds_and_its_output_verifies(big, tmp_path):
    out = tmp_path / "out"
    one_winner(race(big, out))
    assert not (out / LEASE_NAME).exists()
    manifest = json.loads((out / "manifest.json").read_text(encoding="utf-8"))
    assert manifest["rows"] == ROWS
    listed = set(manifest["splits"]["train"]["files"])
    metadata = {"schema.pbtxt", "statistics"}
    assert {p.name for p in out.iterdir()} == {"manifest.json", *listed, *metadata}
    verify = run_cli_captured(["verify", out])
    assert verify.code == 0, verify.out + verify.err


def test_a_live_runs_lease_refuses_a_run_before_it_deletes(source, tmp_path):
    out = tmp_path / "out"
    assert run_cli_captured(["convert", "--input", source, "--output", out]).code == 0
    before = {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()}
    lease = write_lease(out)  # this process: alive
    result = run_cli_captured(["convert", "--input", source, "--output", out, "--overwrite"])
    assert result.code == 2
    assert f"{HELD}: run 0123abcd (host {socket.gethostname()}, pid {os.getpid()}" in result.err
    assert "started 2026-01-02T03:04:05+00:00" in result.err
    assert f"delete {lease} and run again" in result.err
    after = {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()}
    assert after == {**before, LEASE_NAME: lease.read_bytes()}  # nothing deleted, lease kept


def test_a_dead_runs_lease_on_this_host_is_taken_over(source, tmp_path):
    out = tmp_path / "out"
    write_lease(out, pid=_reaped())
    result = run_cli_captured(["convert", "--input", source, "--output", out])
    assert result.code == 0, result.err
    assert sorted(p.name for p in out.iterdir()) == [
        "manifest.json",
        "schema.pbtxt",
        "statistics",
        "train-00000-of-00001.tfrecord.gz",
    ]


@pytest.mark.parametrize(("host", "pid"), [("another-host", 1), (socket.gethostname(), None)])
def test_a_lease_nothing_here_can_prove_dead_is_kept(source, tmp_path, host, pid):
    out = tmp_path / "out"
    lease = write_lease(out, host=host, pid=pid)
    result = run_cli_captured(["convert", "--input", source, "--output", out])
    assert result.code == 2
    assert f"run 0123abcd (host {host}" in result.err and str(lease) in result.err
    assert [p.name for p in out.iterdir()] == [LEASE_NAME]


def test_a_run_whose_lease_was_taken_over_writes_no_manifest(source, tmp_path, monkeypatch):
    out = tmp_path / "out"

    def taken_over_at_once(output, options=None, waits=True):
        lease = acquire_lease(output, options, waits)
        write_lease(Path(output), run_id="f00d")  # another run replaces it while the job runs
        return lease

    monkeypatch.setattr(pipeline.engines.launch, "acquire_lease", taken_over_at_once)
    result = run_cli_captured(["convert", "--input", source, "--output", out])
    assert result.code == 1
    assert "another run holds the output now (run f00d" in result.err
    assert "no manifest written" in result.err
    assert not (out / "manifest.json").exists()
    assert json.loads((out / LEASE_NAME).read_text(encoding="utf-8"))["run_id"] == "f00d"


def test_lease_calls(tmp_path):
    out = str(tmp_path / "out")
    lease = acquire_lease(out)
    with pytest.raises(OutputLeasedError, match=HELD):
        acquire_lease(out)
    check_lease(out, lease.run_id)
    with pytest.raises(LeaseLostError, match="another run holds the output now"):
        check_lease(out, "someone-else")
    assert not release_lease(out, "someone-else")
    assert release_lease(out, lease.run_id)
    with pytest.raises(LeaseLostError, match="is gone"):
        check_lease(out, lease.run_id)
    assert not release_lease(out, lease.run_id)
    assert os.listdir(out) == []


def test_an_unreadable_lease_is_named(tmp_path, monkeypatch):
    monkeypatch.setattr(pipeline.output.lease, "_READ_TRIES", 2)  # not the 2 s a writer is given
    out = tmp_path / "out"
    out.mkdir()
    (out / LEASE_NAME).write_text("{not json", encoding="utf-8")
    with pytest.raises(ValueError, match="lease file is unreadable"):
        acquire_lease(str(out))
