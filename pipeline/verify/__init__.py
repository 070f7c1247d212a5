"""Checking an output: `tfrecord-etl verify` and `tfrecord-etl inspect`.

- `run`: `verify_output`, the checks in order and the report.
- `files`: the listing, the bad-row files, reading every shard, the counts.
- `records`: frames and crcs (via transforms/write/tfrecord.py), each record against the
  manifest's features.
- `keys`: the feature keys of each record, read from its bytes.
- `against_source/`: the output against its source (`--source`): the records the source
  gives, derived with the job's own per-batch conversion, reconciled with the run's bad rows,
  compared as multisets of digests, changed rows paired, and the findings.
- `report`: findings and the report's text.
- `inspect`: the manifest summary and the first records, as JSON.
- `example_pb`: tf.train.Example's message classes from protobuf alone (no TensorFlow).

May import: pipeline.job (a run's config, to derive the source's records), pipeline.output,
pipeline.reader (the parse spec) and transforms/.
"""
