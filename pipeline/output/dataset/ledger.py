"""dataset.json: the manifest of an incremental dataset and the ledger of its inputs.

A span is one run's complete output in `<output>/span-NNNNN/`; dataset.json lists the live spans
in order, each with the inputs it converted, and the spans retired since (re-converted into a
later span, their directories removed). It is written last by the run that adds a span, after
the span's own manifest: a span missing from it is not part of the dataset (a run killed before
it committed) and the next run removes that directory.

An input is known by its path, its size and its modification time (the store's last-modified
time on gs://, s3:// and azfs://, as the match of the inputs reports it: Beam's, or
transforms/fs_azure.py's on azfs://); `rows` is the rows its Parquet footer
holds, None for CSV and JSON Lines (counted for the span as a whole).

A span's directory is always `span-NNNNN` of its number: `read_dataset` refuses any other name
(an absolute path, `..`, a scheme), so a hand-edited ledger never makes a reader, `verify` or a
re-run reach outside the dataset.

`statistics` names the statistics of the whole dataset (every live span's rows, merged by
statistics.py) and the spans they cover: `statistics/after-span-NNNNN/<split>/`, NNNNN the span
whose commit wrote them; a split is named as a config names it (letters, digits, _).
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from pipeline.output.entries import check_no_link, is_link, link_error, list_files
from transforms import fs

__all__ = [
    "DATASET_NAME",
    "DATASET_VERSION",
    "TEMP_PREFIX",
    "WHOLE_STATISTICS_DIR",
    "Dataset",
    "InputChanges",
    "LedgerInput",
    "SpanEntry",
    "WholeStatistics",
    "compare_inputs",
    "is_dataset",
    "read_dataset",
    "span_dirs",
    "span_name",
    "span_number",
    "write_dataset",
]

DATASET_NAME = "dataset.json"
DATASET_VERSION = 1
TEMP_PREFIX = f"{DATASET_NAME}.tmp-"  # dataset.json being written on a local disk
_SPAN = re.compile(r"span-(\d{5})\Z")
WHOLE_STATISTICS_DIR = "statistics"  # the whole dataset's: statistics/after-span-NNNNN/<split>/
_SPLIT = re.compile(r"[A-Za-z0-9_]+\Z")


def span_name(number: int) -> str:
    """The directory of span `number`: `span-00007`."""
    return f"span-{number:05d}"


def span_number(name: str) -> int | None:
    """The number of a span directory's name, None for any other name."""
    found = _SPAN.match(name)
    return None if found is None else int(found.group(1))


@dataclasses.dataclass(frozen=True)
class LedgerInput:
    """One converted input: what it was when its span read it."""

    path: str
    bytes: int
    modified: float  # seconds since the epoch
    rows: int | None = None  # the Parquet footer's rows; None: not known per file

    def to_json(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "bytes": self.bytes,
            "modified": self.modified,
            "rows": self.rows,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> LedgerInput:
        rows = data.get("rows")
        return cls(
            str(data["path"]),
            int(data["bytes"]),
            float(data["modified"]),
            None if rows is None else int(rows),
        )


@dataclasses.dataclass(frozen=True)
class SpanEntry:
    """One span: its number, when it was committed, its counts and the inputs it converted."""

    span: int
    created: str
    rows: int  # records written
    bad: int  # rows set aside in the span's _errors/
    inputs: tuple[LedgerInput, ...]
    transform: str | None = None  # "fitted", "reused" or None (no analyzer)
    retired_by: int | None = None  # the span that re-converted its inputs (retired spans only)

    @property
    def name(self) -> str:
        return span_name(self.span)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "span": self.span,
            "dir": self.name,
            "created": self.created,
            "rows": self.rows,
            "bad": self.bad,
            "transform": self.transform,
            "inputs": [i.to_json() for i in self.inputs],
        }
        if self.retired_by is not None:
            out["retired_by"] = self.retired_by
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any], path: str) -> SpanEntry:
        number = int(data["span"])
        if number < 1 or data.get("dir") != span_name(number):
            raise ValueError(
                f"{path}: span {number}: its directory is {data.get('dir')!r}; a span's "
                f"directory is {span_name(max(number, 1))!r} inside the dataset, nothing else"
            )
        retired = data.get("retired_by")
        return cls(
            number,
            str(data["created"]),
            int(data["rows"]),
            int(data["bad"]),
            tuple(LedgerInput.from_json(i) for i in data["inputs"]),
            data.get("transform"),
            None if retired is None else int(retired),
        )


