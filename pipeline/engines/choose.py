"""Which engine runs a convert job, Beam (any runner) or this machine's cores without Beam
(pipeline/engines/inprocess/), and on how many worker processes. Decided from the plan and the
command line before Beam is imported."""

from __future__ import annotations

import os
from collections.abc import Sequence

from pipeline.job.plan import JobPlan
from transforms import fs

__all__ = ["choose_engine", "engine_reason", "unsupported", "workers"]


def workers(requested: int) -> tuple[int, str]:
    """(worker processes, why) of an in-process run: `requested`, or with 0 the cores this
    process may run on (its CPU affinity: what a container or `taskset` allows)."""
    if requested > 0:
        return requested, f"--workers {requested}"
    try:
        cores = len(os.sched_getaffinity(0))
        where = "the cores this process may use"
    except (AttributeError, OSError):  # no affinity on this platform
        cores = os.cpu_count() or 1
        where = "the machine's cores"
    return max(1, cores), f"{where}; --workers N to choose"


def unsupported(plan: JobPlan) -> str | None:
    """Why the in-process engine cannot run `plan` (None: it can)."""
    config = plan.config
    if not all(fs.is_local(p) for p in (*plan.paths, config.output)):
        return "it reads and writes local files only"
    if config.sink != "blocks":
        return "the tfrecordio sink is Beam's own"
    return None


def choose_engine(requested: str, beam_args: Sequence[str], plan: JobPlan) -> str:
    """ "beam" or "in-process" for `--engine requested` ("auto", "beam" or "in-process").

    auto: in-process when the job can run there and no Beam option is given (a Beam option,
    `--runner` above all, asks for Beam). A ValueError says why in-process cannot be had."""
    if requested == "beam":
        return "beam"
    reason = unsupported(plan)
    if requested == "auto":
        return "in-process" if reason is None and not beam_args else "beam"
    if beam_args:
        raise ValueError(
            f"--engine in-process runs without Beam, so Beam options do not apply: "
            f"{' '.join(beam_args)}; drop them, or use --engine beam"
        )
    if reason is not None:
        raise ValueError(f"--engine in-process cannot run this job: {reason}; use --engine beam")
    return "in-process"


def engine_reason(engine: str, requested: str, beam_args: Sequence[str], plan: JobPlan) -> str:
    """Why `engine` (what choose_engine gave) runs the job, for `tfrecord-etl plan`."""
    if engine == "in-process":
        return "this process, without Beam"
    if requested == "beam":
        return "--engine beam"
    if beam_args:
        return "Beam options given"
    return unsupported(plan) or "Beam"
