"""`convert --incremental`: numbered spans of one dataset, the ledger of converted inputs
(pipeline/cli/incremental.py, pipeline/output/dataset/)."""

from __future__ import annotations

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
from stats_oracle import assert_same_statistics

from pipeline.output.dataset import Dataset, LedgerInput, SpanEntry, compare_inputs, read_dataset
from pipeline.reader.arrays import iter_batches


def _table(first: int, rows: int) -> pa.Table:
    """Rows with ids first.., zeros and nulls in `x`, a string column."""
    ids = np.arange(first, first + rows, dtype=np.int64)
    x = [None if i % 3 == 0 else float(i % 5) for i in ids]  # 0.0 (kept) and nulls (masked)
    return pa.table({"id": ids, "x": pa.array(x, pa.float64()), "s": [f"v{i}" for i in ids]})


def _write(folder: Path, name: str, first: int, rows: int = 40) -> pa.Table:
    folder.mkdir(parents=True, exist_ok=True)
    table = _table(first, rows)
    pq.write_table(table, folder / name)
    return table


def _run(tmp_path: Path, *flags: str, inputs: str = "in/*.parquet"):
    return run_cli_captured(
        [
            "convert",
            "--input",
            str(tmp_path / inputs),
            "--output",
            str(tmp_path / "ds"),
            "--incremental",
            *flags,
        ]
    )


def _summary(result) -> dict:
    return json.loads(result.out.strip().splitlines()[-1])


def _rows(output: Path) -> list[tuple]:
    """Every record of `output` (a dataset or one span) as (id, x or None, s), sorted."""
    out = []
    for b in iter_batches(str(output), batch_size=1000):
        present = b["x__present"].tolist()
        for i, x, p, s in zip(
            b["id"].tolist(), b["x"].tolist(), present, b["s"].tolist(), strict=True
        ):
            out.append((i, x if p else None, s.decode()))
    return sorted(out)


def _source(*tables: pa.Table) -> list[tuple]:
    rows = []
    for t in tables:
        rows += [(r["id"], r["x"], r["s"]) for r in t.to_pylist()]
    return sorted(rows)


