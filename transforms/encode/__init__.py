"""Encoding: Arrow batches -> serialized tf.train.Example records.

- `features`: what a feature is, without Arrow (`FeatureSpec`, `ColumnOptions`, the kinds).
- `schema`: the Arrow type -> feature mapping (`plan_features`).
- `columns`: a column prepared for the kernel (values, row offsets, valid mask).
- `kernel/`: the compiled (numba) column-wise encoder: `example` (the entry point), `layout`
  (the first pass: how each column is written, every record's size), `wire` (protobuf wire
  format), `crc` (crc32c), `memory` (raw loads and stores).
- `records`: `encode_table`, `EncodedBatch`, `BatchStats`.
- `beam`: `EncodeExamples`, `MergeStats`.
"""
