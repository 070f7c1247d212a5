"""The in-process engine: the job of pipeline/engines/beam/build.py run on this machine's cores,
without Beam.

For a local job Beam's own cost is most of a small run (importing Beam, building the graph and
starting the runner take about 3 s, docs/cli.md), and on a large one Beam's local runner is
slower with a second worker than without (docs/engines.md). This engine calls the very functions
the job's DoFns call (the stages of transforms/convert.py, the rolling writer's `TaskFiles`, the
grouped write's `ShardSpiller` and `write_shard`, the sequences' spill and `encode_groups`,
`finalize_shards`, the statistics, `finish_job`), in phases that each run their pieces of work
on `workers` processes (pool.py):

1. fit: each analysis pass of the preprocessing, one accumulator per work item, merged;
2. convert: each work item read, split, preprocessed, encoded; its records written (one
   worker: the rolling write as it goes), or spilled (blocks of the rolling splits, pieces by
   shard of the grouped ones, rows by bucket of a grouped sequence);
3. the grouped sequences' buckets encoded (and written, or spilled by shard);
4. the rolling files of each task assembled from its blocks (more than one worker), and the
   shards of each grouped split written from their pieces;
5. in this process: the shards renamed into place, the statistics and the bad rows written,
   the manifest (`finish_job`).

What a phase gives is merged in the order of its pieces, never in the order they finish, so the
output (shards, their names and row counts, statistics, manifest) is the same for any number of
workers, and the same as a Beam run's (tests/test_workers.py, tests/test_no_change.py). It
imports no Beam unless the job needs Beam's quantiles (a `bucketize` analyzer) or a compressed
local input. It runs any job whose inputs and output are local files, with the blocks sink
(pipeline/engines/choose.py).
"""

from __future__ import annotations

import contextlib
import functools
import uuid
from collections.abc import Iterator, Sequence
from typing import Any, TypeVar

import pipeline.engines.inprocess.units as units
from pipeline.engines.finish import finish_job
from pipeline.engines.inprocess.after_convert import (
    Bucket,
    Shard,
    ShardSlices,
    TaskBlocks,
    assemble_grouped_shard,
    assemble_task,
    encode_bucket,
    slice_shard,
    write_grouped_shard,
    write_grouped_slice,
)
from pipeline.engines.inprocess.heap import reuse_freed_memory
from pipeline.engines.inprocess.pool import run_items
from pipeline.engines.inprocess.units import (
    Job,
    Unit,
    UnitOutput,
    describe_unit,
    fit_unit,
    merge_output,
    plan_units,
)
from pipeline.engines.interface import EngineResult, RunContext
from pipeline.job.plan import JobPlan
from transforms import fs
from transforms.deadletter import ERRORS_DIR, first_bad_row, write_error_lines
from transforms.encode.records import BatchStats
from transforms.preprocess.artifacts import read_artifacts, transform_dir, write_artifacts
from transforms.preprocess.chain import prepare_fitted
from transforms.read.work import ReadTask
from transforms.stats.accumulator import StatisticsAccumulator
from transforms.stats.features import SplitStats
from transforms.stats.proto import write_statistics
from transforms.stats.sketches_file import write_sketches
from transforms.write.files import ShardFile, ShardPart
from transforms.write.finalize import finalize_shards
from transforms.write.grouped.pieces import SpillRef
from transforms.write.grouped.slices import Slice, SliceOut
from transforms.write.grouped.spill import BucketRef
from transforms.write.index import write_index
from transforms.write.layout import shard_prefix, shard_suffix

__all__ = ["InProcessEngine", "run_in_process"]

T = TypeVar("T")


def _fit(job: Job, units: Sequence[Unit], workers: int) -> dict[int, dict[str, Any]]:
    """Every analyzer's result (FitPreprocess): one read of the fit input per analysis pass,
    an accumulator per work item merged in their order; or a previous run's artifacts."""
    plan = job.plan
    if plan.artifacts is not None:
        return read_artifacts(plan.artifacts, plan.preprocess)
    from transforms.preprocess.analyzers import AnalyzeFn  # imports Beam's quantiles

    fitted: dict[int, dict[str, Any]] = {}
    for level in range(1, plan.preprocess.num_passes + 1):
        analyze = AnalyzeFn(plan.preprocess.analyzers(level))
        prepared = prepare_fitted(plan.preprocess, fitted)
        fit = functools.partial(fit_unit, job, analyze, level, prepared)
        with _run(fit, units, workers, describe_unit, _sizes(units)) as results:
            accs = [acc for _, acc in results]
        fitted = {**fitted, **analyze.extract_output(analyze.merge_accumulators(accs))}
    return fitted