def _listing(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


def test_each_run_converts_only_what_is_new_into_a_span(tmp_path):
    a = _write(tmp_path / "in", "a.parquet", 0)
    b = _write(tmp_path / "in", "b.parquet", 100)
    first = _run(tmp_path)
    assert first.code == 0, first.err
    line = _summary(first)
    assert (line["span"], line["rows_out"], line["spans"]) == (1, 80, [1])
    assert line["inputs"] == {"new": 2, "changed": 0, "gone": 0, "unchanged": 0}
    dataset = read_dataset(str(tmp_path / "ds"))
    assert [s.span for s in dataset.spans] == [1]
    ledger = {Path(i.path).name: i for i in dataset.spans[0].inputs}
    assert sorted(ledger) == ["a.parquet", "b.parquet"]
    stat = (tmp_path / "in" / "a.parquet").stat()
    assert (ledger["a.parquet"].bytes, ledger["a.parquet"].modified, ledger["a.parquet"].rows) == (
        stat.st_size,
        stat.st_mtime,
        40,
    )
    assert _rows(tmp_path / "ds") == _source(a, b)  # zeros stay 0.0, nulls stay null

    again = _run(tmp_path)  # nothing new: nothing written, exit 0
    assert again.code == 0, again.err
    assert _summary(again)["span"] is None and _summary(again)["rows_out"] == 0
    assert "nothing new" in again.out
    assert _listing(tmp_path / "ds") == _listing(tmp_path / "ds")  # still one span
    assert not (tmp_path / "ds" / "span-00002").exists()

    c = _write(tmp_path / "in", "c.parquet", 200, rows=7)
    third = _run(tmp_path)
    assert third.code == 0, third.err
    assert (_summary(third)["span"], _summary(third)["rows_out"]) == (2, 7)
    assert _summary(third)["dataset_rows"] == 87
    assert _rows(tmp_path / "ds" / "span-00002") == _source(c)  # one span alone
    assert _rows(tmp_path / "ds") == _source(a, b, c)  # the dataset as a whole, each row once
    assert [s.span for s in read_dataset(str(tmp_path / "ds")).spans] == [1, 2]


def test_tf_data_reads_the_dataset_and_one_span(tmp_path):
    import tensorflow as tf

    from pipeline.reader import feature_spec, load_dataset

    a = _write(tmp_path / "in", "a.parquet", 0, rows=30)
    assert _run(tmp_path).code == 0
    _write(tmp_path / "in", "b.parquet", 30, rows=12)  # x has nulls in both spans
    assert _run(tmp_path).code == 0
    batch = next(iter(load_dataset(str(tmp_path / "ds"), batch_size=100)))
    ids = batch["id"].numpy().tolist()
    assert sorted(ids) == list(range(42))
    x = dict(zip(ids, batch["x"].numpy().tolist(), strict=True))
    present = dict(zip(ids, batch["x__present"].numpy().tolist(), strict=True))
    assert all(present[i] == (i % 3 != 0) for i in ids)
    assert all(x[i] == float(i % 5) for i in ids if present[i])
    spec = feature_spec(str(tmp_path / "ds"))
    assert isinstance(spec["x"], tf.io.RaggedFeature)
    one = next(iter(load_dataset(str(tmp_path / "ds" / "span-00001"), batch_size=100)))
    assert sorted(one["id"].numpy().tolist()) == sorted(a.column("id").to_pylist())


def test_a_changed_input_stops_the_run_unless_reconverted(tmp_path):
    a = _write(tmp_path / "in", "a.parquet", 0)
    _write(tmp_path / "in", "b.parquet", 100)
    assert _run(tmp_path).code == 0
    c = _write(tmp_path / "in", "c.parquet", 200)
    assert _run(tmp_path).code == 0
    before = (tmp_path / "ds" / "dataset.json").read_bytes()
    listing = _listing(tmp_path / "ds")
    b2 = _write(tmp_path / "in", "b.parquet", 500, rows=25)  # rewritten with other rows
    stopped = _run(tmp_path)
    assert stopped.code == 2
    assert "b.parquet (span 1:" in stopped.err and "--reconvert-changed" in stopped.err
    assert (tmp_path / "ds" / "dataset.json").read_bytes() == before  # nothing written
    assert _listing(tmp_path / "ds") == listing

    redone = _run(tmp_path, "--reconvert-changed")
    assert redone.code == 0, redone.err
    line = _summary(redone)
    assert (line["span"], line["retired"], line["spans"]) == (3, [1], [2, 3])
    assert line["rows_out"] == 65  # a.parquet again with the new b.parquet
    assert not (tmp_path / "ds" / "span-00001").exists()  # retired, removed
    dataset = read_dataset(str(tmp_path / "ds"))
    assert [(s.span, s.retired_by) for s in dataset.retired] == [(1, 3)]
    assert _rows(tmp_path / "ds") == _source(a, b2, c)  # no row lost, none twice
    verify = run_cli_captured(["verify", str(tmp_path / "ds")])
    assert verify.code == 0, verify.out


def _statistics(path: Path):
    from tensorflow_metadata.proto.v0 import statistics_pb2

    out = statistics_pb2.DatasetFeatureStatisticsList()
    out.ParseFromString(path.read_bytes())
    return out


def _same_statistics(whole: Path, one_run: Path) -> None:
    """The dataset's statistics equal one run's over the same inputs: every count, extreme,
    quantile, histogram and top value; the mean and deviation up to the rounding of the sums."""
    assert_same_statistics(_statistics(whole), _statistics(one_run), 1e-9)


def _whole(ds: Path) -> Path:
    found = json.loads((ds / "dataset.json").read_text(encoding="utf-8"))["statistics"]
    return ds / found["dir"] / "train" / "FeatureStats.pb"


def test_the_dataset_statistics_are_one_runs_over_its_inputs(tmp_path):
    """Each commit merges the new span's saved accumulators into the dataset's statistics: the
    same as one run over every live span's inputs, also once a span is retired."""
    ds = tmp_path / "ds"
    _write(tmp_path / "in", "a.parquet", 0, rows=3000)
    _write(tmp_path / "in", "b.parquet", 5000, rows=2500)
    assert _run(tmp_path).code == 0
    _write(tmp_path / "in", "c.parquet", 9000, rows=1200)
    assert _run(tmp_path).code == 0
    one = tmp_path / "one"
    plain = ["convert", "--input", str(tmp_path / "in" / "*.parquet"), "--overwrite"]
    assert run_cli_captured([*plain, "--output", str(one)]).code == 0
    assert _whole(ds) == ds / "statistics" / "after-span-00002" / "train" / "FeatureStats.pb"
    _same_statistics(_whole(ds), one / "statistics" / "train" / "FeatureStats.pb")
    assert _statistics(_whole(ds)).datasets[0].num_examples == 6700
    report = run_cli_captured(["report", str(ds)])
    assert report.code == 0, report.err
    assert "statistics: train)" in report.out  # the whole, not the spans side by side
    assert run_cli_captured(["verify", str(ds)]).code == 0
    saved = _whole(ds).read_bytes()
    _whole(ds).write_bytes(
        (ds / "span-00002" / "statistics" / "train" / "FeatureStats.pb").read_bytes()
    )
    wrong = run_cli_captured(["verify", str(ds)])
    assert (
        wrong.code == 1
        and "the dataset's statistics count 1200 rows of train, its spans hold 6700" in wrong.out
    )
    _whole(ds).write_bytes(saved)

    _write(tmp_path / "in", "b.parquet", 20_000, rows=700)  # rewritten: span 1 retired
    assert _run(tmp_path, "--reconvert-changed").code == 0
    assert run_cli_captured([*plain, "--output", str(one)]).code == 0
    assert sorted(p.name for p in (ds / "statistics").iterdir()) == ["after-span-00003"]
    _same_statistics(_whole(ds), one / "statistics" / "train" / "FeatureStats.pb")
    assert _statistics(_whole(ds)).datasets[0].num_examples == 4900

    ledger = json.loads((ds / "dataset.json").read_text(encoding="utf-8"))
    ledger["statistics"]["dir"] = "../elsewhere"  # edited by hand: never followed
    (ds / "dataset.json").write_text(json.dumps(ledger), encoding="utf-8")
    refused = run_cli_captured(["inspect", str(ds)])
    assert refused.code != 0 and "'../elsewhere'" in refused.err + refused.out


def test_a_span_without_accumulators_leaves_the_spans_side_by_side(tmp_path):
    """A span whose accumulators are damaged (or were never saved): no statistics of the whole
    are made up, a warning names the file, and the report shows each span's."""
    ds = tmp_path / "ds"
    _write(tmp_path / "in", "a.parquet", 0)
    assert _run(tmp_path).code == 0
    (ds / "span-00001" / "statistics" / "train" / "sketches.npz").write_bytes(b"damaged")
    ledger = json.loads((ds / "dataset.json").read_text(encoding="utf-8"))
    del ledger["statistics"]
    (ds / "dataset.json").write_text(json.dumps(ledger), encoding="utf-8")
    _write(tmp_path / "in", "b.parquet", 100, rows=9)
    second = _run(tmp_path)
    assert second.code == 0, second.err
    assert "warning: no statistics of the whole dataset:" in second.err
    assert "span-00001/statistics/train/sketches.npz: not a statistics accumulator" in second.err
    assert "statistics" not in json.loads((ds / "dataset.json").read_text(encoding="utf-8"))
    report = run_cli_captured(["report", str(ds)])
    assert "statistics: train (span-00001), train (span-00002)" in report.out


def test_overwrite_converts_every_input_into_one_new_span(tmp_path):
    a = _write(tmp_path / "in", "a.parquet", 0)
    assert _run(tmp_path).code == 0
    b = _write(tmp_path / "in", "b.parquet", 100)
    assert _run(tmp_path).code == 0
    result = _run(tmp_path, "--overwrite")
    assert result.code == 0, result.err
    assert (_summary(result)["span"], _summary(result)["retired"]) == (3, [1, 2])
    assert sorted(p.name for p in (tmp_path / "ds").iterdir()) == [
        "dataset.json",
        "span-00003",
        "statistics",
    ]
    assert [p.name for p in (tmp_path / "ds" / "statistics").iterdir()] == ["after-span-00003"]
    assert _rows(tmp_path / "ds") == _source(a, b)


def test_a_gone_input_is_said_and_its_rows_stay(tmp_path):
    a = _write(tmp_path / "in", "a.parquet", 0)
    b = _write(tmp_path / "in", "b.parquet", 100)
    assert _run(tmp_path).code == 0
    (tmp_path / "in" / "b.parquet").unlink()
    result = _run(tmp_path)
    assert result.code == 0
    assert "b.parquet (span 1) is no longer found; its rows stay in the dataset" in result.err
    assert _summary(result)["inputs"]["gone"] == 1
    assert _rows(tmp_path / "ds") == _source(a, b)


def test_the_drift_gate_runs_between_spans(tmp_path):
    _write(tmp_path / "in", "a.parquet", 0)
    assert _run(tmp_path).code == 0
    before = _listing(tmp_path / "ds")
    pq.write_table(pa.table({"id": ["x"], "x": [1.0], "s": ["v"]}), tmp_path / "in" / "b.parquet")
    changed = _run(tmp_path)
    assert changed.code == 2
    assert "column 'id' changed type" in changed.err and "span-00001" in changed.err
    assert _listing(tmp_path / "ds") == before
    pq.write_table(
        pa.table({"id": [1], "x": [1.0], "s": ["v"], "extra": [2]}), tmp_path / "in" / "b.parquet"
    )
    added = _run(tmp_path)
    assert added.code == 2
    assert "['extra'] are new against the dataset's span 1" in added.err
    assert _listing(tmp_path / "ds") == before


def test_the_first_spans_fitted_transforms_are_reused(tmp_path):
    config = tmp_path / "job.yaml"
    config.write_text(
        "transforms:\n  - fill_missing: {column: x, value: 0.0}\n  - zscore: {column: x}\n",
        encoding="utf-8",
    )
    _write(tmp_path / "in", "a.parquet", 0, rows=60)
    assert _run(tmp_path, "--config", str(config)).code == 0
    pq.write_table(
        pa.table({"id": [1000, 1001], "x": [100.0, 300.0], "s": ["p", "q"]}),
        tmp_path / "in" / "b.parquet",
    )
    assert _run(tmp_path, "--config", str(config)).code == 0
    dataset = read_dataset(str(tmp_path / "ds"))
    assert [s.transform for s in dataset.spans] == ["fitted", "reused"]
    fitted = [
        (tmp_path / "ds" / s / "transform" / "statistics.json").read_text()
        for s in ("span-00001", "span-00002")
    ]
    stats = json.loads(fitted[0])["analyzers"][0]
    assert fitted[1] == fitted[0]  # the same fit, not one of span 2's two rows
    mean, std = stats["mean"], stats["std"]
    assert stats["count"] == 60
    got = [v for b in iter_batches(str(tmp_path / "ds" / "span-00002")) for v in b["x"].tolist()]
    assert sorted(got) == pytest.approx(sorted([(100.0 - mean) / std, (300.0 - mean) / std]))
    pq.write_table(pa.table({"id": [2000], "x": [7.0], "s": ["r"]}), tmp_path / "in" / "c.parquet")
    refit = _run(tmp_path, "--config", str(config), "--refit")
    assert refit.code == 0, refit.err
    assert read_dataset(str(tmp_path / "ds")).spans[-1].transform == "fitted"


def test_a_killed_span_leaves_the_dataset_readable_and_the_next_run_finishes_it(tmp_path):
    a = _write(tmp_path / "in", "a.parquet", 0)
    assert _run(tmp_path).code == 0
    folder = tmp_path / "in"
    big = pa.table(
        {
            "id": np.arange(10**6, 10**6 + 2_000_000, dtype=np.int64),
            "x": np.ones(2_000_000),
            "s": ["w"] * 2_000_000,
        }
    )
    pq.write_table(big, folder / "big.parquet", row_group_size=50_000)
    span = tmp_path / "ds" / "span-00002"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "pipeline",
            "convert",
            "--input",
            str(folder / "*.parquet"),
            "--output",
            str(tmp_path / "ds"),
            "--incremental",
            "--workers",
            "1",
        ],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and proc.poll() is None:
            if span.exists() and any(p.name != "_LEASE" for p in span.rglob("*")):
                break
            time.sleep(0.01)
        assert proc.poll() is None, "the run ended before it wrote anything"
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(30)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert not (tmp_path / "ds" / "span-00002" / "manifest.json").exists()
    assert _rows(tmp_path / "ds") == _source(a)  # the committed span, readable
    assert [s.span for s in read_dataset(str(tmp_path / "ds")).spans] == [1]
    rerun = _run(tmp_path)
    assert rerun.code == 0, rerun.err
    assert "removed span-00002: not committed to the dataset" in rerun.err
    assert _summary(rerun)["span"] == 2  # the span the killed run did not finish, done again
    ids = [i for i, _, _ in _rows(tmp_path / "ds")]
    assert len(ids) == 40 + 2_000_000 and len(set(ids)) == len(ids)
    assert not (tmp_path / "ds" / "_LEASE").exists()


