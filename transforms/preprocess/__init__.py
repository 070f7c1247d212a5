"""Config-driven preprocessing of Arrow batches, with full-pass analyzers.

plan.py turns the config's `transforms:` list into checked steps (catalogued in
table_steps.py, column_steps.py and fitted_steps.py); steps.py holds the vectorized column
functions, expr.py the safe expression language, hashing.py the stable hash, analyzers.py the
full-pass accumulators, artifacts.py the files they leave and beam.py the PTransforms.
"""
