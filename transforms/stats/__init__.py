"""Feature statistics computed as the job encodes, written as TF Metadata protos.

- `sketches`: the mergeable sketches (a bottom-k sample for quantiles, HyperLogLog, top-k).
- `features`: a batch's statistics per feature (`batch_statistics`), merged per split.
- `proto`: `DatasetFeatureStatisticsList` per split, `statistics/<split>/FeatureStats.pb`.
- `beam`: `ComputeStatistics` and `WriteStatistics`.
"""
