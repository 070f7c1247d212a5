"""An incremental dataset: numbered spans of one dataset in one output directory, and the ledger
of the inputs each span converted (`convert --incremental`, pipeline/cli/incremental.py).

<output>/
  dataset.json     the dataset's manifest: its live spans, each with the inputs it converted
                   (path, bytes, modification time, rows), and the spans retired since
  span-00001/      a complete output of its own (manifest.json, shards, statistics, ...)
  span-00002/
  ...

- `ledger`: dataset.json as a typed object, read (checked: a span is named only
  `span-NNNNN`, so a hand-edited ledger cannot point outside the dataset) and written (the
  dataset's commit point), and how the inputs found now compare with it;
- `whole`: the dataset read as one output: a manifest that lists every live span's shards
  (`read_output_manifest`, what the readers, `inspect` and the drift gate call);
- `statistics`: the whole dataset's statistics, merged from the spans' saved accumulators at
  each commit (`merge_whole_statistics`), and earlier ones removed (`remove_stale`).

May import: pipeline/output and transforms/ only.
"""

from pipeline.output.dataset.ledger import (
    DATASET_NAME,
    Dataset,
    InputChanges,
    LedgerInput,
    SpanEntry,
    WholeStatistics,
    compare_inputs,
    is_dataset,
    read_dataset,
    span_name,
    write_dataset,
)
from pipeline.output.dataset.whole import read_output_manifest, whole_manifest

__all__ = [
    "DATASET_NAME",
    "Dataset",
    "InputChanges",
    "LedgerInput",
    "SpanEntry",
    "WholeStatistics",
    "compare_inputs",
    "is_dataset",
    "read_dataset",
    "read_output_manifest",
    "span_name",
    "whole_manifest",
    "write_dataset",
]
