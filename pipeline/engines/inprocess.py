"""The in-process engine: the job of pipeline/engines/beam/build.py run in this process, without
Beam.

For a small local job Beam's own cost is most of the run: importing Beam, building the graph
and starting the runner take about 3 s of the 4-5 s a 2,000-row job takes (docs/cli.md).
This engine calls the very functions the job's DoFns call, in the same order (the stages of
transforms/convert.py, the rolling writer's `TaskFiles`, `finalize_shards`, the statistics,
`finish_job`), one read task after another, so its output equals a Beam run's: the golden
cases run through both (tests/test_no_change.py). It imports no Beam unless the job needs
Beam's quantiles (a `bucketize` analyzer).

It runs the jobs that need no grouping and touch only local files (pipeline/engines/choose.py picks
it, and says why not): no `--num-shards` or `--shuffle`, no grouped sequences, the blocks
sink. `InProcessEngine` is its face to the launcher (pipeline/engines/interface.py).
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from pipeline.engines.finish import finish_job
from pipeline.engines.interface import EngineResult, RunContext
from pipeline.job.plan import JobPlan
from transforms import fs
from transforms.batch import TableBatch
from transforms.convert import Conversion
from transforms.deadletter import (
    ERRORS_DIR,
    first_bad_row,
    isolate_bad_rows,
    write_error_lines,
)
from transforms.encode.records import BatchStats
from transforms.preprocess.artifacts import read_artifacts, transform_dir, write_artifacts
from transforms.preprocess.chain import analysis_inputs, prepare_fitted
from transforms.read.work import ReadTask, read_work_item
from transforms.stats.accumulator import StatisticsAccumulator
from transforms.stats.features import SplitStats
from transforms.stats.proto import write_statistics
from transforms.write.files import BlockFile, ShardFile, ShardPart, block_compressor, temp_path
from transforms.write.finalize import finalize_shards
from transforms.write.layout import shard_prefix, shard_suffix
from transforms.write.progress import SinkProgress
from transforms.write.task_files import TaskFiles

__all__ = ["InProcessEngine", "run_in_process"]


BadRows = list[dict[str, Any]]


def _read(plan: JobPlan, task: ReadTask, on_bad: Callable[[dict], None]) -> Iterator[TableBatch]:
    """The batches of one read task, as the job's ReadTable gives them."""
    config = plan.config
    for item in task.items:
        for batch in read_work_item(
            item, plan.fmt, plan.schema, config.csv, config.batch_rows, on_bad=on_bad
        ):
            yield dataclasses.replace(batch, task=task.index)


def _fit_pass(
    plan: JobPlan, conversion: Conversion, level: int, fitted: Mapping[int, Any]
) -> dict[int, dict[str, Any]]:
    """The analyzers of pass `level` over the fit input (Analyze): the source, or its fit split;
    rows a step fails on are left out (the full run dead-letters them)."""
    from transforms.preprocess.analyzers import AnalyzeFn  # imports Beam's quantiles

    steps = plan.preprocess
    analyze = AnalyzeFn(steps.analyzers(level))
    acc = analyze.create_accumulator()
    prepared = prepare_fitted(steps, fitted)

    def inputs(batch: TableBatch) -> dict[int, Any]:
        return analysis_inputs(steps, level, batch, prepared)

    for task in plan.shards.tasks:
        for batch in _read(plan, task, lambda row: None):  # the full run reports them
            parts = [batch]
            if plan.fit_split is not None:
                parts = [p for p in conversion.split(batch)[0] if p.split == plan.fit_split]
            for part in parts:
                columns, _ = isolate_bad_rows(part, inputs, "transform")
                if columns is not None:
                    acc = analyze.add_input(acc, columns)
    return analyze.extract_output(analyze.merge_accumulators([acc]))


def _fit(plan: JobPlan, conversion: Conversion) -> dict[int, dict[str, Any]]:
    """Every analyzer's result (FitPreprocess): one read of the fit input per analysis pass, or
    a previous run's artifacts."""
    if plan.artifacts is not None:
        return read_artifacts(plan.artifacts, plan.preprocess)
    fitted: dict[int, dict[str, Any]] = {}
    for level in range(1, plan.preprocess.num_passes + 1):
        fitted = {**fitted, **_fit_pass(plan, conversion, level, fitted)}
    return fitted


