"""PyTorch datasets over an output, without TensorFlow (`pip install ".[torch]"`).

- `TorchBatches`: a `torch.utils.data.IterableDataset` of whole batches (iter_batches). Each
  DataLoader worker of each distributed rank reads its own contiguous part of the split
  (partition rank * workers + worker of ranks * workers), so together they read every record
  once: give the DataLoader `batch_size=None`, the batches are made here.
- `TorchRecords`: a map-style `torch.utils.data.Dataset` of rows, over the index files of an
  output written with `--index` (pipeline/reader/index.py): any sampler, any order.

Numeric columns come as tensors; text and binary as lists of `bytes`; a ragged column as a
`Ragged` of tensors (values, row_lengths); masks as bool tensors.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import torch
from torch.utils.data import Dataset, IterableDataset, get_worker_info

from pipeline.reader.arrays import Ragged, iter_batches
from pipeline.reader.index import RecordIndex

__all__ = ["TorchBatches", "TorchRecords", "to_torch"]


def to_torch(value: Any) -> Any:
    """numpy -> torch: numeric arrays as tensors (sharing memory), bytes as lists, Ragged as a
    Ragged of tensors."""
    if isinstance(value, Ragged):
        return Ragged(to_torch(value.values), torch.from_numpy(value.row_lengths))
    if isinstance(value, np.ndarray):
        if value.dtype == np.object_:
            return value.tolist()
        if value.dtype in (np.uint16, np.uint32, np.uint64):  # no such tensors: widened
            value = value.astype(np.int64) if value.dtype != np.uint64 else value.view(np.int64)
        if not value.flags.c_contiguous:  # (ascontiguousarray would make a scalar 1-d)
            value = value.copy()
        return torch.from_numpy(value)
    if isinstance(value, np.generic):
        return to_torch(np.asarray(value)) if value.dtype != np.object_ else value.item()
    return value


def _rank() -> tuple[int, int]:
    """(rank, world size) of torch.distributed when it is set up, else (0, 1)."""
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        return torch.distributed.get_rank(), torch.distributed.get_world_size()
    return 0, 1


class TorchBatches(IterableDataset):
    """Batches of one split as dicts of tensors (see the module docstring). `rank` and
    `world_size` default to torch.distributed's; the other arguments are iter_batches'. With a
    shuffle, `set_epoch(e)` (as with a DistributedSampler) shuffles each pass anew."""

    def __init__(
        self,
        output: str,
        split: str = "train",
        batch_size: int = 128,
        columns: Sequence[str] | None = None,
        shuffle_buffer: int = 0,
        seed: int = 0,
        drop_remainder: bool = False,
        null_masks: bool = True,
        rank: int | None = None,
        world_size: int | None = None,
    ) -> None:
        super().__init__()
        self.output, self.split, self.batch_size = output, split, batch_size
        self.columns, self.shuffle_buffer, self.seed = columns, shuffle_buffer, seed
        self.drop_remainder, self.null_masks = drop_remainder, null_masks
        self.rank, self.world_size = rank, world_size
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def partition(self) -> tuple[int, int]:
        """(index, count) of the part this worker of this rank reads."""
        rank, world = _rank()
        rank = rank if self.rank is None else self.rank
        world = world if self.world_size is None else self.world_size
        info = get_worker_info()
        worker, workers = (0, 1) if info is None else (info.id, info.num_workers)
        return rank * workers + worker, world * workers

    def __iter__(self) -> Iterator[dict[str, Any]]:
        index, count = self.partition()
        batches = iter_batches(
            self.output,
            self.split,
            self.batch_size,
            self.columns,
            self.shuffle_buffer,
            seed=[self.seed, self.epoch, index],
            shard_index=index,
            num_shards=count,
            drop_remainder=self.drop_remainder,
            null_masks=self.null_masks,
        )
        for batch in batches:
            yield {k: to_torch(v) for k, v in batch.items()}


class TorchRecords(Dataset):
    """Rows of one split by number, over its index files (an output written with `--index`):
    `len(ds)`, `ds[i]` a dict (tensors, bytes, a ragged value a tensor), and `__getitems__`
    (what a DataLoader asks of a batch sampler's indices) decoded as one batch."""

    def __init__(
        self,
        output: str,
        split: str = "train",
        columns: Sequence[str] | None = None,
        null_masks: bool = True,
    ) -> None:
        self.output, self.split, self.columns, self.null_masks = output, split, columns, null_masks
        self._records: RecordIndex | None = None
        self._len = len(self._open())

    def _open(self) -> RecordIndex:
        if self._records is None:  # opened in each DataLoader worker (files are not shared)
            self._records = RecordIndex(self.output, self.split, self.columns, self.null_masks)
        return self._records

    def __len__(self) -> int:
        return self._len

    def __getitem__(self, i: int) -> dict[str, Any]:
        return {k: to_torch(v) for k, v in self._open()[int(i)].items()}

    def __getitems__(self, indices: Sequence[int]) -> list[dict[str, Any]]:
        batch = self._open().batch([int(i) for i in indices])
        columns = {k: v.rows() if isinstance(v, Ragged) else v for k, v in batch.items()}
        return [{k: to_torch(v[j]) for k, v in columns.items()} for j in range(len(indices))]

    def __getstate__(self) -> dict[str, Any]:  # a DataLoader worker opens its own files
        return {**self.__dict__, "_records": None}