def test_a_held_dataset_lease_refuses_a_second_run(tmp_path):
    _write(tmp_path / "in", "a.parquet", 0)
    (tmp_path / "ds").mkdir()
    lease = {
        "run_id": "other",
        "host": "another-host",
        "pid": 1,
        "started": "2026-12-01T00:00:00+00:00",
        "output": str(tmp_path / "ds"),
    }
    (tmp_path / "ds" / "_LEASE").write_text(json.dumps(lease), encoding="utf-8")
    result = _run(tmp_path)
    assert result.code == 2
    assert "another run holds the output: run other (host another-host" in result.err
    assert json.loads((tmp_path / "ds" / "_LEASE").read_text())["run_id"] == "other"  # kept
    assert sorted(p.name for p in (tmp_path / "ds").iterdir()) == ["_LEASE"]


def test_two_incremental_runs_at_once_convert_each_input_once(tmp_path):
    tables = [_write(tmp_path / "in", f"p{i}.parquet", 100 * i) for i in range(4)]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    cmd = [
        sys.executable,
        "-m",
        "pipeline",
        "convert",
        "--input",
        str(tmp_path / "in" / "*"),
        "--output",
        str(tmp_path / "ds"),
        "--incremental",
        "--workers",
        "1",
    ]
    procs = [
        subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for _ in range(2)
    ]
    outcomes = [(p.wait(180), *p.communicate()) for p in procs]
    codes = sorted(code for code, _, _ in outcomes)
    assert codes in ([0, 0], [0, 2]), outcomes
    for code, _, err in outcomes:
        if code == 2:
            assert "another run holds the output" in err
    assert _rows(tmp_path / "ds") == _source(*tables)  # each input converted once
    assert len(read_dataset(str(tmp_path / "ds")).spans) == 1