@dataclasses.dataclass(frozen=True)
class WholeStatistics:
    """The statistics of the whole dataset: the spans they cover, written by the commit of the
    last of them, per split `<dir>/<split>/FeatureStats.pb` (and `sketches.npz`, to merge more
    spans into)."""

    spans: tuple[int, ...]
    splits: tuple[str, ...]

    @property
    def dir(self) -> str:
        return f"{WHOLE_STATISTICS_DIR}/after-{span_name(max(self.spans, default=0))}"

    def to_json(self) -> dict[str, Any]:
        return {"spans": list(self.spans), "dir": self.dir, "splits": list(self.splits)}

    @classmethod
    def from_json(cls, data: Mapping[str, Any], path: str) -> WholeStatistics:
        try:
            spans = tuple(int(s) for s in data["spans"])
        except ValueError as err:
            raise ValueError(f"{path}: statistics: a span that is not a number: {err}") from err
        splits = tuple(str(s) for s in data["splits"])
        made = cls(spans, splits)
        if not spans or data.get("dir") != made.dir or not all(_SPLIT.match(s) for s in splits):
            raise ValueError(
                f"{path}: statistics: {data.get('dir')!r} with splits {list(splits)}; the whole "
                f"dataset's statistics are in {made.dir!r}, split names letters, digits and _"
            )
        return made


@dataclasses.dataclass(frozen=True)
class Dataset:
    """dataset.json: the live spans in order and the retired ones."""

    spans: tuple[SpanEntry, ...] = ()
    retired: tuple[SpanEntry, ...] = ()
    updated: str | None = None
    statistics: WholeStatistics | None = None  # None: none that cover the live spans

    def whole_statistics(self) -> WholeStatistics | None:
        """The whole dataset's statistics when they cover exactly its live spans."""
        s = self.statistics
        return s if s is not None and list(s.spans) == self.numbers else None

    @property
    def rows(self) -> int:
        return sum(s.rows for s in self.spans)

    @property
    def next_span(self) -> int:
        """The next span's number: after every span ever made, retired ones included."""
        return max((s.span for s in (*self.spans, *self.retired)), default=0) + 1

    def ledger(self) -> dict[str, tuple[SpanEntry, LedgerInput]]:
        """Every live span's inputs by path, with the span that holds each."""
        return {i.path: (s, i) for s in self.spans for i in s.inputs}

    def span(self, number: int) -> SpanEntry:
        for s in self.spans:
            if s.span == number:
                return s
        raise ValueError(f"span {number} is not a live span of the dataset (live: {self.numbers})")

    @property
    def numbers(self) -> list[int]:
        return [s.span for s in self.spans]

    def with_span(self, new: SpanEntry, retire: Iterable[int] = ()) -> Dataset:
        """This dataset with `new` added and the spans `retire` moved to the retired ones."""
        gone = set(retire)
        kept = tuple(s for s in self.spans if s.span not in gone)
        retired = tuple(
            dataclasses.replace(s, retired_by=new.span) for s in self.spans if s.span in gone
        )
        now = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
        return Dataset((*kept, new), (*self.retired, *retired), now)

    def to_json(self) -> dict[str, Any]:
        out = {
            "dataset_version": DATASET_VERSION,
            "updated": self.updated,
            "rows": self.rows,
            "spans": [s.to_json() for s in self.spans],
            "retired": [s.to_json() for s in self.retired],
        }
        if self.statistics is not None:
            out["statistics"] = self.statistics.to_json()
        return out

    @classmethod
    def from_json(cls, data: Any, path: str) -> Dataset:
        if not isinstance(data, Mapping):
            raise ValueError(f"{path}: not a JSON object")
        if data.get("dataset_version") != DATASET_VERSION:
            raise ValueError(
                f"{path}: dataset_version {data.get('dataset_version')} is not supported"
            )
        try:
            spans = tuple(SpanEntry.from_json(s, path) for s in data["spans"])
            retired = tuple(SpanEntry.from_json(s, path) for s in data.get("retired", []))
            found = data.get("statistics")
            statistics = None if found is None else WholeStatistics.from_json(found, path)
        except (KeyError, TypeError, AttributeError) as err:
            raise ValueError(f"{path}: a malformed entry: {err!r}") from err
        numbers = [s.span for s in (*spans, *retired)]
        if len(set(numbers)) != len(numbers):
            raise ValueError(f"{path}: a span number is listed twice: {sorted(numbers)}")
        return cls(spans, retired, data.get("updated"), statistics)


