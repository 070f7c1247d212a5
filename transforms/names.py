"""Names an output is made of, in a module without Beam, for the command line and for the
commands that read an output (`inspect`, `verify`): the input formats
(transforms/read/inputs.py), the sinks `WriteShards` (transforms/write/beam.py) writes with, the
output layouts (transforms/write/layout.py), and the directory of the bad rows
(transforms/deadletter.py)."""

__all__ = ["DEFAULT_LAYOUT", "ERRORS_DIR", "FORMATS", "LAYOUTS", "SINKS"]

FORMATS = ("parquet", "csv", "jsonl")
LAYOUTS = ("flat", "tfds", "tfx")
DEFAULT_LAYOUT = "flat"

# blocks: the project's block writer (the default); tfrecordio: Beam's WriteToTFRecord.
SINKS = ("blocks", "tfrecordio")
ERRORS_DIR = "_errors"  # <output>/_errors/: the rows a stage could not take, as JSON lines