class _Writers:
    """The rolling write of every split (RollingWriteFn's work): per split, the files of the
    task being read; a task's files close when the task is done."""

    def __init__(self, plan: JobPlan, temp_dir: str, progress_dir: str | None) -> None:
        config = plan.config
        self._config = config
        self._temp_dir = temp_dir
        self._target = plan.shards.target_bytes
        self._compress = block_compressor(
            config.compression, config.compression_level, config.gzip_backend
        )
        self._progress = {
            name: SinkProgress(progress_dir, name) if progress_dir is not None else None
            for name, _ in config.splits
        }
        self._open: dict[str, TaskFiles] = {}
        self.parts: dict[str, list[ShardPart]] = {name: [] for name, _ in config.splits}

    def write(self, split: str, task: int, records: Any) -> None:
        files = self._open.get(split)
        if files is None:
            files = self._open[split] = self._files(split, task)
        self.parts[split] += files.write(records)

    def _files(self, split: str, task: int) -> TaskFiles:
        compression = self._config.compression
        progress = self._progress[split]

        def new_file(seq: int) -> BlockFile:
            order = (task, seq)
            path = temp_path(self._temp_dir, split, order, compression)
            told = None if progress is None else progress.add
            return BlockFile(path, compression, self._compress, order, split, told)

        return TaskFiles(new_file, self._target)

    def close_task(self) -> None:
        for split, files in self._open.items():
            self.parts[split] += files.close()
        self._open = {}
        for progress in self._progress.values():
            if progress is not None:
                progress.flush()


def run_in_process(
    plan: JobPlan, run_id: str | None = None, progress_dir: str | None = None
) -> str:
    """Run the job of `plan` here; the manifest's path. `run_id` and `progress_dir` as in
    build_pipeline."""
    config = plan.config
    conversion = plan.conversion()
    splits = conversion.splits
    transform_files: list[str] = []
    prepared: Mapping[int, Any] = {}
    if plan.preprocess is not None:
        fitted = _fit(plan, conversion)
        prepared = prepare_fitted(plan.preprocess, fitted)
        transform_files = write_artifacts(fitted, plan.preprocess, transform_dir(config.output))
    temp_dir = fs.join(config.output, f"beam-temp-shards-{uuid.uuid4().hex[:16]}")
    writers = _Writers(plan, temp_dir, progress_dir)
    statistics = None  # the encoded rows' statistics, Examples only (as build.py)
    if config.stats and plan.sequence is None:
        statistics = StatisticsAccumulator(plan.specs)
    counts = BatchStats(0, {})
    bad: BadRows = []
    for task in plan.shards.tasks:
        for batch in _read(plan, task, bad.append):
            parts, failed = conversion.split(batch)
            bad += failed
            for part in parts:
                out, failed = conversion.transform(part, prepared)
                bad += failed
                if out is None:
                    continue
                encoded, failed = conversion.encode(out)
                bad += failed
                if encoded is None:
                    continue
                for name, records in encoded.by_split(splits):
                    writers.write(name, task.index, records)
                s = encoded.stats
                counts = counts.merge(
                    BatchStats(s.rows, s.nulls, encoded.split_rows(splits), s.steps)
                )
                if statistics is not None:
                    for name, rows in encoded.batches_by_split(splits):
                        statistics.add(name, rows)
        writers.close_task()
    shards: list[ShardFile] = []
    for name, _ in splits:
        prefix = shard_prefix(config.output, name, config.layout)
        suffix = shard_suffix(config.compression, config.layout)
        shards += finalize_shards(
            None, writers.parts[name], name, prefix, config.compression, 0, temp_dir, False, suffix
        )
    written = None
    if statistics is not None:  # a split no row reached gets a file of zero counts
        written = {
            name: write_statistics(
                config.output, name, statistics.splits.get(name, SplitStats()), plan.specs
            )
            for name, _ in splits
        }
    error_files = write_error_lines(fs.join(config.output, ERRORS_DIR), bad)
    return finish_job(
        None,
        plan,
        shards,
        counts,
        first_bad_row(bad),
        error_files,
        temp_dir,
        run_id,
        transform_files,
        written,
    )


class InProcessEngine:
    """The in-process engine behind the launcher's interface: it always writes here and now."""

    name = "in-process"
    takes_lease = True
    clears_output = True
    shows_progress = True
    lease_options = None
    waits = True
    still_running = False

    def __init__(self) -> None:
        self.facts: dict[str, Any] = {"engine": self.name}

    def run(self, plan: JobPlan, context: RunContext) -> EngineResult:
        run_in_process(plan, run_id=context.run_id, progress_dir=context.progress_dir)
        return EngineResult.committed(plan.config.output, self.facts)