def _path(output: str) -> str:
    return check_no_link(output, fs.join(output, DATASET_NAME))


def is_dataset(output: str) -> bool:
    """Whether `output` holds an incremental dataset (its dataset.json)."""
    return fs.exists(fs.join(output, DATASET_NAME))


def read_dataset(output: str) -> Dataset | None:
    """The dataset in `output`, None when it holds none; ValueError when dataset.json is
    malformed, reached through a link, or names a span directory other than `span-NNNNN`."""
    path = _path(output)
    if not fs.exists(path):
        return None
    with fs.open_read(path) as f:
        try:
            data = json.loads(f.read().decode("utf-8"))
        except ValueError as err:
            raise ValueError(f"{path}: not valid JSON: {err}") from err
    return Dataset.from_json(data, path)


def write_dataset(output: str, dataset: Dataset) -> str:
    """Write dataset.json: the dataset's commit point. On a local disk a temp file renamed over
    the old one (a reader sees the old or the new file, never half of one); on an object store
    one upload, which becomes visible whole."""
    path = _path(output)
    data = json.dumps(dataset.to_json(), indent=2).encode("utf-8")
    if fs.is_local(path):
        temp = fs.join(output, f"{TEMP_PREFIX}{os.getpid()}")
        with open(temp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(temp, path)
        return path
    with fs.FileSystems.create(path, mime_type="application/json") as f:
        f.write(data)
    return path


def span_dirs(output: str) -> dict[int, list[str]]:
    """The span directories in `output` (number -> what to delete to remove it). A link named
    as a span, or as dataset.json, is refused (LinkInOutputError)."""
    found: dict[int, list[str]] = {}
    if fs.is_local(output):
        if not os.path.isdir(output):
            return found
        for e in os.scandir(output):
            number = span_number(e.name)
            if number is None and e.name != DATASET_NAME:
                continue
            if is_link(e.path):
                raise link_error(output, e.path)
            if number is not None:
                found[number] = [e.path]
        return found
    for path in list_files(output, [fs.join(output, "span-*/**")]):
        name = path[len(output.rstrip("/")) + 1 :].split("/", 1)[0]
        number = span_number(name)
        if number is not None:
            found.setdefault(number, []).append(path)
    return found


@dataclasses.dataclass(frozen=True)
class InputChanges:
    """The inputs found now against the ledger of the live spans."""

    new: tuple[LedgerInput, ...]  # not in any live span
    changed: tuple[tuple[LedgerInput, LedgerInput, int], ...]  # (then, now, span holding it)
    gone: tuple[tuple[LedgerInput, int], ...]  # in a live span, no longer found
    unchanged: int

    def describe_changed(self, limit: int = 5) -> str:
        shown = [
            f"{now.path} (span {span}: {then.bytes} bytes, modified {_when(then.modified)}; "
            f"now {now.bytes} bytes, modified {_when(now.modified)})"
            for then, now, span in self.changed[:limit]
        ]
        more = len(self.changed) - len(shown)
        return "; ".join(shown) + (f"; and {more} more" if more else "")


def _when(seconds: float) -> str:
    return datetime.datetime.fromtimestamp(seconds, datetime.UTC).isoformat(timespec="seconds")


def compare_inputs(dataset: Dataset, found: Sequence[LedgerInput]) -> InputChanges:
    """What is new, changed (another size or modification time) and gone since the live spans
    converted their inputs."""
    ledger = dataset.ledger()
    new, changed = [], []
    unchanged = 0
    for now in found:
        known = ledger.get(now.path)
        if known is None:
            new.append(now)
        elif (known[1].bytes, known[1].modified) != (now.bytes, now.modified):
            changed.append((known[1], now, known[0].span))
        else:
            unchanged += 1
    here = {i.path for i in found}
    gone = [(i, s.span) for path, (s, i) in ledger.items() if path not in here]
    return InputChanges(tuple(new), tuple(changed), tuple(gone), unchanged)
