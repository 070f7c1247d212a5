"""Progress of a local run: the writers' reports, the line, the ETA, and the CLI on a terminal
(a pseudo-terminal), off a terminal, with --log-format json and with --quiet."""

from __future__ import annotations

import gzip
import itertools
import json
import os
import pty
import re
import select
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from apache_beam.options.pipeline_options import PipelineOptions
from conftest import REPO, SAMPLE_CSV, SAMPLE_PARQUET, read_manifest

from pipeline.cli.convert import progress_watch
from pipeline.cli.joblog import JobLog, JsonLines
from pipeline.cli.progress import ProgressWatch, Snapshot, planned_rows, progress_line
from pipeline.engines.beam.engine import progress_shown
from pipeline.job.config import load_config
from pipeline.job.plan import plan_job
from transforms.write.files import BlockFile
from transforms.write.progress import SinkProgress, SplitProgress, read_progress

ENV = {
    **os.environ,
    "TF_CPP_MIN_LOG_LEVEL": "2",
    "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep),
}


def shard_bytes(out: Path) -> dict[str, int]:
    manifest = read_manifest(out)
    return {
        name: sum((out / f).stat().st_size for f in split["files"])
        for name, split in manifest["splits"].items()
    }


def split_rows(out: Path) -> dict[str, int]:
    return {name: split["rows"] for name, split in read_manifest(out)["splits"].items()}


# ----------------------------------------------------------------------------- the reports


def test_reports_add_up_across_writers_and_survive_a_torn_read(tmp_path):
    reports = str(tmp_path / "reports")
    a = SinkProgress(reports, "train", interval=3600)
    b = SinkProgress(reports, "train", interval=3600)
    c = SinkProgress(reports, "test", interval=0)  # writes on every add
    a.add(10, 100)
    a.add(5, 50)
    assert read_progress(reports) == {}  # nothing reported yet
    a.flush()
    b.add(1, 7)
    b.flush()
    c.add(3, 30)
    seen: dict = {}
    assert read_progress(reports, seen) == {
        "train": SplitProgress(16, 157),
        "test": SplitProgress(3, 30),
    }
    for path in Path(reports).glob("test-*.json"):
        path.write_text('{"split": "te', encoding="utf-8")  # caught while it is rewritten
    assert read_progress(reports, seen)["test"] == SplitProgress(3, 30)  # the last good value
    assert read_progress(str(tmp_path / "none")) == {}


def test_block_file_tells_each_block_and_not_an_appended_file(tmp_path):
    told = []
    first = BlockFile(str(tmp_path / "a"), "gzip", None, (0, 0), "train")
    first.write(np.frombuffer(b"x" * 40, np.uint8), 4)
    part = first.close()
    out = BlockFile(
        str(tmp_path / "b"),
        "gzip",
        gzip.compress,
        (0, 1),
        "train",
        lambda r, n: told.append((r, n)),
    )
    out.write(np.frombuffer(b"y" * 1000, np.uint8), 10)
    out.append(part)
    done = out.close()
    assert [r for r, _ in told] == [10]
    assert told[0][1] == done.bytes - part.bytes == (tmp_path / "b").stat().st_size - 40


# ----------------------------------------------------------------------------- the line