def test_a_ledger_pointing_outside_the_dataset_is_refused(tmp_path):
    _write(tmp_path / "in", "a.parquet", 0)
    assert _run(tmp_path).code == 0
    path = tmp_path / "ds" / "dataset.json"
    data = json.loads(path.read_text())
    data["spans"][0]["dir"] = "../elsewhere"
    path.write_text(json.dumps(data), encoding="utf-8")
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "keep.txt").write_text("mine", encoding="utf-8")
    _write(tmp_path / "in", "b.parquet", 100)
    result = _run(tmp_path)
    assert result.code == 2
    assert "span 1: its directory is '../elsewhere'" in result.err
    with pytest.raises(ValueError, match=r"its directory is '\.\./elsewhere'"):
        list(iter_batches(str(tmp_path / "ds")))
    verify = run_cli_captured(["verify", str(tmp_path / "ds")])
    assert verify.code == 2 and "../elsewhere" in verify.err
    assert (tmp_path / "elsewhere" / "keep.txt").read_text() == "mine"
    assert (tmp_path / "ds" / "span-00001" / "manifest.json").exists()


def test_a_dataset_and_a_plain_output_are_never_mixed(tmp_path):
    _write(tmp_path / "in", "a.parquet", 0)
    assert _run(tmp_path).code == 0
    for flags in ([], ["--overwrite"]):
        plain = run_cli_captured(
            [
                "convert",
                "--input",
                str(tmp_path / "in" / "*.parquet"),
                "--output",
                str(tmp_path / "ds"),
                *flags,
            ]
        )
        assert plain.code == 2
        assert "holds an incremental dataset" in plain.err
    assert (
        run_cli_captured(
            [
                "convert",
                "--input",
                str(tmp_path / "in" / "*.parquet"),
                "--output",
                str(tmp_path / "plain"),
            ]
        ).code
        == 0
    )
    into_plain = run_cli_captured(
        [
            "convert",
            "--input",
            str(tmp_path / "in" / "*.parquet"),
            "--output",
            str(tmp_path / "plain"),
            "--incremental",
        ]
    )
    assert into_plain.code == 2
    assert "holds a complete output of a run without --incremental" in into_plain.err
    with pytest.raises(SystemExit) as exit_info:
        run_cli_captured(["convert", "--input", "x", "--output", "y", "--refit"])
    assert exit_info.value.code == 2


