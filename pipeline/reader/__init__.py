"""Reading an output back, from its manifest alone: this room owns the readers.

- `spec`: the `tf.io.parse_example` spec of the stored features, and `restore` of a parsed batch;
- `sequence`: the same for SequenceExamples (`[batch, time, ...]` steps);
- `dataset`: `load_dataset` (a `tf.data.Dataset` of restored batches) and `feature_spec`;
- without TensorFlow: `arrays` (`iter_batches`: numpy batches, value for value load_dataset's),
  `decode` (records -> raw values, compiled), `records` (shards, partitions, shuffle buffer),
  `index` (rows by number through `--index` files), `torch` (PyTorch datasets; needs torch).

May import: pipeline.output (the manifest) and transforms/. Nothing here writes.

`from pipeline.reader import load_dataset, feature_spec, restore, parse_spec` is the public
entry; the names are imported when first used, so a reader module that needs no TensorFlow can
live beside these without importing it.
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = [
    "PRESENT_SUFFIX",
    "ParseSpec",
    "feature_spec",
    "load_dataset",
    "parse_spec",
    "read_features",
    "restore",
]

_WHERE = {
    "PRESENT_SUFFIX": "spec",
    "ParseSpec": "spec",
    "parse_spec": "spec",
    "read_features": "spec",
    "restore": "spec",
    "feature_spec": "dataset",
    "load_dataset": "dataset",
}


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_WHERE[name]}"), name)


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
