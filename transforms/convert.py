"""The per-batch conversion, in one place: a source batch -> split -> preprocess -> files ->
encode.

`Conversion` holds what the stages need (planned once, at construction); each stage is a method
that takes a batch and returns its result and the rows it could not take (dead-letter dicts,
found by `isolate_bad_rows`). The job's DoFns call the stages one by one (AssignSplits,
Preprocess, ReadFiles, EncodeExamples), with Beam between them; `convert_batch` calls them in a
row, for `tfrecord-etl verify` to derive the records a source gives. The stage order lives here
and in the job's wiring (pipeline/engines/beam/build.py), nowhere else.

Where splits are assigned: with transforms (or when the written features differ from the
source's), `split` cuts each source batch by a hash of its source values before preprocessing,
so that analyzers can be fitted on the train split alone; otherwise the records the job writes
are those very bytes, and `encode` hashes them as it writes them (transforms/split/assign.py).

The files stage (`files:`, transforms/files/) comes after preprocessing: the steps see the
references (text), a row a filter drops costs no file read, an analysis pass reads no file,
and the files' contents go from the reader straight to the encoder. It gives a batch back in
parts of bounded size, each encoded before the next is read.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np

from transforms.batch import TableBatch, source_rows, take_rows
from transforms.deadletter import isolate_bad_rows
from transforms.encode.records import BatchStats, EncodedBatch, encode_table
from transforms.encode.schema import FeatureSpec
from transforms.files.plan import FilesPlan
from transforms.files.stage import read_files
from transforms.preprocess.chain import PreprocessPlan, apply_steps
from transforms.sequence.encode import encode_list_column
from transforms.sequence.layout import SequenceLayout
from transforms.split.assign import assign_splits, partition_records, split_batch

__all__ = ["BadRows", "Conversion", "EncodedRows", "convert_batch"]

BadRows = list[dict[str, Any]]  # dead-letter dicts (transforms/deadletter.py)


@dataclasses.dataclass(frozen=True)
class EncodedRows:
    """The records of one batch, in row order, with the source row and split of each, and
    the rows they were encoded from (`batch`: the statistics read it)."""

    records: EncodedBatch
    rows: np.ndarray  # int64: the source row of each record
    split_ids: np.ndarray  # int64: the index in the splits of each record
    stats: BatchStats
    batch: TableBatch | None = None

    def by_split(self, splits: Sequence[tuple[str, int]]) -> list[tuple[str, EncodedBatch]]:
        """(split name, its records) for each split that got records, in the splits' order."""
        ids = self.split_ids
        if len(splits) == 1 or (ids.size and (ids == ids[0]).all()):
            return [(splits[int(ids[0]) if ids.size else 0][0], self.records)]
        parts = partition_records(self.records.buffer, self.records.offsets, ids, len(splits))
        return [
            (name, dataclasses.replace(self.records, buffer=part[0], offsets=part[1]))
            for (name, _), part in zip(splits, parts, strict=True)
            if part is not None
        ]

    def batches_by_split(self, splits: Sequence[tuple[str, int]]) -> list[tuple[str, TableBatch]]:
        """(split name, the encoded rows of it) for each split that got records."""
        if self.batch is None:
            return []
        ids = self.split_ids
        if len(splits) == 1 or (ids.size and (ids == ids[0]).all()):
            return [(splits[int(ids[0]) if ids.size else 0][0], self.batch)]
        return [
            (name, take_rows(self.batch, np.flatnonzero(ids == i)))
            for i, (name, _) in enumerate(splits)
            if (ids == i).any()
        ]

    def split_rows(self, splits: Sequence[tuple[str, int]]) -> dict[str, int]:
        """Records per split (splits with none left out)."""
        counts = np.bincount(self.split_ids, minlength=len(splits))
        return {name: int(counts[i]) for i, (name, _) in enumerate(splits) if counts[i]}