def _sizes(units: Sequence[Unit]) -> list[float]:
    return [float(u.item.source_bytes) for u in units]


@contextlib.contextmanager
def _run(
    fn: Any, items: Sequence[T], workers: int, describe: Any, sizes: Any = None
) -> Iterator[Iterator]:
    """run_items' results, the workers stopped as soon as the caller leaves the block, also on
    an error or Ctrl-C in the caller's own code (not only when the generator is collected)."""
    results = run_items(fn, items, workers, describe, sizes)
    try:
        yield results
    finally:
        results.close()


class _Merged:
    """What the convert phase gave, merged task by task in the plan's order (a task's own
    output: its work items' merged in their order, whoever converted them)."""

    def __init__(self, job: Job) -> None:
        self.counts = BatchStats(0, {})
        self.bad: list[dict[str, Any]] = []
        self.statistics = StatisticsAccumulator(job.plan.specs) if job.statistics else None
        self.parts: dict[str, list[ShardPart]] = {name: [] for name, _ in job.splits}
        self.blocks: dict[tuple[str, int], list] = {}  # (split, task) -> BlockRefs
        self.pieces: dict[tuple[str, int], list[SpillRef]] = {}  # (split, shard) -> refs
        self.rows: dict[tuple[int, int], list] = {}  # (split index, bucket) -> RowsRefs

    def add_task(self, task: int, out: UnitOutput) -> None:
        self.counts = self.counts.merge(out.counts)
        self.bad += out.bad
        if self.statistics is not None and out.statistics is not None:
            self.statistics.merge(out.statistics)
        for name, parts in out.parts.items():
            self.parts[name] += parts
        for name, blocks in out.blocks.items():
            self.blocks.setdefault((name, task), []).extend(blocks)
        for name, pieces in out.pieces.items():
            for shard, ref in pieces:
                self.pieces.setdefault((name, shard), []).append(ref)
        for key, ref in out.rows:
            self.rows.setdefault(key, []).append(ref)


def _schedule(tasks: Sequence[ReadTask], workers: int) -> list[ReadTask | Unit]:
    """The convert phase's pieces of work, in the plan's order: whole read tasks (a worker
    writes a task's files as it goes, at no extra cost), and the work items of the tasks left
    when every worker has had its share of whole ones, which every worker helps with (their
    blocks assembled here: it costs a write and a copy, so only where it evens out the tail).

    One worker: every task whole. Fewer tasks than workers: every task split. Else the last
    `tasks % workers` tasks (at least one) are split: the whole ones go out first (largest
    first), then the items, which even out what the workers finish at."""
    if workers <= 1:
        return list(tasks)
    split_from = 0 if len(tasks) <= workers else len(tasks) - max(1, len(tasks) % workers)
    work: list[ReadTask | Unit] = []
    for task in tasks:
        if task.index >= split_from and len(task.items) > 1:
            work += [Unit(task.index, item) for item in task.items]
        else:
            work.append(task)
    return work


def _describe(piece: ReadTask | Unit) -> str:
    if isinstance(piece, Unit):
        return describe_unit(piece)
    return (
        "read task "
        + str(piece.index)
        + " ("
        + ", ".join(describe_unit(Unit(piece.index, item)) for item in piece.items[:3])
        + (", ..." if len(piece.items) > 3 else "")
        + ")"
    )


def _size(piece: ReadTask | Unit) -> float:
    items = (piece.item,) if isinstance(piece, Unit) else piece.items
    return float(sum(item.source_bytes for item in items))


