"""The in-process engine: the job run on this machine's cores without Beam.

- `engine`: `run_in_process`, the job as phases over work items; `InProcessEngine`, its face to
  the launcher (pipeline/engines/interface.py);
- `units`: what one worker does with one piece of work (a work item, a task's blocks, a
  sequence bucket, a grouped shard), through the functions the Beam job's DoFns call;
- `pool`: worker processes (fork), the results in the order of the work, faults named.
"""

from pipeline.engines.inprocess.engine import InProcessEngine, run_in_process

__all__ = ["InProcessEngine", "run_in_process"]
