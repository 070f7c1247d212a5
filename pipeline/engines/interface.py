"""The one engine interface: a `JobPlan` in, an `EngineResult` out.

An engine runs a planned job and nothing else. What is done once per run whatever the engine
(the output's lease, clearing the output, the summary) is the launcher's
(pipeline/engines/launch.py and pipeline/cli/convert.py); the launcher asks an engine only what
this interface says:

- before the run: whether the run writes the output now (`takes_lease`, `clears_output`: a
  dry run or a staged template does not), how the lease reaches the output (`lease_options`,
  Beam's options for an object store), whether progress can be shown here (`shows_progress`);
- the run: `run(plan, context)` returns an `EngineResult` or raises; the job's failure is an
  exception, Ctrl-C a `KeyboardInterrupt`;
- at any time: `facts`, what the summary says of the engine (its name, the runner, a job id
  once known), and `still_running`, True when the job goes on elsewhere after the launcher stops
  (a Dataflow job not waited for): its lease is the job's to remove.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from pipeline.job.plan import JobPlan
    from pipeline.output.manifest import Manifest

__all__ = ["SUCCEEDED", "Engine", "EngineResult", "EventLog", "RunContext"]

SUCCEEDED, DRY_RUN, SUBMITTED = "succeeded", "dry_run", "submitted"


class EventLog(Protocol):
    """Where an engine says what happens (pipeline/cli/joblog.py's `JobLog` is one)."""

    def event(self, event: str, text: str, level: str = "info", **fields: Any) -> None: ...


@dataclasses.dataclass(frozen=True)
class RunContext:
    """What the launcher hands an engine for one run."""

    run_id: str | None = None  # the run's output lease, checked before the commit; None: none
    progress_dir: str | None = None  # where the writers report for the progress line; None: no
    log: EventLog | None = None  # where the engine's events go; None: nowhere


@dataclasses.dataclass(frozen=True)
class EngineResult:
    """What a run gave: its status, the committed manifest, the engine's facts.

    `status` is "succeeded" (the manifest is written: `manifest_path`, `manifest`), "dry_run"
    (the job was built, not run) or "submitted" (the job runs elsewhere, not waited for).
    `facts` are the summary's engine fields; `extra` what a dry run or a submission adds."""

    status: str
    facts: dict[str, Any]
    manifest_path: str | None = None
    manifest: Manifest | None = None
    extra: dict[str, Any] = dataclasses.field(default_factory=dict)

    @property
    def rows(self) -> int | None:
        """Records written (None without a manifest)."""
        return None if self.manifest is None else self.manifest.rows

    @property
    def bad_rows(self) -> int | None:
        """Rows set aside in `_errors/` (None without a manifest)."""
        return None if self.manifest is None else self.manifest.bad_row_count

    @classmethod
    def committed(cls, output: str, facts: dict[str, Any]) -> EngineResult:
        """The result of a run that committed its manifest into `output`."""
        from pipeline.output.manifest import manifest_path, read_manifest

        return cls(SUCCEEDED, facts, manifest_path(output), read_manifest(output))


class Engine(Protocol):
    """An engine of `convert` (pipeline/engines/inprocess.py, pipeline/engines/beam/engine.py)."""

    name: str
    facts: dict[str, Any]
    takes_lease: bool
    clears_output: bool
    shows_progress: bool
    lease_options: Any
    waits: bool
    still_running: bool

    def run(self, plan: JobPlan, context: RunContext) -> EngineResult: ...