def _convert(job: Job, tasks: Sequence[ReadTask], workers: int) -> _Merged:
    """Phase 2: every read task converted, whole on one worker or item by item on any
    (`_schedule`), merged task by task in their order. A split task's rolling files are
    assembled here from its blocks as soon as its last item is merged, while the workers go
    on (gzip and none: copies in the kernel; zlib's files are compressed in phase 4, on the
    workers)."""
    merged = _Merged(job)
    assemble_here = job.plan.config.compression != "zlib"
    work = _schedule(tasks, workers)

    def convert(piece: ReadTask | Unit) -> UnitOutput:
        if isinstance(piece, Unit):
            return units.convert_unit(job, piece, spill_blocks=True)
        return units.convert_task(job, piece)

    with _run(convert, work, workers, _describe, [_size(p) for p in work]) as results:
        _merge_converted(job, work, results, merged, assemble_here)
    return merged


def _merge_converted(
    job: Job, work: Sequence[ReadTask | Unit], results: Iterator, merged: _Merged, assemble: bool
) -> None:
    """Merge the convert phase's results task by task; assemble a split task's files when its
    last item is in."""
    pending: UnitOutput | None = None  # a split task's output so far
    for i, out in results:
        piece = work[i]
        if not isinstance(piece, Unit):
            merged.add_task(piece.index, out)
            continue
        if pending is None:
            pending = UnitOutput()
        merge_output(pending, out)
        if i + 1 < len(work) and getattr(work[i + 1], "task", None) == piece.task:
            continue  # the task goes on
        if assemble:
            for name, blocks in list(pending.blocks.items()):
                parts = assemble_task(job, TaskBlocks(name, piece.task, tuple(blocks)))
                pending.parts.setdefault(name, []).extend(parts)
            pending.blocks = {}
        merged.add_task(piece.task, pending)
        pending = None


def _buckets(job: Job, merged: _Merged, workers: int) -> None:
    """Phase 3: a grouped sequence's buckets, each encoded, then written or spilled by shard."""
    buckets = [Bucket(s, b, tuple(refs)) for (s, b), refs in sorted(merged.rows.items())]

    def encode(item: Bucket) -> Any:
        return encode_bucket(job, item)

    def describe(item: Bucket) -> str:
        return f"split {job.splits[item.split_index][0]}, sequence bucket {item.bucket}"

    sizes = [float(sum(r.stop - r.start for r in b.refs)) for b in buckets]
    with _run(encode, buckets, workers, describe, sizes) as results:
        for i, out in results:
            name = job.splits[buckets[i].split_index][0]
            merged.counts = merged.counts.merge(out.counts)
            merged.bad += out.bad
            merged.parts[name] += out.parts
            for shard, ref in out.pieces:
                merged.pieces.setdefault((name, shard), []).append(ref)


def _write(job: Job, merged: _Merged, workers: int) -> None:
    """Phase 4: the rolling files of each task from its blocks, and each grouped shard from its
    pieces (both only where phase 2 or 3 spilled); a shuffled shard, on several workers, in
    slices, which are then joined shard by shard."""
    tasks = [TaskBlocks(s, t, tuple(b)) for (s, t), b in sorted(merged.blocks.items())]
    shards = [Shard(s, n, tuple(r)) for (s, n), r in sorted(merged.pieces.items())]
    slices = {(shard.split, shard.shard): slice_shard(job, shard, workers) for shard in shards}
    whole = [shard for shard in shards if not slices[shard.split, shard.shard]]
    cut = [piece for pieces in slices.values() for piece in pieces]
    items: list[TaskBlocks | Shard | Slice] = [*tasks, *whole, *cut]

    def write(item: TaskBlocks | Shard | Slice) -> list[ShardPart] | SliceOut:
        if isinstance(item, TaskBlocks):
            return assemble_task(job, item)
        if isinstance(item, Slice):
            return write_grouped_slice(job, item)
        return [write_grouped_shard(job, item)]

    def describe(item: TaskBlocks | Shard | Slice) -> str:
        if isinstance(item, TaskBlocks):
            return f"split {item.split}, the files of read task {item.task}"
        if isinstance(item, Slice):
            return f"split {item.split}, shard {item.shard}, slice {item.index}"
        return f"split {item.split}, shard {item.shard}"

    def size(item: TaskBlocks | Shard | Slice) -> float:
        if isinstance(item, TaskBlocks):
            return float(sum(b.size for b in item.blocks))
        if isinstance(item, Slice):
            return float(item.framed_bytes)
        return float(sum(_spilled_bytes(r) for r in item.refs))

    outs: dict[tuple[str, int], dict[int, SliceOut]] = {}
    with _run(write, items, workers, describe, [size(x) for x in items]) as results:
        for i, result in results:
            item = items[i]
            if isinstance(item, Slice):
                outs.setdefault((item.split, item.shard), {})[item.index] = result
            else:
                merged.parts[item.split] += result
    joined = [
        ShardSlices(split, shard, tuple(written[i] for i in range(len(written))))
        for (split, shard), written in sorted(outs.items())
    ]
    with _run(
        functools.partial(assemble_grouped_shard, job),
        joined,
        workers,
        lambda item: f"split {item.split}, shard {item.shard}",
    ) as results:
        for i, part in results:
            merged.parts[joined[i].split].append(part)