def test_verify_inspect_and_report_read_the_dataset(tmp_path):
    _write(tmp_path / "in", "a.parquet", 0)
    assert _run(tmp_path).code == 0
    _write(tmp_path / "in", "b.parquet", 100, rows=9)
    assert _run(tmp_path).code == 0
    ds = tmp_path / "ds"
    verify = run_cli_captured(["verify", str(ds), "--source"])
    assert verify.code == 0, verify.out
    line = json.loads(verify.out.strip().splitlines()[-1])
    assert (line["rows_out"], line["records_read"]) == (49, {"train": 49})
    assert "spans [1, 2]" in verify.out
    inspect = run_cli_captured(["inspect", str(ds), "-n", "2"])
    summary = json.loads(inspect.out)["manifest"]
    assert [(s["span"], s["rows"], s["inputs"]) for s in summary["spans"]] == [
        (1, 40, 1),
        (2, 9, 1),
    ]
    assert summary["rows"] == 49 and summary["features"]["x"]["null_count"] == 14 + 3
    report = run_cli_captured(["report", str(ds)])
    assert report.code == 0, report.err
    assert "statistics: train)" in report.out  # the whole dataset's (merged at each commit)
    (ds / "span-00007").mkdir()  # a leftover of a run that did not finish
    (ds / "dataset.json.tmp-123").write_text("{", encoding="utf-8")  # a commit not renamed
    stale = run_cli_captured(["verify", str(ds)])
    assert (
        stale.code == 1 and "span-00007: a span directory dataset.json does not list" in stale.out
    )
    rerun = _run(tmp_path)
    assert "removed span-00007: not committed to the dataset" in rerun.err
    assert not (ds / "span-00007").exists()
    assert sorted(p.name for p in ds.iterdir()) == [
        "dataset.json",
        "report.html",
        "span-00001",
        "span-00002",
        "statistics",
    ]


