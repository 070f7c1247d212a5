"""Benchmark tables (seeded, vectorized: millions of rows in seconds) and their Parquet files."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

TABLES = ("basic", "strings", "arrays")


def _random_strings(rng: np.random.Generator, n: int, lo: int, hi: int) -> pa.Array:
    """n random lowercase strings with lengths uniform in [lo, hi]."""
    lengths = rng.integers(lo, hi + 1, n)
    offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    letters = np.frombuffer(b"abcdefghijklmnopqrstuvwxyz     ", dtype=np.uint8)
    data = letters[rng.integers(0, len(letters), int(offsets[-1]))]
    return pa.LargeStringArray.from_buffers(n, pa.py_buffer(offsets), pa.py_buffer(data)).cast(
        pa.string()
    )


def _vocab_column(rng: np.random.Generator, n: int, size: int, lo: int, hi: int) -> pa.Array:
    vocab = _random_strings(rng, size, lo, hi)
    return vocab.take(pa.array(rng.zipf(1.3, n) % size))


def _var_list(
    rng: np.random.Generator,
    n: int,
    lo: int,
    hi: int,
    values: pa.Array | None,
    make: Callable[[int], pa.Array] | None = None,
) -> pa.Array:
    """A list column: row lengths uniform in [lo, hi]; elements from `make(total)`."""
    lengths = rng.integers(lo, hi + 1, n)
    offsets = np.zeros(n + 1, dtype=np.int32)
    np.cumsum(lengths, out=offsets[1:])
    total = int(offsets[-1])
    elements = (
        make(total)
        if make is not None
        else values.take(  # type: ignore[union-attr]
            pa.array(rng.integers(0, len(values), total))  # type: ignore[arg-type]
        )
    )
    return pa.ListArray.from_arrays(pa.array(offsets), elements)


def _fixed(values: np.ndarray, *shape: int) -> pa.Array:
    """A fixed-size (possibly nested) list column from flat values; shape excludes rows."""
    arr: pa.Array = pa.array(values)
    for size in reversed(shape):
        arr = pa.FixedSizeListArray.from_arrays(arr, size)
    return arr


def _basic(rng: np.random.Generator, n: int) -> dict[str, pa.Array]:
    """5 int64, 5 float32, 2 short strings, a float32 list of 8, an int label (~280 B/record)."""
    return {
        "user_id": pa.array(rng.integers(0, 1_000_000, n)),
        "item_id": pa.array(rng.integers(0, 1_000_000, n)),
        "ts": pa.array(1_760_000_000 + rng.integers(0, 30 * 86400, n)),
        "hour": pa.array(rng.integers(0, 24, n)),
        "clicks": pa.array(rng.geometric(0.05, n).astype(np.int64)),
        "price": pa.array(rng.gamma(2.0, 10.0, n).astype(np.float32)),
        "score": pa.array(rng.random(n, dtype=np.float32)),
        "lat": pa.array(rng.uniform(-90, 90, n).astype(np.float32)),
        "lon": pa.array(rng.uniform(-180, 180, n).astype(np.float32)),
        "ctr": pa.array(rng.beta(1, 20, n).astype(np.float32)),
        "city": _vocab_column(rng, n, 1000, 4, 10),
        "device": _vocab_column(rng, n, 50, 2, 8),
        "emb": _fixed(rng.normal(0, 1, n * 8).astype(np.float32), 8),
        "label": pa.array(rng.integers(0, 2, n)),
    }


def _strings(rng: np.random.Generator, n: int) -> dict[str, pa.Array]:
    """String-heavy: free text, vocab columns and string lists (~700 B/record)."""
    tag_vocab = _random_strings(rng, 2000, 3, 12)
    term_vocab = _random_strings(rng, 20000, 2, 10)
    return {
        "id": pa.array(rng.integers(0, 1 << 40, n)),
        "ts": pa.array(1_760_000_000 + rng.integers(0, 30 * 86400, n)),
        "title": _random_strings(rng, n, 20, 80),
        "body": _random_strings(rng, n, 100, 400),
        "url": _random_strings(rng, n, 30, 80),
        "lang": _vocab_column(rng, n, 30, 2, 5),
        "category": _vocab_column(rng, n, 500, 5, 20),
        "tags": _var_list(rng, n, 0, 8, tag_vocab),
        "terms": _var_list(rng, n, 1, 6, term_vocab),
        "label": pa.array(rng.integers(0, 2, n)),
    }


def _arrays(rng: np.random.Generator, n: int) -> dict[str, pa.Array]:
    """Array-heavy: a 16x16 float32 image, an 8x8 int mask, variable lists (~1.4 KB/record)."""
    return {
        "id": pa.array(rng.integers(0, 1 << 40, n)),
        "image": _fixed(rng.random(n * 256, dtype=np.float32), 16, 16),
        "mask": _fixed(rng.integers(0, 2, n * 64), 8, 8),
        "history": _var_list(
            rng, n, 0, 32, None, lambda k: pa.array(rng.integers(0, 1_000_000, k))
        ),
        "weights": _var_list(
            rng, n, 1, 16, None, lambda k: pa.array(rng.normal(0, 1, k).astype(np.float32))
        ),
        "label": pa.array(rng.integers(0, 10, n)),
    }


_MAKERS = {"basic": _basic, "strings": _strings, "arrays": _arrays}


def make_table(kind: str, rows: int, seed: int = 0) -> pa.Table:
    return pa.table(_MAKERS[kind](np.random.default_rng(seed), rows))


def write_parquet(
    kind: str, rows: int, path: Path, row_group_rows: int, chunk: int = 1 << 20
) -> None:
    """The first `rows` rows of the seeded table `kind`, written in chunks of `chunk` rows.

    Chunk i is generated with seed i, so the first rows are the same whatever `rows` is.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    writer = None
    done = 0
    while done < rows:
        part = make_table(kind, min(chunk, rows - done), seed=done // chunk)
        if writer is None:
            writer = pq.ParquetWriter(str(path), part.schema)
        writer.write_table(part, row_group_size=row_group_rows)
        done += part.num_rows
    assert writer is not None
    writer.close()


def split_parquet(src: Path, out_dir: Path, parts: int, row_group_rows: int) -> str:
    """Split a Parquet file into `parts` files of consecutive rows; returns a glob for them."""
    out_dir.mkdir(parents=True, exist_ok=True)
    table = pq.read_table(str(src))
    step = -(-table.num_rows // parts)
    for i in range(parts):
        pq.write_table(
            table.slice(i * step, step),
            str(out_dir / f"part-{i:05d}.parquet"),
            row_group_size=row_group_rows,
        )
    return str(out_dir / "part-*.parquet")
