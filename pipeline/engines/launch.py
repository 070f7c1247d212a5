"""What the launcher does once per run, whatever the engine: take the output's lease, clear the
output, hand the plan to the engine, release the lease when the run ends.

`claim_output` comes first: once the lease is held (pipeline/output/lease.py) the output is
checked and prepared (pipeline/output/directory.py: links inside it refused, or removed with
`--overwrite`; a complete output refused, or cleared with `--overwrite`; what an unfinished run
left removed). An error there is the user's and raises before the engine runs, with nothing
deleted.
`OutputClaim.run` then runs the engine with the lease's run id; `OutputClaim.release` removes
the lease, unless the engine says the job goes on elsewhere (a Dataflow job not waited for
removes its lease when it commits). After a failed run, `OutputClaim.after_failure` removes the
run's temp folders and says what was cleared and what is left.
"""

from __future__ import annotations

import dataclasses

from pipeline.engines.interface import Engine, EngineResult, EventLog, RunContext
from pipeline.job.plan import JobPlan
from pipeline.output.directory import Cleared, describe_left, prepare_output, remove_run_temp
from pipeline.output.lease import Lease, acquire_lease, release_lease
from transforms import fs

__all__ = ["OutputClaim", "claim_output"]


@dataclasses.dataclass
class OutputClaim:
    """A run's hold on its output: the lease (None for a run that writes nothing now)."""

    output: str
    engine: Engine
    lease: Lease | None = None
    cleared: Cleared = dataclasses.field(default_factory=Cleared)  # what preparing removed
    notes: list[str] = dataclasses.field(default_factory=list)  # to show (links removed)

    @property
    def run_id(self) -> str | None:
        return None if self.lease is None else self.lease.run_id

    def run(
        self, plan: JobPlan, progress_dir: str | None = None, log: EventLog | None = None
    ) -> EngineResult:
        """The engine's run of `plan` under this claim."""
        return self.engine.run(plan, RunContext(self.run_id, progress_dir, log))

    def after_failure(self) -> str:
        """After the run failed: remove its temp folders (a local output; what a re-run would
        clear anyway) and say in one phrase what was cleared before and what is left."""
        if fs.is_local(self.output):
            remove_run_temp(self.output)
        said = []
        if self.cleared.describe():
            said.append(f"before it failed, the run had removed {self.cleared.describe()}")
        if fs.is_local(self.output):
            left = describe_left(self.output)
            if left == "nothing":
                said.append(f"nothing is left in {self.output}")
            else:
                said.append(
                    f"left in {self.output}: {left} (no manifest: no reader takes them, and the "
                    "next run clears them)"
                )
        return "; ".join(said)

    def release(self) -> str | None:
        """Remove the lease unless the job goes on elsewhere; a warning's text when it could
        not be removed (the run's own result stands)."""
        if self.lease is None or self.engine.still_running:
            return None
        try:
            release_lease(self.lease.output, self.lease.run_id, self.engine.lease_options)
        except Exception as err:
            return f"could not remove the output's lease: {err}"
        return None


def claim_output(plan: JobPlan, engine: Engine) -> OutputClaim:
    """Lease the output, then clear it for the run (for an engine that writes now). Raises
    ValueError or OSError, with the lease released, when the output cannot be had."""
    config = plan.config
    claim = OutputClaim(config.output, engine)
    if engine.takes_lease:  # before anything in the output is deleted
        claim.lease = acquire_lease(config.output, engine.lease_options, waits=engine.waits)
    try:
        if engine.clears_output:
            claim.cleared, claim.notes = prepare_output(
                config.output, config.overwrite, config.splits
            )
    except BaseException:
        claim.release()
        raise
    return claim
