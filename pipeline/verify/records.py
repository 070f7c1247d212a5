"""The record side of `tfrecord-etl verify`: a shard's frames with every crc checked, and each
record checked against the manifest's features.

`read_frames` walks a shard's TFRecord frames with the format's own reader
(transforms/write/tfrecord.py) and turns its faults into findings. A bad data crc spoils one
record; a bad length crc, a record cut short or a stream that does not decompress ends the file
(nothing after it can be trusted).

`RecordChecker` clears the plainly valid records with a compiled check (scan.py) and parses the
others with `tf.io.parse_example` and the manifest's own spec (`pipeline.reader.spec.parse_spec`;
TensorFlow is imported for the first of them): a wrong kind, a fixed-length feature of another
length or a missing non-nullable feature fail the parse; the lengths of ragged features are
checked against the shapes; each record's feature keys (`keys.feature_presence`) give the
features the manifest does not list and, per feature, the records it is absent from (its null
count).
"""

from __future__ import annotations

import collections
import functools
import re
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from pipeline.output.manifest import StoredFeature
from pipeline.output.sections import with_derived
from pipeline.verify.keys import feature_presence
from pipeline.verify.report import Finding, Findings
from pipeline.verify.scan import feature_table, scan_records
from transforms.encode.features import FLOAT64_BYTES, nulls_key, row_lengths_key
from transforms.write import tfrecord

__all__ = ["BATCH", "Frame", "RecordChecker", "read_frames"]

BATCH = 2048  # records parsed and counted together (the order findings come in follows it)

_TF_NOISE = re.compile(r"\{\{function_node [^}]*\}\}|\[Op:\w+\]")  # op names in TF's errors

# (record index in the file, byte offset in the decompressed stream, data or None, fault or None)
Frame = tuple[int, int, bytes | None, Finding | None]


def read_frames(path: str, compression: str) -> Iterator[Frame]:
    """Every frame of the shard at `path`, crcs checked (transforms/write/tfrecord.py), with a
    fault as a Finding: (index, offset, data, finding)."""
    for index, offset, data, fault in tfrecord.read_frames(path, compression):
        finding = None
        if fault is not None:
            check, message = fault
            finding = Finding(check, message, file=path, record=index)
        yield index, offset, data, finding


_VALUES = "\0values:"  # the parse's key of a partitioned list's values, counted apart


def _row_sums(ragged: Any) -> np.ndarray:
    """Per row of a [rows, None] int64 RaggedTensor, the sum of its values."""
    splits = ragged.row_splits.numpy()
    totals = np.concatenate(([0], np.cumsum(ragged.flat_values.numpy())))
    return totals[splits[1:]] - totals[splits[:-1]]


def _row_mins(ragged: Any) -> np.ndarray:
    """Per row, its least value (0 for an empty row)."""
    values, splits = ragged.flat_values.numpy(), ragged.row_splits.numpy()
    mins = np.zeros(len(splits) - 1, np.int64)
    full = np.flatnonzero(np.diff(splits) > 0)
    if full.size:
        mins[full] = np.minimum.reduceat(values, splits[:-1][full])
    return mins


def _allowed_lengths(f: StoredFeature) -> tuple[str, Any] | None:
    """How many values a row of a ragged parse of `f` may hold: ("in", {..}), ("multiple", k)
    or None (any)."""
    shape = f.spec.shape
    if f.spec.partition_levels:  # RecordChecker._partitions checks them against the row lengths
        return None
    if f.spec.encoding == FLOAT64_BYTES:
        return ("in", {0, 1}) if f.nullable else None
    if shape is None:
        return None
    if f.ragged:
        return "multiple", int(np.prod(shape[1:], dtype=np.int64))
    return "in", {0, int(np.prod(shape, dtype=np.int64))}  # nullable fixed: absent or whole


def _bytes_per_value(f: StoredFeature) -> tuple[str, int] | None:
    """For float64_bytes: each value's byte length, exactly or as a multiple."""
    if f.spec.encoding != FLOAT64_BYTES:
        return None
    shape = f.spec.shape
    if shape is None:
        return "multiple", 8
    if f.ragged:
        return "multiple", 8 * int(np.prod(shape[1:], dtype=np.int64))
    return "exactly", 8 * int(np.prod(shape, dtype=np.int64))


def _level_items(f: StoredFeature, parsed: dict[str, Any], level: int) -> np.ndarray:
    """Per record of a parse, how many level-`level` items the row of list `f` holds: its
    values counted, then each level up its lists (the row lengths of a level that varies, the
    items over the dim of a fixed one)."""
    import tensorflow as tf

    spec = f.spec
    shape = spec.shape
    value = parsed[_VALUES + f.name] if spec.partition_levels else parsed[f.name]
    if spec.encoding == FLOAT64_BYTES:  # a row's float64s: one bytes value, 8 bytes each
        if not isinstance(value, tf.RaggedTensor):
            value = tf.RaggedTensor.from_tensor(tf.reshape(value, [-1, 1]))
        sizes = tf.strings.length(value.flat_values).numpy()
        per_row = value.row_lengths().numpy()
        ends = np.cumsum(per_row)
        totals = np.concatenate(([0], np.cumsum(sizes)))
        items = (totals[ends] - totals[ends - per_row]) // 8
    elif isinstance(value, tf.RaggedTensor):
        items = value.row_lengths().numpy()
    else:
        items = np.full(int(value.shape[0]), int(np.prod(shape, dtype=np.int64)), np.int64)
    depth = spec.list_levels
    for k in range(depth - 1, level - 1, -1):  # from the values' level up to `level`
        if shape[k] < 0:
            items = parsed[row_lengths_key(f.name, k)].row_lengths().numpy()
        else:
            items = items // max(shape[k], 1)
    return items


