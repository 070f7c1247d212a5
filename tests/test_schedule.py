"""Scheduled runs: {date} templates in input and output paths, the exit codes, and the JSON
summary that is the last line the command prints."""

from __future__ import annotations

import datetime
import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import REPO, read_manifest, read_output, run_cli_captured

from pipeline.cli.summary import run_summary, split_counts
from pipeline.job.config import ConfigError, JobConfig, load_config
from pipeline.job.dates import apply_date, parse_date, render_date
from pipeline.output.manifest import Manifest

DAY = datetime.date(2026, 12, 1)
EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2


def last_json(out: str) -> dict:
    """The summary: the last line of stdout, one JSON object."""
    lines = out.strip().splitlines()
    assert lines, "no output"
    return json.loads(lines[-1])


# ----------------------------------------------------------------------------- templates


@pytest.mark.parametrize(
    ("template", "expected"),
    [
        ("gs://b/events/dt={date}/*.parquet", "gs://b/events/dt=2026-12-01/*.parquet"),
        ("gs://b/{date:%Y/%m/%d}/part-*.csv", "gs://b/2026/12/01/part-*.csv"),
        ("out/{date:%Y%m%d}/{date}", "out/20261201/2026-12-01"),
        ("data/{a,b}/{other}.parquet", "data/{a,b}/{other}.parquet"),  # other braces stay
    ],
)
def test_render_date(template, expected):
    assert render_date(template, DAY) == expected


def test_parse_date():
    assert parse_date("2026-12-01") == DAY
    for bad in ("2026-13-01", "01/12/2026", "yesterday"):
        with pytest.raises(ConfigError, match=r"--date .*YYYY-MM-DD"):
            parse_date(bad)


def test_apply_date_fills_inputs_and_output():
    config = JobConfig(inputs=("in/dt={date}/*.parquet", "static.parquet"), output="o/{date}")
    dated = apply_date(config, DAY)
    assert dated.inputs == ("in/dt=2026-12-01/*.parquet", "static.parquet")
    assert dated.output == "o/2026-12-01"
    assert apply_date(JobConfig(inputs=("a.parquet",), output="o"), None).output == "o"


def test_apply_date_errors():
    with pytest.raises(ConfigError, match=r"in/\{date\}\.parquet: .*pass --date"):
        apply_date(JobConfig(inputs=("in/{date}.parquet",), output="o"), None)
    with pytest.raises(ConfigError, match=r"--date is given but no .* has \{date\}"):
        apply_date(JobConfig(inputs=("a.parquet",), output="o"), DAY)


def test_dataflow_config_is_valid_and_dated():
    config = apply_date(load_config(str(REPO / "configs" / "dataflow.yaml"), {}), DAY)
    assert config.inputs == ("gs://example-bucket/events/dt=2026-12-01/*.parquet",)
    assert config.output == "gs://example-bucket/tfrecords/events/dt=2026-12-01"
    assert config.num_shards == 0


def test_summary_counts_from_the_manifest():
    data = {
        "manifest_version": 1,
        "features": [],
        "splits": {"train": {"rows": 8, "files": ["a", "b"]}, "eval": {"rows": 2, "files": ["c"]}},
    }
    manifest = Manifest.from_json(data)
    assert split_counts(manifest) == {
        "train": {"rows_out": 8, "files": 2},
        "eval": {"rows_out": 2, "files": 1},
    }
    summary = run_summary(
        status="succeeded", exit_code=0, seconds=1.0, output="o", manifest=manifest
    )
    assert (summary["rows_in"], summary["rows_out"], summary["bad"]) == (10, 10, 0)
    data["bad_rows"] = {"count": 3, "files": ["_errors/x.jsonl"]}
    manifest = Manifest.from_json(data)
    summary = run_summary(
        status="succeeded", exit_code=0, seconds=1.0, output="o", manifest=manifest
    )
    assert (summary["rows_in"], summary["rows_out"], summary["bad"]) == (13, 10, 3)


