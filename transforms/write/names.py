"""Names an output is made of, in a module without Beam, for the command line and for the
commands that read an output (`inspect`, `verify`): the sinks `WriteShards`
(transforms/write/beam.py) writes with, and the directory of the bad rows
(transforms/deadletter.py)."""

__all__ = ["ERRORS_DIR", "SINKS"]

# blocks: the project's block writer (the default); tfrecordio: Beam's WriteToTFRecord.
SINKS = ("blocks", "tfrecordio")
ERRORS_DIR = "_errors"  # <output>/_errors/: the rows a stage could not take, as JSON lines
