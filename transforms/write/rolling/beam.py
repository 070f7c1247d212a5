"""The rolling write (the default): each worker writes the rows of its ReadTask as they come,
per split into files of the target size; no record crosses the network."""

from __future__ import annotations

from collections.abc import Iterator

import apache_beam as beam
from apache_beam.transforms.window import GlobalWindow
from apache_beam.utils.timestamp import MIN_TIMESTAMP
from apache_beam.utils.windowed_value import WindowedValue

from transforms.encode.records import EncodedBatch
from transforms.write.files import BlockFile, ShardPart, block_compressor, temp_path
from transforms.write.progress import SinkProgress
from transforms.write.rolling.task_files import TaskFiles

__all__ = ["RollingWriteFn"]


@beam.typehints.with_input_types(EncodedBatch)
@beam.typehints.with_output_types(ShardPart)
class RollingWriteFn(beam.DoFn):
    """EncodedBatch of one split -> ShardPart, each task's rows in files of the target size.
    `progress_dir`: where it reports what it has written (write/progress.py); None: nowhere."""

    def __init__(
        self,
        split: str,
        temp_dir: str,
        compression: str,
        level: int | None,
        backend: str,
        target_bytes: int,
        progress_dir: str | None = None,
        member_bytes: int | None = None,
    ) -> None:
        self._split = split
        self._progress_dir = progress_dir
        self._temp_dir = temp_dir
        self._compression = compression
        self._level, self._backend = level, backend
        self._target = target_bytes
        self._member_bytes = member_bytes

    def setup(self) -> None:
        self._compress = block_compressor(
            self._compression, self._level, self._backend, self._member_bytes
        )
        self._progress = None
        if self._progress_dir is not None:
            self._progress = SinkProgress(self._progress_dir, self._split)

    def start_bundle(self) -> None:
        self._tasks: dict[int, TaskFiles] = {}

    def _files(self, task: int) -> TaskFiles:
        def new_file(seq: int) -> BlockFile:
            order = (task, seq)
            path = temp_path(self._temp_dir, self._split, order, self._compression)
            told = None if self._progress is None else self._progress.add
            return BlockFile(path, self._compression, self._compress, order, self._split, told)

        return TaskFiles(new_file, self._target)

    def process(self, batch: EncodedBatch) -> Iterator[ShardPart]:
        if not batch.framed:
            raise ValueError("the shard writer needs framed records (EncodeExamples(framed=True))")
        for task in [t for t in self._tasks if t != batch.task]:  # a task's rows come together
            yield from self._tasks.pop(task).close()
        if batch.task not in self._tasks:
            self._tasks[batch.task] = self._files(batch.task)
        yield from self._tasks[batch.task].write(batch)

    def finish_bundle(self) -> Iterator[WindowedValue]:
        for files in self._tasks.values():
            for part in files.close():
                yield WindowedValue(part, MIN_TIMESTAMP, [GlobalWindow()])
        self._tasks = {}
        if self._progress is not None:
            self._progress.flush()
