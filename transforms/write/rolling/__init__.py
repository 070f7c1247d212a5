"""The rolling write (the default sink): each read task's rows are written where they are
encoded, per split into files of the target size; no record moves between workers.

- `task_files`: `TaskFiles`, one task's files of one split (a file closed at the target size,
  the last small one folded into the one before), for every engine;
- `blocks`: batches compressed ahead of their file, so that the work of one task can be spread
  over many workers and its files assembled with the bytes one worker writes;
- `beam`: `RollingWriteFn`, the DoFn over `TaskFiles`.
"""
