"""`convert --dates START..END`: a backfill of one run per date (pipeline/cli/backfill.py)."""

from __future__ import annotations

import datetime
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import REPO, run_cli_captured

from pipeline.cli.backfill import MAX_DATES, child_args, parse_dates
from pipeline.cli.main import main as cli_main
from pipeline.job.errors import ConfigError
from pipeline.reader.arrays import iter_batches


def _day_table(day: int, rows: int) -> pa.Table:
    return pa.table({"id": np.arange(rows) + 1000 * day, "day": np.full(rows, day, np.int64)})


def _partition(root: Path, day: int, rows: int = 300) -> None:
    folder = root / f"date=2026-11-{day:02d}"
    folder.mkdir(parents=True)
    pq.write_table(_day_table(day, rows), folder / "part.parquet")


def _backfill(root: Path, *flags: str):
    return run_cli_captured(["convert", "--input", f"{root}/t/date={{date}}/*.parquet",
                             "--output", f"{root}/out/{{date}}", *flags])  # fmt: skip


def _ids(output: Path) -> list[int]:
    return sorted(v for b in iter_batches(str(output), batch_size=10_000) for v in b["id"].tolist())


def test_parse_dates_and_the_child_command_line():
    assert parse_dates("2026-11-29..2026-12-02") == [
        datetime.date(2026, 11, 29) + datetime.timedelta(days=i) for i in range(4)
    ]
    assert parse_dates("2026-02-03") == [datetime.date(2026, 2, 3)]
    for bad, message in [
        ("2026-11-30..2026-11-01", "ends before it starts"),
        ("2026-11-01..", "expected START..END"),
        ("2026-13-01..2026-12-01", "YYYY-MM-DD"),
        ("2000-01-01..2026-01-01", f"at most {MAX_DATES}"),
    ]:
        with pytest.raises(ConfigError, match=message):
            parse_dates(bad)
    argv = ["--input", "t/{date}", "--dates", "2026-11-01..2026-11-02", "--output", "o/{date}",
            "--parallel-dates=2", "--shuffle"]  # fmt: skip
    assert child_args(argv, datetime.date(2026, 11, 2), 3) == [
        "--input", "t/{date}", "--output", "o/{date}", "--shuffle",
        "--date", "2026-11-02", "--workers", "3",
    ]  # fmt: skip


def test_a_backfill_runs_each_date_reports_each_and_a_rerun_finishes_it(tmp_path):
    for day in (1, 2, 4):
        _partition(tmp_path / "t", day)
    (tmp_path / "out" / "2026-11-02").mkdir(parents=True)  # what a killed run left: no manifest
    (tmp_path / "out" / "2026-11-02" / "beam-temp-0a1b").mkdir()

    result = _backfill(tmp_path, "--dates", "2026-11-01..2026-11-04", "--parallel-dates", "2")
    assert result.code == 1, result.err
    summary = json.loads(result.out.splitlines()[-1])
    statuses = {
        d["date"]: (d["status"], d["exit_code"], d.get("rows_out")) for d in summary["dates"]
    }
    assert statuses == {
        "2026-11-01": ("succeeded", 0, 300),
        "2026-11-02": ("succeeded", 0, 300),
        "2026-11-03": ("invalid", 2, None),  # no partition for that day
        "2026-11-04": ("succeeded", 0, 300),
    }
    assert summary["status"] == "failed" and summary["failed"] == ["2026-11-03"]
    assert summary["succeeded"] == 3 and summary["skipped"] == 0
    assert "[2026-11-03] tfrecord-etl: error:" in result.err
    assert "1 of 4 date(s) failed: 2026-11-03" in result.err
    for day in (1, 2, 4):
        out = tmp_path / "out" / f"2026-11-{day:02d}"
        assert _ids(out) == list(range(1000 * day, 1000 * day + 300))
        assert not list(out.glob("beam-temp-*"))

    _partition(tmp_path / "t", 3, rows=5)  # the day's data arrived: the re-run finishes it
    again = _backfill(tmp_path, "--dates", "2026-11-01..2026-11-04")
    assert again.code == 0, again.err
    summary = json.loads(again.out.splitlines()[-1])
    assert [d["status"] for d in summary["dates"]] == ["skipped", "skipped", "succeeded", "skipped"]
    assert summary["status"] == "succeeded" and summary["failed"] == []
    assert "[2026-11-01] skipped:" in again.err
    assert _ids(tmp_path / "out" / "2026-11-03") == list(range(3000, 3005))

    forced = _backfill(tmp_path, "--dates", "2026-11-03..2026-11-04", "--overwrite")
    assert forced.code == 0, forced.err
    summary = json.loads(forced.out.splitlines()[-1])
    assert [d["status"] for d in summary["dates"]] == ["succeeded", "succeeded"]


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--dates", "2026-11-01..2026-11-02", "--date", "2026-11-01"], "--date and --dates"),
        (["--dates", "2026-11-02..2026-11-01"], "ends before it starts"),
        (["--dates", "2026-11-01..2026-11-02", "--parallel-dates", "0"], "at least 1"),
    ],
)
def test_a_backfill_refuses_bad_flags_before_any_run(tmp_path, flags, message):
    result = _backfill(tmp_path, *flags)
    assert result.code == 2 and message in result.err
    assert json.loads(result.out.splitlines()[-1])["status"] == "invalid"
    assert not (tmp_path / "out").exists()


def test_a_backfill_needs_date_in_its_input_and_output(tmp_path, capsys):
    _partition(tmp_path / "t", 1)
    one = str(tmp_path / "t" / "date=2026-11-01" / "part.parquet")
    for inp, out, message in [
        (f"{tmp_path}/t/date={{date}}/*.parquet", str(tmp_path / "out"), "the output"),
        (one, f"{tmp_path}/out/{{date}}", "no input path has {date}"),
        (
            f"{tmp_path}/t/date={{date}}/*.parquet",
            f"{tmp_path}/out/{{date:%Y-%m}}",
            "the same path on two dates (2026-11-01 and 2026-11-02)",
        ),
    ]:
        result = run_cli_captured(["convert", "--input", inp, "--output", out,
                                   "--dates", "2026-11-01..2026-11-02"])  # fmt: skip
        assert result.code == 2 and message in result.err, result.err
    with pytest.raises(SystemExit) as stop:  # a usage error, as argparse gives
        cli_main(["convert", "--input", one, "--output", str(tmp_path / "o"),
                  "--parallel-dates", "2"])  # fmt: skip
    assert stop.value.code == 2
    assert "--parallel-dates is for a backfill" in capsys.readouterr().err


def test_ctrl_c_stops_a_backfill_and_reports_it(tmp_path):
    for day in (1, 2, 3):
        _partition(tmp_path / "t", day, rows=200_000)
    proc = subprocess.Popen(
        [sys.executable, "-m", "pipeline", "convert", "--input",
         f"{tmp_path}/t/date={{date}}/*.parquet", "--output", f"{tmp_path}/out/{{date}}",
         "--dates", "2026-11-01..2026-11-03", "--batch-rows", "1000"],
        cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        start_new_session=True,
    )  # fmt: skip
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not (tmp_path / "out" / "2026-11-01").exists():
        time.sleep(0.01)
    os.killpg(proc.pid, signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 130, stderr
    summary = json.loads(stdout.splitlines()[-1])
    assert summary["status"] == "interrupted"
    statuses = [d.get("status") for d in summary["dates"]]
    assert statuses[1:] == [None, None]  # never started
    assert statuses[0] in ("interrupted", "succeeded"), summary["dates"][0].get("error")
    assert not (tmp_path / "out" / "2026-11-02").exists()
