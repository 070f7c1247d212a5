"""A Dataflow job's id, console URL and states, without GCP: `follow` and `announce` against a
stand-in shaped like DataflowPipelineResult (job_id(), state, wait_until_finish()), and the
launcher's --wait / --no-wait with DataflowRunner's submission replaced by a stand-in (for
--wait, one that runs the job on the local runner, so the usual summary has a manifest)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from apache_beam.options.pipeline_options import GoogleCloudOptions, PipelineOptions
from apache_beam.runners.dataflow.dataflow_runner import DataflowRunner
from apache_beam.runners.portability.fn_api_runner import FnApiRunner
from apache_beam.runners.runner import PipelineState
from conftest import SAMPLE_PARQUET, read_manifest
from test_dataflow import DATAFLOW_DRY_RUN, IMAGE

from pipeline.cli.joblog import JobLog
from pipeline.engines.beam import follow as follow_module
from pipeline.engines.beam.follow import announce, console_url, follow

OPTIONS = PipelineOptions(["--project=example-project", "--region=us-central1"])
URL = "https://console.cloud.google.com/dataflow/jobs/us-central1/2026-12-03_01?project=example-project"


class StandIn:
    """Shaped like DataflowPipelineResult: each read of `state` is the job's next state."""

    has_job = True

    def __init__(self, states: list[str], error: str | None = None) -> None:
        self._states = list(states)
        self.reads = 0
        self.waited = False
        self._error = error

    def job_id(self) -> str:
        return "2026-12-03_01"

    @property
    def state(self) -> str:
        self.reads += 1
        return self._states.pop(0) if len(self._states) > 1 else self._states[0]

    def wait_until_finish(self, duration: int | None = None) -> str:
        self.waited = True
        if self._error:
            raise RuntimeError(self._error)
        return self._states[0]


def test_console_url_and_announce(capsys):
    assert console_url(OPTIONS, "2026-12-03_01") == URL
    assert announce(StandIn(["PENDING"]), OPTIONS, JobLog()) == {
        "job_id": "2026-12-03_01",
        "console_url": URL,
    }
    assert capsys.readouterr().err == f"tfrecord-etl: job 2026-12-03_01 submitted: {URL}\n"
    announce(StandIn(["PENDING"]), OPTIONS, JobLog("json"))
    event = json.loads(capsys.readouterr().err)
    assert event["event"] == "submitted" and event["console_url"] == URL
    template = StandIn(["DONE"])
    template.has_job = False  # a template launch: no job yet
    assert announce(template, OPTIONS, JobLog()) == {}
    assert (
        announce(StandIn(["PENDING"]), OPTIONS, JobLog(quiet=True)) and not capsys.readouterr().err
    )


def test_follow_says_each_new_state_until_the_end(capsys):
    result = StandIn(["PENDING", "PENDING", "RUNNING", "RUNNING", "RUNNING", "DONE"])
    sleeps = []
    assert follow(result, JobLog(), poll_seconds=7, sleep=sleeps.append) == PipelineState.DONE
    assert capsys.readouterr().err.splitlines() == [
        "tfrecord-etl: job 2026-12-03_01: PENDING",
        "tfrecord-etl: job 2026-12-03_01: RUNNING",
        "tfrecord-etl: job 2026-12-03_01: DONE",
    ]
    assert sleeps == [7] * 5 and result.waited


def test_follow_lets_the_runners_failure_through():
    result = StandIn(["RUNNING", "FAILED"], error="Dataflow pipeline failed. State: FAILED")
    with pytest.raises(RuntimeError, match="State: FAILED"):
        follow(result, JobLog(quiet=True), sleep=lambda _: None)


def test_follow_interrupted_says_the_job_goes_on(capsys):
    def interrupt(_: float) -> None:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        follow(StandIn(["RUNNING"]), JobLog(), sleep=interrupt)
    assert "stopped following job 2026-12-03_01; it goes on running" in capsys.readouterr().err


