"""`tfrecord-etl verify` with a source (`--source`, `--config`, `--sample`): the output against
its source, beside the checks of the output alone (pipeline/verify/run.py runs both).

- `source`: the run's config back from the manifest, and the records the source gives, derived
  with the job's own per-batch conversion (the whole source or a seeded sample of its rows).
- `compare`: source against output, as multisets of record digests.
- `pairs`: a missing row paired with the changed record, the columns that differ named.
- `check`: the source's records reconciled with the run's `_errors/`, and the comparison as
  findings (missing, changed, in another split, duplicate, extra).
"""