def test_csv_inputs_and_the_beam_engine(tmp_path):
    folder = tmp_path / "in"
    folder.mkdir()
    (folder / "a.csv").write_text("id,v\n1,0\n2,\n3,5\n", encoding="utf-8")
    first = _run(tmp_path, "--engine", "beam", inputs="in/*.csv")
    assert first.code == 0, first.err
    (folder / "b.csv").write_text("id,v\n4,7\n", encoding="utf-8")
    second = _run(tmp_path, inputs="in/*.csv")
    assert second.code == 0, second.err
    dataset = read_dataset(str(tmp_path / "ds"))
    assert [[(Path(i.path).name, i.rows) for i in s.inputs] for s in dataset.spans] == [
        [("a.csv", None)],
        [("b.csv", None)],
    ]  # CSV rows are counted per span, not per file
    got = sorted(
        (int(b_id), v)
        for b in iter_batches(str(tmp_path / "ds"))
        for b_id, v in zip(b["id"].tolist(), b["v"].tolist(), strict=True)
    )
    assert [i for i, _ in got] == [1, 2, 3, 4]
    assert [s.rows for s in dataset.spans] == [3, 1]
    whole = _statistics(_whole(tmp_path / "ds")).datasets[0]  # Beam's span and in-process's
    v = next(f for f in whole.features if f.path.step[0] == "v").num_stats
    assert (whole.num_examples, v.common_stats.num_non_missing, v.num_zeros) == (4, 3, 1)
    assert (v.min, v.max, v.mean) == (0, 7, 4)