class RecordChecker:
    """Checks records against the manifest's features and counts each feature's absences."""

    def __init__(
        self, features: Sequence[StoredFeature], findings: Findings, rows: int = 0
    ) -> None:
        self.features = with_derived(features, rows)
        self.order = [f.name for f in self.features]
        self.findings = findings
        self.records = 0  # records checked
        self.present: collections.Counter[str] = collections.Counter()
        self.first_absent: dict[str, str] = {}  # feature -> "file: record i"
        self.unknown: dict[str, list] = {}  # key not in the manifest -> [count, first place]
        self.table = feature_table(self.features)

    @functools.cached_property
    def spec(self) -> dict[str, Any]:
        """The manifest's `tf.io.parse_example` spec: TensorFlow is imported for the first
        record the compiled check does not clear, not before."""
        import tensorflow as tf

        from pipeline.reader.spec import _KIND_DTYPES, parse_spec

        spec = parse_spec(self.features)
        for f in self.features:  # the values of a partitioned list as they are, to count them
            if f.spec.partition_levels:
                spec[_VALUES + f.name] = tf.io.RaggedFeature(
                    _KIND_DTYPES[f.spec.kind], value_key=f.name, row_splits_dtype=tf.int64
                )
        return spec

    def check_block(
        self, path: str, pieces: Sequence[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]]
    ) -> bool:
        """Check the records of `pieces`, each (data, starts, ends, indices): the records
        data[starts[i]:ends[i]], record indices[i] of `path`. When every one is plainly valid
        (scan.py): True, and they are counted; else False and nothing is counted (the caller
        checks them with `check`)."""
        t = self.table
        scanned = []
        for data, starts, ends, _ in pieces:
            plain, present = scan_records(
                data, starts, ends, t.names, t.name_offsets, t.slots, t.kinds, t.fixed, t.rule,
                t.rule_k, t.bytes_rule, t.value_bytes,
            )  # fmt: skip
            if not plain.all():
                return False
            scanned.append(present)
        for (_, starts, _, indices), present in zip(pieces, scanned, strict=True):
            self.records += len(starts)
            self._count(path, present, indices)
        return True

    def check(self, path: str, records: Sequence[bytes], indices: Sequence[int]) -> None:
        """Check one batch of records of the shard `path` (record indices in that file)."""
        self.records += len(records)
        self._parse(path, list(records), list(indices))
        self._keys(path, records, indices)

    def _parse(self, path: str, records: list[bytes], indices: list[int]) -> None:
        import tensorflow as tf

        try:
            parsed = tf.io.parse_example(tf.constant(records, tf.string), self.spec)
        except tf.errors.InvalidArgumentError as err:
            if len(records) == 1:
                reason = _TF_NOISE.sub("", err.message.split("\n")[0]).strip()
                self.findings.add(
                    Finding(
                        "parse",
                        f"{path}: record {indices[0]}: does not parse as the manifest's "
                        f"features: {reason}",
                        file=path,
                        record=indices[0],
                    )
                )
                return
            half = len(records) // 2
            self._parse(path, records[:half], indices[:half])
            self._parse(path, records[half:], indices[half:])
            return
        for f in self.features:
            self._shape(path, f, parsed[f.name], indices)
            if f.spec.partition_levels:
                self._partitions(path, f, parsed, indices)
            for level in f.null_levels:
                self._null_positions(path, f, parsed, level, indices)

    def _null_positions(
        self, path: str, f: StoredFeature, parsed: dict[str, Any], level: int, indices: list[int]
    ) -> None:
        """That the null positions of a list level name items of the record's row: each at
        least 0, below the row's count of level-`level` items, in increasing order (the
        readers mark them without a check)."""
        key = nulls_key(f.name, level)
        positions = parsed[key]
        counts = positions.row_lengths().numpy()
        if not counts.any():
            return
        items = _level_items(f, parsed, level)
        values, splits = positions.flat_values.numpy(), positions.row_splits.numpy()
        rows = np.repeat(np.arange(counts.shape[0]), counts)
        bad = (values < 0) | (values >= items[rows])
        later = np.ones(values.shape[0], np.bool_)
        later[1:] = values[1:] > values[:-1]
        later[splits[:-1][counts > 0]] = True  # a row's first position
        bad |= ~later
        for i in np.unique(rows[bad]):
            first = int(np.flatnonzero(bad & (rows == i))[0])
            self.findings.add(
                Finding(
                    "parse",
                    f"{path}: record {indices[i]}: feature {f.name!r}: {key!r} holds position "
                    f"{values[first]}, not one of the row's {items[i]} level-{level} items "
                    "in increasing order",
                    file=path,
                    record=indices[i],
                )
            )

    def _partitions(
        self, path: str, f: StoredFeature, parsed: dict[str, Any], indices: list[int]
    ) -> None:
        """That the row lengths of a list ragged below its first level partition its values
        (tf.io.parse_example builds the ragged value without checking them): per record, from
        the innermost level out, each level's lengths add up to the elements below it."""
        shape = f.spec.shape
        elements = parsed[_VALUES + f.name].row_lengths().numpy()  # of the innermost lists
        problems: dict[int, str] = {}
        for k in range(len(shape) - 1, -1, -1):
            if k > 0 and shape[k] < 0:
                lengths = parsed[row_lengths_key(f.name, k)]
                sums = _row_sums(lengths)
                bad = sums != elements
                bad |= _row_mins(lengths) < 0
                for i in np.flatnonzero(bad):
                    problems.setdefault(
                        int(i),
                        f"its row lengths {row_lengths_key(f.name, k)!r} add up to "
                        f"{sums[i]}, not the {elements[i]} elements below them",
                    )
                elements = lengths.row_lengths().numpy()
            elif shape[k] >= 0:
                size = max(shape[k], 1)
                # dim 0: a row without the feature (null) has no elements and is not checked
                bad = elements % size != 0 if k > 0 else (elements != shape[k]) & (elements > 0)
                for i in np.flatnonzero(bad):
                    problems.setdefault(
                        int(i), f"{elements[i]} elements where dim {k} is {shape[k]}"
                    )
                elements = elements // size
        for i, text in sorted(problems.items()):
            self.findings.add(
                Finding(
                    "parse",
                    f"{path}: record {indices[i]}: feature {f.name!r}: {text} "
                    f"(shape {list(shape)})",
                    file=path,
                    record=indices[i],
                )
            )

    def _shape(self, path: str, f: StoredFeature, value: Any, indices: list[int]) -> None:
        import tensorflow as tf

        problems: list[tuple[int, str]] = []
        if isinstance(value, tf.RaggedTensor):
            lengths = value.row_lengths().numpy()
            rule = _allowed_lengths(f)
            if rule is not None:
                kind, allowed = rule
                bad = ~np.isin(lengths, list(allowed)) if kind == "in" else lengths % allowed != 0
                words = f"one of {sorted(allowed)}" if kind == "in" else f"a multiple of {allowed}"
                problems += [
                    (i, f"{lengths[i]} values, expected {words}") for i in np.flatnonzero(bad)
                ]
            strings = value.flat_values
            rows = np.repeat(np.arange(len(lengths)), lengths)
        else:
            strings, rows = value, np.arange(len(indices))
        rule = _bytes_per_value(f)
        if rule is not None:
            sizes = tf.strings.length(tf.reshape(strings, [-1])).numpy()
            kind, size = rule
            bad = sizes != size if kind == "exactly" else sizes % size != 0
            words = f"{size}" if kind == "exactly" else f"a multiple of {size}"
            problems += [
                (rows[i], f"a float64 value of {sizes[i]} bytes, expected {words}")
                for i in np.flatnonzero(bad)
            ]
        for i, text in problems:
            self.findings.add(
                Finding(
                    "parse",
                    f"{path}: record {indices[i]}: feature {f.name!r}: {text} "
                    f"(shape {f.spec.shape}, encoding {f.spec.encoding})",
                    file=path,
                    record=indices[i],
                )
            )

    def _keys(self, path: str, records: Sequence[bytes], indices: Sequence[int]) -> None:
        present, unknown = feature_presence(records, self.order)
        self._count(path, present, indices)
        for key, rows in unknown.items():
            entry = self.unknown.setdefault(key, [0, f"{path}: record {indices[int(rows[0])]}"])
            entry[0] += len(rows)

    def _count(self, path: str, present: np.ndarray, indices: Sequence[int]) -> None:
        """Count each feature's presence in a batch; the first record it is absent from."""
        for name, count in zip(self.order, present.sum(axis=0).tolist(), strict=True):
            self.present[name] += count
            if count < len(present) and name not in self.first_absent:
                first = int(np.argmin(present[:, self.order.index(name)]))
                self.first_absent[name] = f"{path}: record {indices[first]}"

    def finish(self) -> None:
        """Report unknown features and null counts that differ from the manifest's."""
        for key, (count, first) in sorted(self.unknown.items()):
            self.findings.add(
                Finding(
                    "features",
                    f"feature {key!r} is in {count} record(s) but not in the manifest "
                    f"(first: {first})",
                )
            )
        for f in self.features:
            absent = self.records - self.present[f.name]
            if absent != f.null_count:
                first = self.first_absent.get(f.name)
                where = f" (first: {first})" if first else ""
                self.findings.add(
                    Finding(
                        "nulls",
                        f"feature {f.name!r} is absent from {absent} record(s){where}; the "
                        f"manifest's null_count is {f.null_count}",
                    )
                )
