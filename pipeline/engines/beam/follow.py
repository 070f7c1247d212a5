"""A job that runs elsewhere (Dataflow): its id and console URL as soon as it is submitted, then,
with `--wait` (the default), its state followed until it ends.

The launcher has Beam only start the job (Beam's `--no_wait_until_finish`), so that the id is
known at once; it then polls `result.state` every POLL_SECONDS and says each new state. At a
terminal state, `result.wait_until_finish()` gives Beam's verdict (it raises when a Dataflow job
failed, with the service's last error). With `--no-wait` the launcher returns once the job is
submitted; the JSON summary line carries the job id and the URL.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from apache_beam.options.pipeline_options import GoogleCloudOptions, PipelineOptions
from apache_beam.runners.runner import PipelineState

from pipeline.engines.interface import EventLog

__all__ = ["POLL_SECONDS", "announce", "console_url", "follow", "job_id_of"]

POLL_SECONDS = 10.0  # the Dataflow API is asked for the job's state this often
_CONSOLE = "https://console.cloud.google.com/dataflow/jobs/{region}/{job_id}?project={project}"


def console_url(options: PipelineOptions, job_id: str) -> str:
    """The job's page in the Google Cloud console."""
    cloud = options.view_as(GoogleCloudOptions)
    return _CONSOLE.format(region=cloud.region, job_id=job_id, project=cloud.project)


def job_id_of(result: Any) -> str | None:
    """The id of the job `result` stands for; None when no job was created (a template)."""
    if not getattr(result, "has_job", True):
        return None
    job_id = getattr(result, "job_id", None)
    return str(job_id()) if callable(job_id) else None


def announce(result: Any, options: PipelineOptions, log: EventLog) -> dict[str, str]:
    """Say the submitted job's id and console URL; the summary's fields for them (none when
    no job was created)."""
    job_id = job_id_of(result)
    if job_id is None:
        return {}
    url = console_url(options, job_id)
    log.event("submitted", f"job {job_id} submitted: {url}", job_id=job_id, console_url=url)
    return {"job_id": job_id, "console_url": url}


def follow(
    result: Any,
    log: EventLog,
    poll_seconds: float | None = None,
    sleep: Callable[[float], None] | None = None,
) -> str:
    """Follow the job until a terminal state, saying each new state; the final state from
    `wait_until_finish()` (which raises if the runner reports a failure). Interrupted (Ctrl-C),
    it says that the job goes on and how to find it, and lets the interrupt through."""
    poll_seconds = POLL_SECONDS if poll_seconds is None else poll_seconds
    sleep = sleep or time.sleep
    job_id = job_id_of(result) or "?"
    last = None
    try:
        while True:
            state = result.state
            if state != last:
                log.event("job_state", f"job {job_id}: {state}", job_id=job_id, state=str(state))
                last = state
            if PipelineState.is_terminal(state):
                break
            sleep(poll_seconds)
    except KeyboardInterrupt:
        text = (
            f"stopped following job {job_id}; it goes on running (cancel it in the console, "
            f"or: gcloud dataflow jobs cancel {job_id} --region REGION)"
        )
        log.event("stopped_following", text, level="warning", job_id=job_id)
        raise
    return str(result.wait_until_finish())
