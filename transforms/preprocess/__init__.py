"""Config-driven preprocessing of Arrow batches, with full-pass analyzers.

chain.py turns the config's `transforms:` list into the checked chain of steps (catalogued in
table_steps.py, column_steps.py and fitted_steps.py) and applies it to a batch; ops.py holds the
vectorized column functions, expr.py the safe expression language, analyzers.py the full-pass
accumulators, artifacts.py the files they leave and beam.py the PTransforms. The stable hash
that hash_bucket uses is transforms/hashing.py, shared with splits and the shuffle.
"""
