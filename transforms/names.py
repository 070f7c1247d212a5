"""Names an output is made of, in a module without Beam, for the command line and for the
commands that read an output (`inspect`, `verify`): the input formats
(transforms/read/inputs.py) and schema modes (transforms/read/unify.py), the sinks
`WriteShards` (transforms/write/beam.py) writes with, the output layouts
(transforms/write/layout.py), and the directory of the bad rows (transforms/deadletter.py)."""

__all__ = ["DEFAULT_LAYOUT", "ERRORS_DIR", "FORMATS", "LAYOUTS", "SCHEMA_MODES", "SINKS"]

FORMATS = ("parquet", "csv", "jsonl")
# schema: strict (every file has one schema) | unify (their union: transforms/read/unify.py)
SCHEMA_MODES = ("strict", "unify")
LAYOUTS = ("flat", "tfds", "tfx")
DEFAULT_LAYOUT = "flat"

# blocks: the project's block writer (the default); tfrecordio: Beam's WriteToTFRecord.
SINKS = ("blocks", "tfrecordio")
ERRORS_DIR = "_errors"  # <output>/_errors/: the rows a stage could not take, as JSON lines
