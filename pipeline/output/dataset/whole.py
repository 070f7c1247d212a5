"""An incremental dataset read as one output: a manifest that lists every live span's shards.

`read_output_manifest(path)` is what the readers (`load_dataset`, `feature_spec`,
`iter_batches`, `RecordIndex`), `inspect` and the schema-drift gate call: for a plain output its
manifest.json, for a dataset (dataset.json) the manifest of the whole, built from the spans'
manifests by `whole_manifest`:

- each split lists the shards of every live span in span order, as `span-NNNNN/<file>`
  (index files likewise), with the rows summed; bad-row files likewise;
- the features are the spans' (every span has the same, the gate of `convert --incremental`
  sees to it), each with its null count summed over the spans: a column null in one span only
  is read as nullable in all (a `RaggedFeature` parses the spans without nulls as well);
- `statistics`: the whole dataset's, per split, when dataset.json names statistics that cover
  every live span (merged from the spans' saved accumulators at each commit: statistics.py);
  else, for spans written before their accumulators were saved, each span's statistics file
  per split as `<split> (span-NNNNN)`, shown side by side (quantiles, histograms and distinct
  counts of two spans cannot be added from their protos, so no merged figure is made up);
- the other per-span files (schema.pbtxt, a layout's metadata, the fitted transform) stay the
  spans': read one span through its directory, `<output>/span-NNNNN`, a complete output.

Spans that differ in what a reader needs to agree on (compression, features, a sequence layout)
cannot be read as one: a ValueError names both spans and says to read them one at a time.
"""

from __future__ import annotations

import dataclasses

from pipeline.output.dataset.ledger import Dataset, read_dataset
from pipeline.output.manifest import (
    BadRowFiles,
    Manifest,
    ShardEntry,
    SplitEntry,
    StoredFeature,
    read_manifest,
)
from transforms import fs
from transforms.stats.paths import STATISTICS_FILE

__all__ = ["read_output_manifest", "whole_manifest"]


def read_output_manifest(path: str, strict: bool = False) -> Manifest:
    """The manifest of the output in `path`: its manifest.json, or the whole of the incremental
    dataset it holds. FileNotFoundError when it holds neither."""
    if not fs.exists(fs.join(path, "manifest.json")):
        dataset = read_dataset(path)
        if dataset is not None:
            return whole_manifest(path, dataset)
    return read_manifest(path, strict)


def _prefixed(prefix: str, name: str) -> str:
    return f"{prefix}/{name}"


def _same(first: tuple[str, Manifest], other: tuple[str, Manifest], output: str) -> None:
    (a, ma), (b, mb) = first, other
    differs = []
    if ma.compression != mb.compression:
        differs.append(f"compression {ma.compression} vs {mb.compression}")
    specs_a = [f.spec.to_json() for f in ma.features]
    specs_b = [f.spec.to_json() for f in mb.features]
    if specs_a != specs_b:
        differs.append("features")
    if _layout(ma) != _layout(mb):
        differs.append("sequence layout")
    if differs:
        raise ValueError(
            f"{output}: spans {a} and {b} differ in {', '.join(differs)}; they cannot be read "
            f"as one dataset: read each span's directory ({fs.join(output, b)}) on its own"
        )


def _layout(m: Manifest) -> tuple | None:
    """What a reader of SequenceExamples needs the spans to agree on (not their counts)."""
    s = m.sequence
    if s is None:
        return None
    return (s.group_by, s.order_by, s.column, [f.spec.to_json() for f in s.features])


def whole_manifest(output: str, dataset: Dataset) -> Manifest:
    """The manifest of every live span of `dataset` (in `output`) read as one output."""
    if not dataset.spans:
        raise FileNotFoundError(f"{output}: the dataset has no live span")
    parts = [(s.name, read_manifest(fs.join(output, s.name))) for s in dataset.spans]
    last_name, last = parts[-1]
    for part in parts[:-1]:
        _same(part, (last_name, last), output)
    split_names: list[str] = []
    for _, m in parts:
        split_names += [name for name in m.splits if name not in split_names]
    splits = {}
    for name in split_names:
        rows, files, shards = 0, [], []
        for prefix, m in parts:
            entry = m.splits.get(name)
            if entry is None:
                continue
            rows += entry.rows
            files += [_prefixed(prefix, f) for f in entry.files]
            shards += [
                ShardEntry(
                    _prefixed(prefix, s.file),
                    s.rows,
                    s.bytes,
                    None if s.index is None else _prefixed(prefix, s.index),
                )
                for s in entry.shards
            ]
        splits[name] = SplitEntry(rows, tuple(files), tuple(shards))
    nulls: dict[str, int] = {}
    inner: dict[str, dict[int, int]] = {}  # a list's levels: rows holding null positions
    for _, m in parts:
        for f in m.features:
            nulls[f.name] = nulls.get(f.name, 0) + f.null_count
            levels = inner.setdefault(f.name, {})
            for k, rows in f.inner_nulls:
                levels[k] = levels.get(k, 0) + rows
    features = tuple(
        StoredFeature(f.spec, nulls[f.name], tuple(sorted(inner[f.name].items())))
        for f in last.features
    )
    sequence = last.sequence
    if sequence is not None:
        seq_nulls: dict[str, int] = {}
        for _, m in parts:
            assert m.sequence is not None  # _same: every span has the same layout
            for f in m.sequence.features:
                seq_nulls[f.name] = seq_nulls.get(f.name, 0) + f.null_count
        sequence = dataclasses.replace(
            sequence,
            features=tuple(StoredFeature(f.spec, seq_nulls[f.name]) for f in sequence.features),
            steps=sum(m.sequence.steps for _, m in parts if m.sequence is not None),
            null_lists=sum(m.sequence.null_lists for _, m in parts if m.sequence is not None),
        )
    bad_files = [
        _prefixed(p, f) for p, m in parts for f in (m.bad_rows.files if m.bad_rows else ())
    ]
    sources: list[str] = []
    for _, m in parts:
        sources += [s for s in m.sources if s not in sources]
    whole = dataset.whole_statistics()
    if whole is not None:
        statistics = {split: f"{whole.dir}/{split}/{STATISTICS_FILE}" for split in whole.splits}
    else:  # each span's, side by side: the protos of spans do not add up
        statistics = {
            f"{split} ({prefix})": _prefixed(prefix, relative)
            for prefix, m in parts
            for split, relative in (m.statistics or {}).items()
        }
    rows = [m.rows for _, m in parts]
    return Manifest(
        compression=last.compression,
        rows=None if any(r is None for r in rows) else sum(r for r in rows if r is not None),
        splits=splits,
        features=features,
        source_format=last.source_format,
        sources=tuple(sources),
        created=dataset.updated,
        versions=dict(last.versions),
        split=last.split,
        bad_rows=BadRowFiles(sum(m.bad_row_count for _, m in parts), tuple(bad_files)),
        config=last.config,
        sequence=sequence,
        statistics=statistics or None,
    )