def test_summary_without_a_manifest():
    summary = run_summary(status="invalid", exit_code=2, seconds=0.5, output=None)
    assert summary["rows_in"] is None and summary["bad"] is None and summary["splits"] == {}
    assert summary["job"] == "tfrecord-etl" and summary["date"] is None
    assert list(summary)[:5] == ["job", "status", "exit_code", "date", "output"]


# ----------------------------------------------------------------------------- the CLI


@pytest.fixture(scope="module")
def partitions(tmp_path_factory) -> Path:
    """events/dt=DAY/*.parquet for two days, with different rows."""
    root = tmp_path_factory.mktemp("events")
    for day, ids in (("2026-11-30", range(0, 50)), ("2026-12-01", range(100, 300))):
        part = root / f"dt={day}"
        part.mkdir()
        ids = list(ids)
        half = len(ids) // 2
        for i, chunk in enumerate((ids[:half], ids[half:])):
            table = pa.table({"id": chunk, "day": [day] * len(chunk)})
            pq.write_table(table, part / f"part-{i}.parquet")
    return root


def test_dated_run_reads_and_writes_that_day(partitions, tmp_path):
    result = run_cli_captured(
        [
            "convert",
            "--input",
            f"{partitions}/dt={{date}}/*.parquet",
            "--output",
            f"{tmp_path}/tfrecords/dt={{date}}",
            "--date",
            "2026-12-01",
        ]
    )
    assert result.code == EXIT_OK, result.err
    out = tmp_path / "tfrecords" / "dt=2026-12-01"
    records = read_output(out)
    assert sorted(r["id"][0] for r in records) == list(range(100, 300))
    assert {r["day"][0] for r in records} == {b"2026-12-01"}
    summary = last_json(result.out)
    assert summary["status"] == "succeeded" and summary["exit_code"] == EXIT_OK
    assert summary["job"] == "tfrecord-etl" and summary["engine"] == "in-process"
    assert summary["date"] == "2026-12-01"
    assert summary["output"] == str(out)
    assert summary["rows_in"] == summary["rows_out"] == 200 and summary["bad"] == 0
    files = read_manifest(out)["splits"]["train"]["files"]
    assert summary["splits"] == {"train": {"rows_out": 200, "files": len(files)}}
    assert summary["seconds"] > 0
    assert "rows: 200" in result.out  # the human summary comes first


def test_template_without_date_is_a_usage_error(partitions, tmp_path):
    result = run_cli_captured(
        ["convert", "--input", f"{partitions}/dt={{date}}/*.parquet", "--output", tmp_path / "o"]
    )
    assert result.code == EXIT_USAGE
    assert "pass --date" in result.err
    summary = last_json(result.out)
    assert summary["status"] == "invalid" and summary["exit_code"] == EXIT_USAGE
    assert "pass --date" in summary["error"]
    assert summary["rows_out"] is None


def test_missing_partition_is_a_usage_error(partitions, tmp_path):
    result = run_cli_captured(
        [
            "convert",
            "--input",
            f"{partitions}/dt={{date}}/*.parquet",
            "--output",
            f"{tmp_path}/o/{{date}}",
            "--date",
            "2026-12-02",
        ]
    )
    assert result.code == EXIT_USAGE
    assert "dt=2026-12-02" in result.err and "no file matches" in result.err
    assert last_json(result.out)["output"] == f"{tmp_path}/o/2026-12-02"


def test_failed_job_exit_code_and_summary(tmp_path):
    path = tmp_path / "big.parquet"
    values: list = [[[i]] for i in range(1000)]
    values[700] = [[1, 2]]  # two values where the shape [1, 1] holds one: fails at run time
    count = pa.array(values, pa.list_(pa.list_(pa.int64())))
    pq.write_table(pa.table({"count": count}), path, row_group_size=500)
    result = run_cli_captured(["convert", "--input", path, "--output", tmp_path / "o"])
    assert result.code == EXIT_FAILED
    summary = last_json(result.out)
    assert summary["status"] == "failed" and summary["exit_code"] == EXIT_FAILED
    assert "row 700" in summary["error"] and str(path) in summary["error"]
    assert "rows:" not in result.out
    assert not (tmp_path / "o" / "manifest.json").exists()