def test_compare_inputs():
    def entry(path, size, modified):
        return LedgerInput(path, size, modified)

    dataset = Dataset(
        (
            SpanEntry(1, "t", 2, 0, (entry("a", 1, 1.0), entry("b", 2, 2.0))),
            SpanEntry(2, "t", 1, 0, (entry("c", 3, 3.0),)),
        )
    )
    changes = compare_inputs(dataset, [entry("a", 1, 1.0), entry("b", 2, 9.0), entry("d", 4, 4.0)])
    assert [i.path for i in changes.new] == ["d"]
    assert [(then.modified, now.modified, span) for then, now, span in changes.changed] == [
        (2.0, 9.0, 1)
    ]
    assert [(i.path, span) for i, span in changes.gone] == [("c", 2)]
    assert changes.unchanged == 1
    assert dataset.next_span == 3
    retired = dataset.with_span(SpanEntry(3, "t", 5, 0, ()), retire=[1])
    assert retired.numbers == [2, 3] and retired.retired[0].retired_by == 3
    assert retired.next_span == 4
    again = Dataset.from_json(json.loads(json.dumps(retired.to_json())), "dataset.json")
    assert again.to_json() == retired.to_json()


def test_a_backfill_adds_one_span_per_date_and_skips_dates_with_nothing_new(tmp_path):
    tables = {
        day: _write(tmp_path / "t" / f"date=2026-11-0{day}", "part.parquet", 100 * day)
        for day in (1, 2, 3)
    }
    args = [
        "convert",
        "--input",
        str(tmp_path / "t" / "date={date}" / "*.parquet"),
        "--output",
        str(tmp_path / "ds"),
        "--incremental",
    ]
    first = run_cli_captured([*args, "--dates", "2026-11-01..2026-11-02"])
    assert first.code == 0, first.err
    dataset = read_dataset(str(tmp_path / "ds"))
    assert [(s.span, [Path(i.path).parent.name for i in s.inputs]) for s in dataset.spans] == [
        (1, ["date=2026-11-01"]),
        (2, ["date=2026-11-02"]),
    ]
    again = run_cli_captured([*args, "--dates", "2026-11-01..2026-11-03"])
    assert again.code == 0, again.err
    line = json.loads(again.out.strip().splitlines()[-1])
    assert [(d["status"], d.get("span")) for d in line["dates"]] == [
        ("skipped", None),
        ("skipped", None),
        ("succeeded", 3),
    ]
    ids = [i for i, _, _ in _rows(tmp_path / "ds")]
    assert sorted(ids) == sorted(t for tb in tables.values() for t in tb.column("id").to_pylist())
    assert (
        run_cli_captured([*args, "--dates", "2026-11-01..2026-11-03", "--parallel-dates", "2"]).code
        == 2
    )


