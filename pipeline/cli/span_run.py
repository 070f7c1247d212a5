"""A span's run of `convert --incremental` (pipeline/cli/incremental.py): what it converts
(`SpanPlan`), and its commit once its output is complete (`SpanRun`):

1. the whole dataset's statistics: the new span's saved statistics accumulators merged into
   the last ones (pipeline/output/dataset/statistics.py), in a directory of their own;
2. dataset.json rewritten with the span, its inputs (the ledger) and those statistics: the
   commit point;
3. the retired spans' directories and the statistics dataset.json no longer names removed
   (a failure there is a warning: the next run removes them).
"""

from __future__ import annotations

import dataclasses
import os
import sys
import time
from collections.abc import Sequence
from typing import Any

from pipeline.cli.convert import Run
from pipeline.cli.errors import EXIT_FAILED
from pipeline.cli.summary import run_summary, summary_line
from pipeline.engines.interface import EngineResult
from pipeline.job.plan import JobPlan
from pipeline.output.dataset import Dataset, LedgerInput, SpanEntry, write_dataset
from pipeline.output.dataset.ledger import span_dirs
from pipeline.output.dataset.statistics import merge_whole_statistics, remove_stale
from pipeline.output.entries import delete
from pipeline.output.manifest import read_manifest
from transforms import fs

__all__ = ["SpanPlan", "SpanRun", "remove_spans"]


@dataclasses.dataclass(frozen=True)
class SpanPlan:
    """The next span: its number, the inputs it converts, the spans it retires."""

    number: int
    inputs: tuple[LedgerInput, ...]
    retire: tuple[int, ...] = ()


def remove_spans(output: str, numbers: Sequence[int], found: dict[int, list[str]]) -> None:
    paths = [p for n in numbers for p in found.get(n, [])]
    delete(output, paths)


def _input_rows(plan: JobPlan) -> dict[str, int | None]:
    """Rows per input file, where the plan knows them (Parquet row groups); None elsewhere."""
    rows: dict[str, int | None] = {}
    for item in plan.work:
        path = os.path.abspath(item.path) if fs.is_local(item.path) else item.path
        known = rows.get(path, 0)
        rows[path] = None if item.num_rows is None or known is None else known + item.num_rows
    return rows


def _warn(text: str) -> None:
    print(f"tfrecord-etl: warning: {text}", file=sys.stderr)


class SpanRun(Run):
    """A span's run: its summary names the dataset and the span, and its success commits the
    span to dataset.json before it is reported."""

    def __init__(self, run: Run, dataset_dir: str, dataset: Dataset, step: SpanPlan) -> None:
        super().__init__(run.output)
        self.start = run.start
        self.date = run.date
        self.dataset_dir = dataset_dir
        self.dataset = dataset
        self.step = step
        self.plan: JobPlan | None = None
        self.facts: dict[str, Any] = {}

    def report(self, code: int, status: str, **extra: Any) -> int:
        summary = run_summary(
            status=status,
            exit_code=code,
            seconds=time.monotonic() - self.start,
            output=self.dataset_dir,
            date=self.date,
            **{**self.facts, **extra},
        )
        print(summary_line(summary), flush=True)
        return code

    def _commit(self, result: EngineResult) -> Dataset:
        manifest = result.manifest
        assert manifest is not None and self.plan is not None  # a succeeded run committed one
        rows = _input_rows(self.plan)
        inputs = tuple(dataclasses.replace(i, rows=rows.get(i.path)) for i in self.step.inputs)
        preprocess = self.plan.preprocess
        transform = None
        if self.plan.artifacts is not None:
            transform = "reused"
        elif preprocess is not None and preprocess.analyzers():
            transform = "fitted"
        entry = SpanEntry(
            self.step.number,
            str(manifest.created),
            int(manifest.rows or 0),
            manifest.bad_row_count,
            inputs,
            transform,
        )
        dataset = self.dataset.with_span(entry, self.step.retire)
        new_splits = tuple(manifest.statistics or {})

        def splits(span: int) -> Sequence[str]:
            if span == entry.span:
                return new_splits
            earlier = read_manifest(fs.join(self.dataset_dir, dataset.span(span).name))
            return tuple(earlier.statistics or {})

        whole = None
        if new_splits:
            whole = merge_whole_statistics(
                self.dataset_dir, self.dataset, dataset, splits, self.plan.specs, _warn
            )
        dataset = dataclasses.replace(dataset, statistics=whole)
        write_dataset(self.dataset_dir, dataset)
        return dataset

    def succeeded(self, result: EngineResult, write_report: bool) -> int:
        try:
            dataset = self._commit(result)
        except (OSError, ValueError) as err:
            message = f"the span is complete, but the dataset could not commit it: {err}"
            print(f"tfrecord-etl: error: {message}", file=sys.stderr)
            return self.report(EXIT_FAILED, "failed", **result.facts, error=message)
        if self.step.retire:
            try:
                remove_spans(self.dataset_dir, self.step.retire, span_dirs(self.dataset_dir))
            except (OSError, ValueError) as err:
                print(
                    f"tfrecord-etl: warning: could not remove the retired span(s) "
                    f"{list(self.step.retire)}: {err} (the next run removes them)",
                    file=sys.stderr,
                )
        try:
            remove_stale(self.dataset_dir, dataset)
        except (OSError, ValueError) as err:
            print(
                f"tfrecord-etl: warning: could not remove the dataset's earlier statistics: "
                f"{err} (the next run removes them)",
                file=sys.stderr,
            )
        self.facts["dataset_rows"] = dataset.rows
        self.facts["spans"] = dataset.numbers
        print(
            f"dataset: {self.dataset_dir}  span {self.step.number} committed "
            f"({len(dataset.spans)} live span(s), {dataset.rows} rows in all)"
        )
        return super().succeeded(result, write_report)
