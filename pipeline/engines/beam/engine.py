"""The Beam engine: a planned job run by Beam, on any runner.

`BeamEngine(beam_args, ...)` makes Beam's options from the flags `convert` does not know
(pipeline/engines/beam/options.py), fills in what Dataflow needs (pipeline/engines/beam/dataflow.py)
and builds the `beam.Pipeline`, which validates them: a bad option fails here, before the
launcher takes the lease or deletes anything. `run` wires the job (pipeline/engines/beam/build.py),
starts it and, unless told not to wait, waits for it, following a Dataflow job's state
(pipeline/engines/beam/follow.py).

A dry run builds the job and writes nothing (no lease, nothing cleared); a template being staged
takes no lease (its job runs later, launched by the service). A job submitted and not waited for
(`--no-wait`, or Ctrl-C while following a Dataflow job) goes on running elsewhere: it removes
the output's lease when it commits, so the launcher leaves the lease to it (`still_running`).
"""

from __future__ import annotations

import datetime
from collections.abc import Sequence
from typing import Any

import apache_beam as beam
from apache_beam.options.pipeline_options import (
    DebugOptions,
    GoogleCloudOptions,
    PipelineOptions,
    StandardOptions,
)
from apache_beam.runners.runner import PipelineResult, PipelineState

from pipeline.engines.beam.build import build_pipeline
from pipeline.engines.beam.dataflow import (
    describe_dry_run,
    fill_dataflow_options,
    is_dataflow,
    is_dry_run,
    runner_name,
    write_job_file,
)
from pipeline.engines.beam.follow import announce, follow
from pipeline.engines.beam.options import beam_options
from pipeline.engines.interface import (
    DRY_RUN,
    SUBMITTED,
    EngineResult,
    EventLog,
    RunContext,
)
from pipeline.job.plan import JobPlan

__all__ = ["BeamEngine", "progress_shown"]


class _Silent:
    def event(self, event: str, text: str, level: str = "info", **fields: Any) -> None:
        pass


def progress_shown(options: PipelineOptions, dry_run: bool, sink: str) -> bool:
    """Whether a run shows the progress line: not a dry run, a template, Dataflow (its state is
    followed instead) or the tfrecordio sink (Beam's sink reports nothing)."""
    elsewhere = is_dataflow(options) or options.view_as(GoogleCloudOptions).template_location
    return not (dry_run or elsewhere or sink == "tfrecordio")


def _submitted_only(result: PipelineResult, waits: bool) -> bool:
    """True when the job was handed over and not waited for: a template launch (the service
    submits the job) or --no-wait on a runner that runs the job elsewhere."""
    if not getattr(result, "has_job", True):
        return True
    return not waits and not PipelineState.is_terminal(result.state)


class BeamEngine:
    """A convert job run by Beam, behind the launcher's interface
    (pipeline/engines/interface.py)."""

    name = "beam"

    def __init__(
        self,
        plan: JobPlan,
        beam_args: Sequence[str],
        wait: bool | None = None,
        date: datetime.date | None = None,
        log: EventLog | None = None,
    ) -> None:
        """Beam's options from `beam_args`; `wait` False: --no-wait. ValueError for an option
        Beam refuses (nothing is written yet)."""
        log = log or _Silent()
        options = beam_options(beam_args)
        if wait is False:  # --no-wait
            options.view_as(StandardOptions).no_wait_until_finish = True
        for note in fill_dataflow_options(options, date):
            log.event("note", f"using {note}", option=note)
        self.options = options
        self.dry_run = is_dataflow(options) and is_dry_run(options)
        template = bool(options.view_as(GoogleCloudOptions).template_location)
        self.waits = not options.view_as(StandardOptions).no_wait_until_finish
        self.lease_options = options
        # A run that writes now takes the lease: not a dry run, nor a template being staged.
        self.takes_lease = not self.dry_run and not template
        self.clears_output = not self.dry_run  # a dry run deletes nothing
        self.shows_progress = progress_shown(options, self.dry_run, plan.config.sink)
        self.still_running = False
        self.facts: dict[str, Any] = {
            "engine": self.name,
            "runner": runner_name(options),
            "job_name": options.view_as(GoogleCloudOptions).job_name,
        }
        # Beam only starts the job (the pipeline keeps a copy of its options): the engine
        # waits, following a Dataflow job (pipeline/engines/beam/follow.py).
        options.view_as(StandardOptions).no_wait_until_finish = True
        self._pipeline = beam.Pipeline(options=options)  # Beam validates its options here

    def run(self, plan: JobPlan, context: RunContext) -> EngineResult:
        log = context.log or _Silent()
        try:
            with self._pipeline as p:
                build_pipeline(p, plan, run_id=context.run_id, progress_dir=context.progress_dir)
            result = p.result
            if is_dataflow(self.options) and not self.dry_run:
                self.facts.update(announce(result, self.options, log))
            if self.waits and not self.dry_run:
                if "job_id" in self.facts:
                    follow(result, log)
                else:
                    result.wait_until_finish()
        except KeyboardInterrupt:
            # a Dataflow job goes on, and removes its lease when it commits
            self.still_running = bool(self.facts.get("job_id"))
            raise
        if self.dry_run:
            built = describe_dry_run(result)
            job_file = self.options.view_as(DebugOptions).dataflow_job_file
            if job_file:
                write_job_file(job_file, result)
            return EngineResult(DRY_RUN, self.facts, extra={**built, "job_file": job_file})
        if _submitted_only(result, self.waits):
            self.still_running = True
            self.facts.setdefault("job_id", None)
            return EngineResult(SUBMITTED, self.facts)
        if result.state != PipelineState.DONE:
            raise RuntimeError(f"the runner ended the job in state {result.state}")
        return EngineResult.committed(plan.config.output, self.facts)