@dataclasses.dataclass(frozen=True)
class Conversion:
    """What turns a source batch into records.

    `specs`: the features the records hold; `source_specs`: the input's features with default
    options (the whole-row split key, when `split_key` is None and splits are assigned before
    preprocessing); `framed`: records as TFRecord frames (the blocks sink) or bare Examples.
    """

    specs: tuple[FeatureSpec, ...]
    splits: tuple[tuple[str, int], ...] = (("train", 1),)
    split_key: str | None = None
    split_salt: str = ""
    source_specs: tuple[FeatureSpec, ...] | None = None
    split_before_preprocess: bool = False
    preprocess: PreprocessPlan | None = None
    framed: bool = True
    sequence: SequenceLayout | None = None  # SequenceExamples (transforms/sequence/)
    files: FilesPlan | None = None  # the `files:` columns (transforms/files/)

    def split(self, batch: TableBatch) -> tuple[list[TableBatch], BadRows]:
        """Stage 1: a source batch -> one batch per split that gets rows (each with `split`
        set), when splits are assigned before preprocessing; else the batch as it is."""
        if not self.split_before_preprocess:
            return [batch], []
        parts, bad = isolate_bad_rows(batch, self._split, "split")
        return parts or [], bad

    def _split(self, batch: TableBatch) -> list[TableBatch]:
        key: str | tuple[str, ...] | None = self.split_key
        if self.sequence is not None and self.sequence.grouped and key is None:
            key = self.sequence.options.group_by  # a sequence's rows go to one split
        return split_batch(batch, self.splits, self.split_salt, key, self.source_specs)

    def transform(
        self, batch: TableBatch, fitted: Mapping[int, Any]
    ) -> tuple[TableBatch | None, BadRows]:
        """Stage 2: every preprocessing step, with the fitted analyzers as `prepare_fitted`
        made them; None when no row is left."""
        if self.preprocess is None:
            return batch, []
        plan = self.preprocess
        return isolate_bad_rows(batch, lambda b: apply_steps(plan, b, fitted), "transform")

    def read_files(self, batch: TableBatch) -> Iterator[tuple[TableBatch | None, BadRows]]:
        """Stage 3: the batch with its `files:` columns read, in parts of bounded size (each
        with the rows whose files could not be had); the batch as it is without `files:`."""
        if self.files is None:
            yield batch, []
            return
        yield from read_files(self.files, batch)

    def encode(self, batch: TableBatch) -> tuple[EncodedRows | None, BadRows]:
        """Stage 4: the records of the batch, and the split of each (hashed from the records
        themselves when no earlier stage assigned it)."""
        return isolate_bad_rows(batch, self._encode, "encode")

    def _encode(self, batch: TableBatch) -> EncodedRows:
        encode = encode_table if self.sequence is None else self._encode_list
        encoded, stats = encode(
            batch.table, self.specs, batch.source, batch.first_row, self.framed, batch.rows
        )
        encoded = dataclasses.replace(encoded, task=batch.task)
        n = encoded.num_records
        if batch.split is not None:
            index = [name for name, _ in self.splits].index(batch.split)
            ids = np.full(n, index, np.int64)
        elif len(self.splits) == 1:
            ids = np.zeros(n, np.int64)
        else:
            ids = assign_splits(
                [w for _, w in self.splits],
                self.split_salt,
                key=None if self.split_key is None else batch.table.column(self.split_key),
                buffer=encoded.buffer,
                offsets=encoded.offsets,
                framed=self.framed,
            )
        return EncodedRows(encoded, source_rows(batch), ids, stats, batch)

    def _encode_list(self, table, specs, source, first_row, framed, rows):  # noqa: ANN001, ANN202
        """A `list<struct>` sequence column's SequenceExamples (a grouped layout's groups are
        encoded by transforms/sequence/beam.py, after the rows of a group meet)."""
        if self.sequence.grouped:
            raise ValueError("a grouped sequence layout is encoded by EncodeSequences")
        return encode_list_column(table, self.sequence, source, first_row, framed, rows)


def convert_batch(
    conversion: Conversion, batch: TableBatch, fitted: Mapping[int, Any]
) -> tuple[list[EncodedRows], BadRows]:
    """Every stage in its order for one source batch: its records (one EncodedRows per part
    that reached the encoder) and the rows a stage could not take."""
    out: list[EncodedRows] = []
    parts, bad = conversion.split(batch)
    for part in parts:
        part, failed = conversion.transform(part, fitted)
        bad += failed
        if part is None or part.table.num_rows == 0:
            continue
        for rows, failed in conversion.read_files(part):
            bad += failed
            if rows is None:
                continue
            encoded, failed = conversion.encode(rows)
            bad += failed
            if encoded is not None:
                out.append(encoded)
    return out, bad