def test_plan_says_what_the_next_span_would_convert(tmp_path):
    _write(tmp_path / "in", "a.parquet", 0)
    assert _run(tmp_path).code == 0
    args = [
        "plan",
        "--input",
        str(tmp_path / "in" / "*.parquet"),
        "--output",
        str(tmp_path / "ds"),
        "--incremental",
    ]
    nothing = run_cli_captured(args)
    assert nothing.code == 0 and "nothing new (1 input(s), all in spans [1])" in nothing.out
    _write(tmp_path / "in", "b.parquet", 100, rows=9)
    planned = run_cli_captured([*args, "--json"])
    assert planned.code == 0, planned.err
    summary = json.loads(planned.out)
    assert summary["incremental"]["span"] == 2
    assert summary["incremental"]["inputs"] == {"new": 1, "changed": 0, "gone": 0, "unchanged": 1}
    assert summary["read"]["files"] == 1 and summary["read"]["rows"] == 9
    assert sorted(p.name for p in (tmp_path / "ds").iterdir()) == [
        "dataset.json",
        "span-00001",
        "statistics",
    ]  # plan wrote nothing


def test_a_new_csv_reads_its_columns_as_the_first_span_did(tmp_path):
    folder = tmp_path / "in"
    folder.mkdir()
    (folder / "a.csv").write_text("id,v,note\n1,2.5,x\n2,0,y\n", encoding="utf-8")
    assert _run(tmp_path, inputs="in/*.csv").code == 0
    (folder / "b.csv").write_text("id,v,note\n3,,\n4,,\n", encoding="utf-8")  # v, note empty
    second = _run(tmp_path, inputs="in/*.csv")
    assert second.code == 0, second.err  # not a drift of v to text: typed as in span 1
    manifest = json.loads((tmp_path / "ds" / "span-00002" / "manifest.json").read_text())
    assert manifest["config"]["csv"]["column_types"] == {
        "id": "int64",
        "v": "double",
        "note": "string",
    }
    got = {}
    for b in iter_batches(str(tmp_path / "ds")):
        for i, v, p in zip(
            b["id"].tolist(), b["v"].tolist(), b["v__present"].tolist(), strict=True
        ):
            got[i] = v if p else None
    assert got == {1: 2.5, 2: 0.0, 3: None, 4: None}


@pytest.mark.parametrize(
    "entry, message",
    [
        ({"spans": [1], "dir": "statistics/after-span-00001", "splits": ["../x"]}, "split names"),
        ({"spans": [1], "dir": "/elsewhere", "splits": ["train"]}, "'/elsewhere'"),
        ({"spans": [2], "dir": "statistics/after-span-00001", "splits": ["train"]}, "after-span"),
        ({"spans": ["x"], "dir": "statistics/after-span-00001", "splits": []}, "not a number"),
    ],
)
def test_a_hand_edited_statistics_entry_is_refused(entry, message):
    data = {"dataset_version": 1, "spans": [], "statistics": entry}
    with pytest.raises(ValueError, match=message):
        Dataset.from_json(data, "ds/dataset.json")
