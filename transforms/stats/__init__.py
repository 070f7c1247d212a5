"""Feature statistics computed as the job encodes, written as TF Metadata protos.

- `sketches`: the mergeable sketches (a bottom-k sample for quantiles, HyperLogLog, top-k).
- `moments`, `values`: a batch's numbers and strings, in compiled passes.
- `counter`: `FeatureStats`, one feature's accumulator (counts, moments, extremes, sketches)
  and its merge.
- `features`: a batch's statistics per feature added to a split's (`SplitStats.add`,
  `batch_statistics`), merged per split.
- `accumulator`: `StatisticsAccumulator`, every split's statistics a batch at a time (no Beam).
- `proto`: `DatasetFeatureStatisticsList` per split, `statistics/<split>/FeatureStats.pb`.
- `paths`: the names of those files (no import of the rest: `inspect` and `verify` use them).
- `sketches_file`: a split's accumulator saved (`statistics/<split>/sketches.npz`) and read
  back, to merge the statistics of several runs (the spans of an incremental dataset).
- `beam`: `MergeStatistics` and `WriteStatistics`.
"""
