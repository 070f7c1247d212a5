"""Dataset splits: each source row goes to a split by a stable hash of its source values.

- `assign`: the plain functions (the hash of a key column or of a row's Example bytes, the
  split of each row, cutting a batch or a block of records by split).
- `beam`: `AssignSplits` and `KeepSplit`.
"""
