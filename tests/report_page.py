"""Helpers of the report tests: a hand-made output (manifest, shards, bad rows, statistics)
without running the job, and the numbers a report's HTML holds, parsed back."""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Mapping, Sequence
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pyarrow as pa
from conftest import plan_specs
from report_stats import add_statistics
from tensorflow_metadata.proto.v0 import statistics_pb2

from pipeline.output.manifest import BadRowFiles, Manifest


@dataclasses.dataclass(frozen=True)
class _Shard:
    path: str
    rows: int
    bytes: int


def make_output(
    out: Path,
    tables: Mapping[str, pa.Table],
    *,
    bad_rows: Sequence[dict[str, Any]] = (),
    statistics: bool = True,
    columns: dict[str, Any] | None = None,
) -> Path:
    """An output directory holding a manifest for `tables` (split -> its rows), one shard
    file per split (bytes that are not records: the report only sizes them), the bad rows in
    `_errors/`, and the splits' statistics (tests/report_stats.py)."""
    out.mkdir(parents=True, exist_ok=True)
    first = next(iter(tables.values()))
    specs = plan_specs(first, columns)
    shards = {}
    for i, (split, table) in enumerate(tables.items()):
        path = out / f"{split}-00000-of-00001.tfrecord.gz"
        path.write_bytes(b"x" * (1000 + 37 * i))
        shards[split] = [_Shard(str(path), table.num_rows, 1000 + 37 * i)]
    bad = None
    if bad_rows:
        errors = out / "_errors"
        errors.mkdir()
        lines = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in bad_rows)
        (errors / "errors-00000-of-00001.jsonl").write_text(lines, encoding="utf-8")
        bad = BadRowFiles(len(bad_rows), (str(errors / "errors-00000-of-00001.jsonl"),))
    nulls = {s.name: 0 for s in specs}
    manifest = Manifest.build(
        specs=specs,
        null_counts=nulls,
        rows={split: t.num_rows for split, t in tables.items()},
        shards=shards,
        output_dir=str(out),
        compression="gzip",
        sources=["in.parquet"],
        source_format="parquet",
        versions={"tfrecord-etl": "test"},
        bad_rows=bad,
    )
    (out / "manifest.json").write_text(json.dumps(manifest.to_json()), encoding="utf-8")
    if statistics:
        add_statistics(out, tables)
    return out


class _Cells(HTMLParser):
    """Every `<td data-value>` with its data attributes, the feature of its table, its text."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.cells: list[dict[str, str]] = []
        self.feature: str | None = None
        self._cell: dict[str, str] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: v or "" for k, v in attrs}
        if tag == "table":
            self.feature = a.get("data-feature")
        if tag == "td" and "data-value" in a:
            self._cell = {**a, "table-feature": self.feature or "", "text": ""}

    def handle_data(self, data: str) -> None:
        if self._cell is not None:
            self._cell["text"] += data

    def handle_endtag(self, tag: str) -> None:
        if tag == "td" and self._cell is not None:
            self.cells.append(self._cell)
            self._cell = None
        if tag == "table":
            self.feature = None


def page_cells(page: str) -> list[dict[str, str]]:
    parser = _Cells()
    parser.feed(page)
    return parser.cells


def feature_cells(page: str) -> dict[tuple[str, str, str], tuple[float, str]]:
    """(feature, split, stat) -> (exact value, shown text) of each feature table's cells."""
    return {
        (c["table-feature"], c["data-split"], c["data-stat"]): (float(c["data-value"]), c["text"])
        for c in page_cells(page)
        if c["table-feature"] and "data-split" in c
    }


CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")  # shown as U+FFFD


# The report's labels -> how each is read from a FeatureNameStatistics (the expected values).
def _common(f: statistics_pb2.FeatureNameStatistics) -> statistics_pb2.CommonStatistics:
    return getattr(f, f.WhichOneof("stats")).common_stats


EXPECTED = {
    "present": lambda f: _common(f).num_non_missing,
    "missing": lambda f: _common(f).num_missing,
    "mean": lambda f: f.num_stats.mean,
    "std dev": lambda f: f.num_stats.std_dev,
    "zeros": lambda f: f.num_stats.num_zeros,
    "min": lambda f: f.num_stats.min,
    "median": lambda f: f.num_stats.median,
    "max": lambda f: f.num_stats.max,
    "unique": lambda f: f.string_stats.unique or f.bytes_stats.unique,
    "avg length": lambda f: f.string_stats.avg_length,
    "avg bytes": lambda f: f.bytes_stats.avg_num_bytes,
    "min bytes": lambda f: f.bytes_stats.min_num_bytes,
    "max bytes": lambda f: f.bytes_stats.max_num_bytes,
    "min values": lambda f: _common(f).min_num_values,
    "avg values": lambda f: _common(f).avg_num_values,
    "max values": lambda f: _common(f).max_num_values,
}


def check_numbers(page: str, stats_files: Mapping[str, Path]) -> int:
    """Assert that each statistic of each feature and split is in the page, its exact value
    and its shown text equal to the proto's; the number of values checked."""
    cells = feature_cells(page)
    checked = 0
    for split, path in stats_files.items():
        dataset = statistics_pb2.DatasetFeatureStatisticsList.FromString(path.read_bytes())
        for f in dataset.datasets[0].features:
            name = f.name or ".".join(f.path.step)  # the job writes `path`, tests may write `name`
            common = _common(f)
            total = common.num_non_missing + common.num_missing
            expected = {
                "rows": dataset.datasets[0].num_examples,
                "null rate": common.num_missing / total if total else 0.0,
            }
            for stat, read in EXPECTED.items():
                key = (name, split, stat)
                if key in cells or stat in ("present", "missing"):
                    expected[stat] = read(f)
            kind = f.WhichOneof("stats")
            if kind == "num_stats":
                assert {"mean", "std dev", "zeros", "min", "median", "max"} <= set(expected)
            for stat, value in expected.items():
                got, text = cells[(name, split, stat)]
                assert got == float(value), (name, split, stat, got, value)
                shown = float(text.replace(",", ""))
                assert shown == float(format(value, ".6g")) or shown == value, (text, value)
                checked += 1
            for top in f.string_stats.top_values:
                value = CONTROL.sub("\ufffd", top.value)
                got, text = cells[(name, split, "top " + value)]
                assert got == top.frequency and float(text.replace(",", "")) == top.frequency
                checked += 1
    return checked