def test_line_rate_share_and_eta():
    snap = Snapshot(
        {"train": SplitProgress(6_000, 3 << 20), "test": SplitProgress(2_000, 1 << 20)},
        elapsed=4.0,
        planned=10_000,
        exact=True,
    )
    assert snap.rate == 2_000 and snap.fraction == 0.8 and snap.eta == 1.0
    line = progress_line(snap, ("train", "test"))
    assert line == (
        "train 6,000 rows 3.0 MiB | test 2,000 rows 1.0 MiB | 8,000 rows (80%) 2,000 rows/s "
        "1.0 MiB/s | ETA 0:00:01"
    )
    rough = Snapshot({"train": SplitProgress(500, 5_000)}, 10.0, planned=1_000, exact=False)
    assert (
        progress_line(rough)
        == "train 500 rows 5 KiB | 500 rows (~50%) 50 rows/s 500 B/s | ETA ~0:00:10"
    )
    assert progress_line(Snapshot({"t": SplitProgress(1, 159_744)}, 1.0)).startswith(
        "t 1 rows 156 KiB"
    )
    assert progress_line(Snapshot({"t": SplitProgress(1, 3 << 30)}, 1.0)).startswith(
        "t 1 rows 3.00 GiB"
    )
    # no row yet, or past an estimate that was short: no ETA, the elapsed time
    assert Snapshot({}, 3.0, 1_000).eta is None
    past = Snapshot({"train": SplitProgress(1_500, 0)}, 3725.0, 1_000, exact=False)
    assert past.fraction == 1.0 and progress_line(past).endswith("| 1:02:05")
    # the last line of a finished job: its counts and time, not a share of an estimate
    assert (
        progress_line(rough, done=True)
        == "train 500 rows 5 KiB | 500 rows 50 rows/s 500 B/s | 0:00:10"
    )
    assert progress_line(snap, ("train", "test"), done=True).endswith(
        "8,000 rows (80%) 2,000 rows/s 1.0 MiB/s | 0:00:04"
    )


def test_planned_rows_exact_for_parquet_estimated_for_csv(tmp_path):
    exact = plan_job(load_config(None, {"input": [str(SAMPLE_PARQUET)], "output": "o"}))
    assert planned_rows(exact) == (2000, True)
    csv = plan_job(load_config(None, {"input": [str(SAMPLE_CSV)], "output": "o"}))
    rows, is_exact = planned_rows(csv)
    assert not is_exact and 1_800 <= rows <= 2_200


def test_watch_writes_a_line_every_interval_and_a_last_one(tmp_path, capsys):
    ticks = itertools.count()  # one second per reading of the clock
    watch = ProgressWatch(
        str(tmp_path), "lines", JobLog(), (40, True), ("train",), interval=0.01,
        clock=lambda: float(next(ticks)),
    )  # fmt: skip
    seen = ""
    with watch:
        SinkProgress(watch.directory, "train", interval=0).add(40, 4096)
        for _ in range(2000):  # the thread's lines keep coming
            seen += capsys.readouterr().err
            if seen.count("train 40 rows") >= 2:
                break
            time.sleep(0.01)
    lines = (seen + capsys.readouterr().err).splitlines()
    assert len(lines) >= 3
    assert all(line.startswith("tfrecord-etl: progress: train ") for line in lines)
    assert lines[-1].startswith("tfrecord-etl: progress: train 40 rows 4 KiB | 40 rows (100%)")
    assert not Path(watch.directory).exists()  # the reports are removed at the end


def test_json_lines_wraps_every_other_line():
    class Sink:
        text = ""

        def write(self, s: str) -> None:
            self.text += s

        def flush(self) -> None:
            pass

    sink = Sink()
    lines = JsonLines(sink)
    print("tfrecord-etl: error: no file matches x.csv", file=lines)
    print('{"event": "x"}', file=lines)
    lines.write("partial")
    lines.flush()
    parsed = [json.loads(line) for line in sink.text.splitlines()]
    assert parsed[0]["level"] == "error" and parsed[0]["message"].endswith("no file matches x.csv")
    assert parsed[1] == {"event": "x"}
    assert parsed[2]["message"] == "partial" and parsed[2]["level"] == "info"


# ----------------------------------------------------------------------------- the CLI


def test_progress_on_a_terminal(tmp_path):
    """stderr on a pseudo-terminal: the line is redrawn in place (\\r) and ends with the run's
    counts; stdout (a pipe) still ends with the JSON summary."""
    out = tmp_path / "out"
    master, slave = pty.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-m", "pipeline", "convert", "--input", str(SAMPLE_PARQUET),
         "--output", str(out), "--batch-rows", "250"],
        stdout=subprocess.PIPE, stderr=slave, cwd=tmp_path, env=ENV,
    )  # fmt: skip
    os.close(slave)
    seen = b""
    while True:
        ready, _, _ = select.select([master], [], [], 120)
        if not ready:
            break
        try:
            chunk = os.read(master, 65536)
        except OSError:  # the child closed the terminal
            break
        if not chunk:
            break
        seen += chunk
    stdout, _ = proc.communicate(timeout=120)
    os.close(master)
    assert proc.returncode == 0, seen.decode(errors="replace")
    text = seen.decode()
    assert "\r" in text and "\x1b[K" in text
    last = [part for part in re.split(r"[\r\n]", text) if "rows/s" in part][-1]
    assert re.match(r"train 2,000 rows \d+ KiB \| 2,000 rows \(100%\) [\d,]+ rows/s", last), last
    assert json.loads(stdout.decode().splitlines()[-1])["rows_out"] == 2000