def _spilled_bytes(ref: SpillRef) -> int:
    """The bytes a shard's reference points at in its spill file."""
    if isinstance(ref, BucketRef):
        return int(ref.byte_bounds[-1] - ref.byte_bounds[0])
    return ref.stop - ref.start


def run_in_process(
    plan: JobPlan, run_id: str | None = None, progress_dir: str | None = None, workers: int = 1
) -> str:
    """Run the job of `plan` on `workers` processes (1: this one); the manifest's path.
    `run_id` and `progress_dir` as in build_pipeline."""
    config = plan.config
    reuse_freed_memory()  # before the workers fork: they inherit it (heap.py)
    temp_dir = fs.join(config.output, f"beam-temp-shards-{uuid.uuid4().hex[:16]}")
    job = Job(plan, temp_dir, progress_dir)
    units = plan_units(plan)
    transform_files: list[str] = []
    if plan.preprocess is not None:
        fitted = _fit(job, units, workers)
        job.prepared = prepare_fitted(plan.preprocess, fitted)
        transform_files = write_artifacts(fitted, plan.preprocess, transform_dir(config.output))
    merged = _convert(job, plan.shards.tasks, workers)
    if job.grouped_sequence:
        _buckets(job, merged, workers)
    _write(job, merged, workers)
    shards: list[ShardFile] = []
    for name, _ in job.splits:
        prefix = shard_prefix(config.output, name, config.layout)
        suffix = shard_suffix(config.compression, config.layout)
        num_shards = job.grouping[name].num_shards
        shards += finalize_shards(
            None, merged.parts[name], name, prefix, config.compression, num_shards, temp_dir,
            False, suffix,
        )  # fmt: skip
    written = None
    if merged.statistics is not None:  # a split no row reached gets a file of zero counts
        written = {}
        for name, _ in job.splits:
            split_stats = merged.statistics.splits.get(name, SplitStats())
            written[name] = write_statistics(config.output, name, split_stats, plan.specs)
            if config.sketches:  # a span of an incremental dataset: merged into the whole's
                write_sketches(config.output, name, split_stats)
    error_files = write_error_lines(fs.join(config.output, ERRORS_DIR), merged.bad)
    indexes = None
    if config.index:  # each shard's index, on the workers (an inflate of the shard for gzip)
        index = functools.partial(write_index, compression=config.compression)
        paths = [s.path for s in shards]
        with _run(index, paths, workers, str, [float(s.bytes or 0) for s in shards]) as made:
            indexes = {paths[i]: path for i, path in made}
    return finish_job(
        None, plan, shards, merged.counts, first_bad_row(merged.bad), error_files, temp_dir,
        run_id, transform_files, written, indexes,
    )  # fmt: skip


class InProcessEngine:
    """The in-process engine behind the launcher's interface: it always writes here and now."""

    name = "in-process"
    takes_lease = True
    clears_output = True
    shows_progress = True
    lease_options = None
    waits = True
    still_running = False

    def __init__(self, workers: int = 1) -> None:
        self.workers = workers
        self.facts: dict[str, Any] = {"engine": self.name, "workers": workers}

    def run(self, plan: JobPlan, context: RunContext) -> EngineResult:
        run_in_process(plan, context.run_id, context.progress_dir, self.workers)
        return EngineResult.committed(plan.config.output, self.facts)
