"""Compile every numba kernel a job uses, once, into numba's cache beside the installed package:
`python -m pipeline.job.warm` (the Dockerfile runs it while building the workers' image).

numba compiles a kernel the first time a process calls it and caches the machine code; a later
process loads it in milliseconds. The encoder's `compile_kernels()` warms the encoder alone;
the other kernels a job uses (the statistics, the hash of splits and shuffles, the grouped
write, the sequences) are each compiled in the first process that needs them: with
the encoder and the local file reader compiled beforehand, the bundled sample's first `convert`
took 13.4 s against 1.7 s for the next one (21 s of CPU: its two workers compiled the same
kernels side by side). Here small jobs of every kind run on a generated table, one `convert`
process after the other (`--workers 1`), so each kernel is compiled once, with the argument
types a job gives it (tests/test_warm.py: jobs of other shapes compile nothing after it).

numba keys its cache by the CPU it compiled for (its name and features): a cache built on one
CPU model is not used on another, and the image's workers may run on a CPU other than the
build's. With `NUMBA_CPU_NAME=generic` (the Dockerfile sets it for the build and the workers)
the code is compiled for the architecture's baseline and the cache serves any CPU of it.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

__all__ = ["warm"]

ROWS = 3000


def _table(files: Path) -> pa.Table:
    """A table of the common kinds of column, with nulls, zeros, lists and file references."""
    rng = np.random.default_rng(0)
    n = ROWS
    files.mkdir(parents=True, exist_ok=True)
    for i in range(8):
        (files / f"{i}.bin").write_bytes(bytes(rng.integers(0, 256, 64 + i, dtype=np.uint8)))
    nulls = rng.random(n) < 0.1
    return pa.table(
        {
            "id": pa.array(np.arange(n, dtype=np.int64)),
            "group": pa.array([f"g{i % 37}" for i in range(n)]),
            "x": pa.array(np.where(nulls, 0.0, rng.random(n)).astype(np.float32), mask=nulls),
            "f": pa.array(rng.normal(size=n)),
            "k": pa.array(rng.integers(-5, 5, n).astype(np.int32), mask=nulls[::-1]),
            "s": pa.array(
                [None if m else f"s{v}" for m, v in zip(nulls, rng.integers(0, 50, n), strict=True)]
            ),
            "tags": pa.array([[f"t{j}" for j in range(i % 4)] for i in range(n)]),
            "grid": pa.array(
                [[[i, i + 1], [i + 2, i + 3]] for i in range(n)], pa.list_(pa.list_(pa.int32()))
            ),
            "emb": pa.FixedSizeListArray.from_arrays(
                pa.array(rng.random(16 * n).astype(np.float32)), 16
            ),
            "vals": pa.array([rng.random(i % 5).tolist() for i in range(n)]),
            "small": pa.array(rng.integers(0, 100, n).astype(np.uint8)),
            "flag": pa.array(rng.random(n) < 0.5),
            "when": pa.array(np.arange(n).astype("datetime64[s]")),
            "path": pa.array([f"files/{i % 8}.bin" for i in range(n)]),
        }
    )


# the jobs, as config files: what each makes a process compile
_CONFIGS = {
    # the rolling write, statistics of every kind, a split of each row by its hash
    "a": "splits: {train: 9, eval: 1}\ncolumns: {grid: {shape: [2, 2]}, f: {keep_float64: true}}\n",
    # the grouped write: a seeded shuffle into spill files and back, by key
    "b": "splits: {train: 9, eval: 1}\nshuffle: true\nnum_shards: 2\n"
    "columns: {grid: {shape: [2, 2]}}\n",
    # the grouped write without a seed, zlib's stream
    "c": "num_shards: 2\ncompression: zlib\ncolumns: {grid: {shape: [2, 2]}}\n",
    # SequenceExamples
    "d": "sequence: {group_by: group, order_by: id, features: [x, f, tags]}\n",
    # files read into the records
    "e": "files: {path: {}}\ncompression: none\ncolumns: {grid: {shape: [2, 2]}}\n",
}


def _jobs(table: Path, root: Path) -> list[list[str]]:
    jobs = []
    for name, text in _CONFIGS.items():
        config = root / f"{name}.yaml"
        config.write_text(text, encoding="utf-8")
        jobs.append(
            ["convert", "--config", str(config), "--input", str(table), "--output",
             str(root / "out" / name), "--overwrite", "--quiet", "--workers", "1"]
        )  # fmt: skip
    return jobs


def warm(workdir: str | None = None) -> None:
    """Compile (or load from the cache) the kernels of the jobs above; raises if a job fails."""
    from transforms.encode.kernel.example import compile_kernels
    from transforms.files.local_reads import compile_kernel
    from transforms.read.delimited.ranges import csv_ranges, json_line_ranges
    from transforms.stats.sketches import fixed_priorities

    compile_kernels()
    compile_kernel()
    # a fixed-size list's values offered to a full sample (the rows of large tables only)
    fixed_priorities(np.arange(4, dtype=np.uint64), 16, 1 << 40)
    with tempfile.TemporaryDirectory(dir=workdir) as tmp:
        root = Path(tmp)
        # the scan that cuts a large CSV file into byte ranges (the plan's, in the launcher)
        (root / "rows.csv").write_bytes(b"a,b\n" + b'1,"x"\n' * 64)
        csv_ranges(str(root / "rows.csv"), ",", '"', None, True, 64)
        (root / "rows.jsonl").write_bytes(b'{"a": 1}\n' * 64)  # ... and of a JSON Lines file
        json_line_ranges(str(root / "rows.jsonl"), 64)
        table = root / "table.parquet"
        pq.write_table(_table(root / "files"), table, row_group_size=1000)
        for args in _jobs(table, root):
            # a process as the command line makes one: the types its kernels are called with
            done = subprocess.run(
                [sys.executable, "-m", "pipeline", *args], capture_output=True, text=True
            )
            if done.returncode != 0:
                raise RuntimeError(
                    f"warming the kernels: `tfrecord-etl {' '.join(args)}` exited "
                    f"{done.returncode}: {done.stderr.strip()[-2000:]}"
                )


if __name__ == "__main__":
    started = time.perf_counter()
    warm()
    print(f"tfrecord-etl: the kernels are compiled ({time.perf_counter() - started:.1f} s)")