# ----------------------------------------------------------------------------- the launcher


@pytest.fixture(autouse=True)
def offline(monkeypatch: pytest.MonkeyPatch) -> None:
    """No GCS: Beam's check of the temp bucket's soft-delete policy (made when a job that is
    not a dry run validates its options, with a GCS client) is skipped."""
    monkeypatch.setattr(
        GoogleCloudOptions, "_warn_if_soft_delete_policy_enabled", lambda self, arg: None
    )


def dataflow_args(tmp_path: Path, *extra: str) -> list:
    args = [a for a in DATAFLOW_DRY_RUN if a != "--dry_run=True"]
    return [
        "convert", "--input", SAMPLE_PARQUET, "--output", tmp_path / "out",
        "--runner=DataflowRunner", f"--sdk_container_image={IMAGE}", *args, *extra,
    ]  # fmt: skip


def test_no_wait_returns_once_submitted(tmp_path, monkeypatch, run_cli_captured):
    submitted = []

    def submit(self, pipeline, options):
        submitted.append(StandIn(["PENDING", "RUNNING"]))
        return submitted[-1]

    monkeypatch.setattr(DataflowRunner, "run_pipeline", submit)
    result = run_cli_captured(dataflow_args(tmp_path, "--no-wait"))
    assert result.code == 0, result.err
    summary = json.loads(result.out.splitlines()[-1])
    assert summary["status"] == "submitted" and summary["job_id"] == "2026-12-03_01"
    assert summary["console_url"] == URL
    assert f"job 2026-12-03_01 submitted: {URL}" in result.err
    (standin,) = submitted
    assert not standin.waited  # not followed
    assert "rows:" not in result.out and not (tmp_path / "out" / "manifest.json").exists()


def test_wait_follows_the_job_and_ends_with_the_summary(tmp_path, monkeypatch, run_cli_captured):
    def submit(self, pipeline, options):  # the job runs here; Dataflow's states around it
        local = FnApiRunner().run_pipeline(pipeline, options)
        assert local.state == PipelineState.DONE
        return StandIn(["PENDING", "RUNNING", "DONE"])

    monkeypatch.setattr(DataflowRunner, "run_pipeline", submit)
    monkeypatch.setattr(follow_module, "POLL_SECONDS", 0)
    result = run_cli_captured(dataflow_args(tmp_path, "--log-format", "json"))
    assert result.code == 0, result.err
    events = [json.loads(line) for line in result.err.splitlines()]
    states = [e["state"] for e in events if e["event"] == "job_state"]
    assert states == ["PENDING", "RUNNING", "DONE"]
    assert [e["job_id"] for e in events if e["event"] == "submitted"] == ["2026-12-03_01"]
    assert "progress" not in {e["event"] for e in events}  # the job's state, not local progress
    lines = result.out.splitlines()
    assert lines[0].startswith("rows: 2000  shards: 1")
    summary = json.loads(lines[-1])
    assert summary["status"] == "succeeded" and summary["job_id"] == "2026-12-03_01"
    assert summary["rows_out"] == 2000 == read_manifest(tmp_path / "out")["rows"]


def test_wait_on_a_failed_job_exits_1(tmp_path, monkeypatch, run_cli_captured):
    failed = StandIn(["RUNNING", "FAILED"], error="Dataflow pipeline failed. State: FAILED")
    monkeypatch.setattr(DataflowRunner, "run_pipeline", lambda self, p, o: failed)
    monkeypatch.setattr(follow_module, "POLL_SECONDS", 0)
    result = run_cli_captured(dataflow_args(tmp_path))
    assert result.code == 1, result.err
    summary = json.loads(result.out.splitlines()[-1])
    assert summary["status"] == "failed" and summary["job_id"] == "2026-12-03_01", result.err
    assert "State: FAILED" in summary["error"]
