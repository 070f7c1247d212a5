"""Splits: each record goes to a split chosen by a stable hash, and an encoded batch is cut into
one batch per split.

The hash is the project's 64-bit hash (FNV-1a 64 then MurmurHash3's fmix64, see
transforms/preprocess/hashing.py) of the salt's UTF-8 bytes followed by the key: the key
column's value bytes (UTF-8 text, binary, an integer's decimal text; a null is no bytes), or,
without a key column, the row's serialized tf.train.Example. It depends on nothing but those
bytes, so a row lands in the same split across runs, runners and machines.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from transforms.preprocess.hashing import hash_ranges_kernel

__all__ = ["assign_splits", "hash_ranges", "partition_records"]

HEADER_BYTES, FOOTER_BYTES = 12, 4  # TFRecord frame: length (8) + its crc (4) ... data crc (4)


def hash_ranges(starts: np.ndarray, ends: np.ndarray, data: np.ndarray, salt: str) -> np.ndarray:
    """uint64 hash of salt + data[starts[i]:ends[i]] for each i."""
    salt_bytes = np.frombuffer(salt.encode("utf-8"), np.uint8) if salt else np.empty(0, np.uint8)
    return hash_ranges_kernel(
        np.asarray(starts, np.int64), np.asarray(ends, np.int64), data, salt_bytes
    )


def _key_hashes(column: pa.Array | pa.ChunkedArray, salt: str) -> np.ndarray:
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks()
    if pa.types.is_dictionary(column.type):
        column = column.dictionary_decode()
    if pa.types.is_integer(column.type):
        column = pc.cast(column, pa.string())
    column = pc.fill_null(pc.cast(column, pa.large_binary()), b"")
    _, offsets_buf, data_buf = column.buffers()
    offsets = np.frombuffer(offsets_buf, np.int64)[column.offset : column.offset + len(column) + 1]
    data = np.frombuffer(data_buf, np.uint8) if data_buf is not None else np.empty(0, np.uint8)
    return hash_ranges(offsets[:-1], offsets[1:], data, salt)


def assign_splits(
    weights: list[int],
    salt: str,
    *,
    key: pa.Array | pa.ChunkedArray | None = None,
    buffer: np.ndarray | None = None,
    offsets: np.ndarray | None = None,
    framed: bool = False,
) -> np.ndarray:
    """The split index of each row: hash % sum(weights), placed in the cumulative weights.

    The key is the `key` column, or else each record `buffer[offsets[i]:offsets[i+1]]` (its
    Example bytes only, without the TFRecord frame, so both sinks agree).
    """
    if key is not None:
        hashes = _key_hashes(key, salt)
    else:
        starts, ends = offsets[:-1], offsets[1:]
        if framed:
            starts, ends = starts + HEADER_BYTES, ends - FOOTER_BYTES
        hashes = hash_ranges(starts, ends, buffer, salt)
    bounds = np.cumsum(np.asarray(weights, dtype=np.uint64))
    return np.searchsorted(bounds, hashes % bounds[-1], side="right").astype(np.int64)


def partition_records(
    buffer: np.ndarray, offsets: np.ndarray, ids: np.ndarray, count: int
) -> list[tuple[np.ndarray, np.ndarray] | None]:
    """Cut records (record i = buffer[offsets[i]:offsets[i+1]]) into `count` groups by `ids`,
    keeping their order; None for a group with no record."""
    lengths = np.diff(offsets)
    byte_ids = np.repeat(ids, lengths)
    start = int(offsets[0])
    out: list[tuple[np.ndarray, np.ndarray] | None] = []
    for s in range(count):
        chosen = ids == s
        if not chosen.any():
            out.append(None)
            continue
        data = buffer[start : start + len(byte_ids)][byte_ids == s]
        off = np.zeros(int(chosen.sum()) + 1, dtype=np.int64)
        np.cumsum(lengths[chosen], out=off[1:])
        out.append((data, off))
    return out
