"""tfrecord-etl: tables (Parquet, CSV, JSON Lines) -> sharded tf.train.Example TFRecords.

`pipeline/` is what a person runs, in rooms; data and imports flow one way, from the bottom of
this list to the top (tests/test_import_rules.py):

- `cli/`: the command line (parsing, commands, errors, log lines, progress, summaries);
- `verify/`, `report/`: checking and showing an output;
- `engines/`: running a planned job: one interface, in-process and Beam;
- `reader/`: reading an output back (tf.data);
- `job/`: the job's definition: flags, config, dates, the plan;
- `output/`: the output directory: manifest, lease, clearing, schema, drift, layouts.

The stages of the data path are in `transforms/`, which imports nothing from here.
"""

__version__ = "0.1.0"