def test_progress_lines_off_a_terminal_and_json(tmp_path, run_cli_captured):
    """Off a terminal: plain lines; --log-format json: every stderr line is a JSON object, the
    last progress object holds the final rows and bytes of each split."""
    table = pa.table({"id": np.arange(3000, dtype=np.int64), "x": np.linspace(0, 1, 3000)})
    pq.write_table(table, tmp_path / "t.parquet", row_group_size=1000)
    config = tmp_path / "splits.yaml"
    config.write_text("splits: {train: 3, test: 1}\n", encoding="utf-8")
    base = ["convert", "--input", tmp_path / "t.parquet", "--config", config]

    plain = run_cli_captured([*base, "--output", tmp_path / "plain"])
    assert plain.code == 0, plain.err
    rows = split_rows(tmp_path / "plain")
    last = [line for line in plain.err.splitlines() if "progress:" in line][-1]
    assert re.match(
        rf"tfrecord-etl: progress: train {rows['train']:,} rows \d+ KiB \| "
        rf"test {rows['test']:,} rows \d+ KiB \| 3,000 rows \(100%\)",
        last,
    ), last

    out = tmp_path / "json"
    result = run_cli_captured([*base, "--output", out, "--log-format", "json", "--num-shards", "2"])
    assert result.code == 0, result.err
    events = [json.loads(line) for line in result.err.splitlines()]  # each line parses
    assert all({"time", "level", "event"} <= set(e) for e in events)
    final = [e for e in events if e["event"] == "progress"][-1]
    assert final["done"] and final["planned_rows"] == 3000 and final["planned_exact"]
    sizes = shard_bytes(out)
    assert final["splits"] == {
        name: {"rows": split_rows(out)[name], "bytes": sizes[name]} for name in ("train", "test")
    }
    assert final["rows"] == 3000 and final["bytes"] == sum(sizes.values())
    assert json.loads(result.out.splitlines()[-1])["rows_out"] == 3000
    assert not list(out.glob("beam-temp-*"))


def test_quiet_prints_only_the_summary(tmp_path, run_cli_captured):
    out = tmp_path / "out"
    result = run_cli_captured(["convert", "--input", SAMPLE_PARQUET, "--output", out, "--quiet"])
    assert result.code == 0 and result.err == ""
    lines = result.out.splitlines()
    assert lines[0].startswith("rows: 2000  shards: 1") and lines[1].startswith("output: ")
    assert len(lines) == 3 and json.loads(lines[2])["status"] == "succeeded"
    assert not list(out.glob("beam-temp-*"))


def _progress(plan, beam_args, log):
    """The progress display convert gives a Beam run of `plan` with `beam_args`."""
    options = PipelineOptions(beam_args)
    return progress_watch(plan, log, progress_shown(options, False, plan.config.sink))


def test_no_progress_where_nothing_reports_it(tmp_path):
    """Beam's tfrecordio sink reports nothing, and a Dataflow job is followed by its state."""
    flags = {"input": [str(SAMPLE_PARQUET)], "output": str(tmp_path / "o")}
    local = ["--runner=FnApiRunner"]
    plan = plan_job(load_config(None, flags))
    assert _progress(plan, local, JobLog()).mode == "lines"  # stderr is not a terminal
    assert _progress(plan, local, JobLog("json")).mode == "json"
    assert _progress(plan, local, JobLog(quiet=True)).directory is None
    dataflow = ["--runner=DataflowRunner"]
    assert _progress(plan, dataflow, JobLog()).mode is None
    tfrecordio = plan_job(load_config(None, {**flags, "sink": "tfrecordio"}))
    assert _progress(tfrecordio, local, JobLog()).mode is None
