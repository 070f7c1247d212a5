"""Throughput benchmark: the project's encoder, job and reader against the usual ways, one run.

    python bench/throughput.py --rows 1000000 [--table basic|strings|arrays] [--quick]
        [--small-rows N] [--rss-rows N] [--sections LIST] [--tfx-python PATH] [--json PATH]

Every ratio is against a baseline measured in the same process run, on the same data, on the
same machine at the same time: see bench/README.md for what each number means.

Sections (all by default; --quick runs a reduced set at small sizes):
  compression  per-block gzip (transforms.write.gzip_compressor): size ratio and MB/s
  encoders     in-memory table -> serialized Examples, one core
  e2e          Parquet -> TFRecord jobs as subprocesses: wall time, steady state, peak RSS
  workers      1 vs 2 local Beam workers on a 4-file input
  rss          peak RSS of the job at --rows vs --rss-rows rows
  reader       pipeline.reader.load_dataset vs TFRecordDataset -> map(parse_single_example)

This file also runs as its own worker process (`_worker ...`, used internally) for the
TFX-style pipeline and the tfx_bsl encoder; those modes import nothing from the project, so
they can run under another Python environment (--tfx-python).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")  # before any TensorFlow import

REPO = Path(__file__).resolve().parents[1]
TABLES = ("basic", "strings", "arrays")
SECTIONS = ("compression", "encoders", "e2e", "workers", "rss", "reader")
QUICK_SECTIONS = ("compression", "encoders", "e2e", "reader")
GZIP_LEVELS = (("zlib", 1), ("zlib", 6), ("isal", 1), ("isal", 2))
PROJECT_GZIP = "project gzip (defaults)"
PROJECT_NONE = "project none"


# --------------------------------------------------------------------------------------------
# Benchmark tables (seeded, vectorized: millions of rows in seconds)
# --------------------------------------------------------------------------------------------


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


# --------------------------------------------------------------------------------------------
# Baseline encoders (no project code: they also run under another Python environment)
# --------------------------------------------------------------------------------------------


def _leaf(t: pa.DataType) -> tuple[pa.DataType, int]:
    depth = 0
    while pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        t = t.value_type
        depth += 1
    return t, depth


def _kind(t: pa.DataType) -> str:
    if pa.types.is_integer(t) or pa.types.is_boolean(t):
        return "int64"
    if pa.types.is_floating(t):
        return "float"
    return "bytes"


def pyproto_encoder(schema: pa.Schema) -> Callable[[pa.Table], list[bytes]]:
    """The per-row way: to_pylist(), then one tf.train.Example per row, SerializeToString."""
    import tensorflow as tf

    plan = []
    for field in schema:
        leaf, depth = _leaf(field.type)
        plan.append((field.name, _kind(leaf), depth))
    example, features, feature = tf.train.Example, tf.train.Features, tf.train.Feature
    int64_list, float_list, bytes_list = tf.train.Int64List, tf.train.FloatList, tf.train.BytesList

    def encode(table: pa.Table) -> list[bytes]:
        out = []
        for row in table.to_pylist():
            feats = {}
            for name, kind, depth in plan:
                v = row[name]
                if v is None:
                    continue
                if depth == 0:
                    v = [v]
                elif depth > 1:
                    for _ in range(depth - 1):
                        v = [x for inner in v for x in inner]
                if kind == "int64":
                    feats[name] = feature(int64_list=int64_list(value=v))
                elif kind == "float":
                    feats[name] = feature(float_list=float_list(value=v))
                else:
                    v = [s.encode("utf-8") if isinstance(s, str) else s for s in v]
                    feats[name] = feature(bytes_list=bytes_list(value=v))
            out.append(example(features=features(feature=feats)).SerializeToString())
        return out

    return encode


def _as_list_column(arr: pa.Array) -> pa.Array:
    """Any column -> list<leaf>, strings as binary (the types tfx_bsl encodes)."""
    out = _flat_list(arr)
    leaf = out.type.value_type
    if pa.types.is_string(leaf) or pa.types.is_large_string(leaf):
        out = out.cast(pa.list_(pa.binary()))
    return out


def _flat_list(arr: pa.Array) -> pa.Array:
    t = arr.type
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        if not _leaf(t.value_type)[1]:
            return arr
    n = len(arr)
    if not (pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t)):
        offsets = pa.array(np.arange(n + 1, dtype=np.int32))
        mask = arr.is_null() if arr.null_count else None
        return pa.ListArray.from_arrays(offsets, arr, mask=mask)
    # Nested or fixed-size lists: one flat list of leaves per row.
    offsets = np.arange(n + 1, dtype=np.int64)
    while (
        pa.types.is_list(arr.type)
        or pa.types.is_large_list(arr.type)
        or pa.types.is_fixed_size_list(arr.type)
    ):
        if pa.types.is_fixed_size_list(arr.type):
            size = arr.type.list_size
            inner = (np.arange(len(arr) + 1, dtype=np.int64) + arr.offset) * size
            values = arr.values
        else:
            inner = arr.offsets.to_numpy().astype(np.int64)
            values = arr.values
        offsets = inner[offsets]
        arr = values
    start = int(offsets[0])
    arr = arr.slice(start, int(offsets[-1]) - start)
    return pa.ListArray.from_arrays(pa.array((offsets - start).astype(np.int32)), arr)


def tfx_bsl_available() -> str | None:
    """None when tfx_bsl's RecordBatchToExamplesEncoder imports here, else why not."""
    try:
        from tfx_bsl.coders.example_coder import RecordBatchToExamplesEncoder  # noqa: F401
    except Exception as err:  # ImportError, or a binary built against another pyarrow
        return f"{type(err).__name__}: {err}"
    return None


def tfx_bsl_prepare(table: pa.Table) -> list[pa.RecordBatch]:
    """The table as record batches of list columns, the form tfx_bsl encodes."""
    batch = table.combine_chunks().to_batches()[0]
    columns = [_as_list_column(batch.column(i)) for i in range(batch.num_columns)]
    return pa.Table.from_arrays(columns, names=table.column_names).to_batches()


def tfx_bsl_encoder() -> Callable[[pa.Table], list[bytes]]:
    """tfx_bsl's C++ encoder (columns converted to list<leaf> first)."""
    from tfx_bsl.coders.example_coder import RecordBatchToExamplesEncoder

    coder = RecordBatchToExamplesEncoder()

    def encode(table: pa.Table) -> list[bytes]:
        out: list[bytes] = []
        for batch in tfx_bsl_prepare(table):
            out.extend(coder.encode(batch))
        return out

    return encode


# --------------------------------------------------------------------------------------------
# Measuring
# --------------------------------------------------------------------------------------------


def timed(fn: Callable[[], Any], repeat: int = 1) -> dict[str, float]:
    """Best (least wall time) of `repeat` calls: wall and process CPU seconds."""
    best: dict[str, float] | None = None
    for _ in range(max(1, repeat)):
        w0, c0 = time.perf_counter(), time.process_time()
        fn()
        wall, cpu = time.perf_counter() - w0, time.process_time() - c0
        if best is None or wall < best["wall_s"]:
            best = {"wall_s": wall, "cpu_s": cpu}
    assert best is not None
    return best


def _children(pids: set[int]) -> set[int]:
    """`pids` and all their descendants (from /proc)."""
    parent: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        ppid = int(stat[stat.rindex(b")") + 2 :].split()[1])
        parent[int(entry)] = ppid
    out = set(pids)
    grew = True
    while grew:
        grew = False
        for pid, ppid in parent.items():
            if ppid in out and pid not in out:
                out.add(pid)
                grew = True
    return out


def _rss_bytes(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/statm", "rb") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, IndexError, ValueError):
        return 0


class TreeRss(threading.Thread):
    """Samples the summed RSS of a process and its descendants; keeps the peak."""

    def __init__(self, pid: int, interval: float = 0.2) -> None:
        super().__init__(daemon=True)
        self.pid, self.interval, self.peak = pid, interval, 0
        self._stop_event = threading.Event()

    def run(self) -> None:
        while not self._stop_event.is_set():
            total = sum(_rss_bytes(p) for p in _children({self.pid}))
            self.peak = max(self.peak, total)
            self._stop_event.wait(self.interval)

    def stop(self) -> None:
        self._stop_event.set()
        self.join()


# Linux keeps ru_maxrss across fork and exec, so a child started from this (large) process
# would report at least this process's RSS. A small launcher process starts the command and
# reports the command's own rusage (RUSAGE_CHILDREN of the launcher) on its last output line.
_LAUNCHER = """
import json, os, resource, subprocess, sys, time
start = time.monotonic()
rc = subprocess.call(sys.argv[1:])
wall = time.monotonic() - start
u = resource.getrusage(resource.RUSAGE_CHILDREN)
print("@@rusage " + json.dumps({"rc": rc, "wall_s": wall, "cpu_s": u.ru_utime + u.ru_stime,
                               "max_rss_kb": u.ru_maxrss}), flush=True)
sys.exit(rc)
"""


def run_process(cmd: Sequence[str], log: Path) -> dict[str, Any]:
    """Run `cmd`; its wall time, CPU time (with its children) and peak RSS."""
    log.parent.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": os.environ.get("TF_CPP_MIN_LOG_LEVEL", "1")}
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-c", _LAUNCHER, *cmd],
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=REPO,
            env=env,
        )
        sampler = TreeRss(proc.pid)
        sampler.start()
        proc.wait()
        sampler.stop()
    text = log.read_text(errors="replace")
    line = next((x for x in reversed(text.splitlines()) if x.startswith("@@rusage ")), None)
    usage = (
        json.loads(line.split(" ", 1)[1])
        if line
        else {"rc": proc.returncode, "wall_s": 0.0, "cpu_s": 0.0, "max_rss_kb": 0}
    )
    result = {
        "wall_s": usage["wall_s"],
        "cpu_s": usage["cpu_s"],
        "max_rss_mb": usage["max_rss_kb"] / 1024,  # the largest single process in the tree
        "tree_rss_mb": sampler.peak / 2**20,  # summed over the process tree, sampled every 0.2 s
        "rc": usage["rc"],
    }
    if result["rc"] != 0:
        tail = text[-3000:]
        result["error"] = tail
        print(f"  !! {' '.join(cmd[:6])} ... exited {result['rc']}; log {log}:\n{tail}")
    return result


def output_bytes(directory: Path) -> int:
    return sum(
        p.stat().st_size for p in directory.rglob("*") if p.is_file() and p.name != "manifest.json"
    )


def load_avg() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


# --------------------------------------------------------------------------------------------
# Sections
# --------------------------------------------------------------------------------------------


def _project_encode(table: pa.Table, specs: Sequence[Any], batch_rows: int, framed: bool) -> int:
    from transforms.encode import encode_table

    total = 0
    for start in range(0, table.num_rows, batch_rows):
        encoded, _ = encode_table(table.slice(start, batch_rows), specs, "bench", start, framed)
        total += int(encoded.offsets[-1])
    return total


def section_compression(table: pa.Table, args: argparse.Namespace) -> list[dict[str, Any]]:
    import zlib

    from transforms.encode import encode_table
    from transforms.schema import plan_features
    from transforms.write import gzip_compressor

    specs = plan_features(table.schema)
    rows = min(table.num_rows, args.compression_rows)
    blocks = []
    for start in range(0, rows, args.batch_rows):
        encoded, _ = encode_table(
            table.slice(start, min(args.batch_rows, rows - start)), specs, "bench", start, True
        )
        blocks.append(encoded.buffer)
    raw = sum(b.nbytes for b in blocks)
    results = []
    for backend, level in GZIP_LEVELS:
        try:
            compress = gzip_compressor(level, backend)
        except ImportError as err:
            results.append({"backend": backend, "level": level, "skipped": str(err)})
            continue
        members: list[bytes] = []

        def compress_all(c: Callable[[memoryview], bytes] = compress, out: list = members) -> None:
            out[:] = [c(memoryview(b)) for b in blocks]

        def gunzip_all(out: list = members) -> None:
            for m in out:
                zlib.decompress(m, wbits=31)

        t = timed(compress_all, args.repeat)
        size = sum(len(m) for m in members)
        d = timed(gunzip_all, args.repeat)
        results.append(
            {
                "backend": backend,
                "level": level,
                "raw_bytes": raw,
                "bytes": size,
                "size_pct": 100.0 * size / raw,
                "ratio": raw / size,
                "mb_s": raw / t["wall_s"] / 1e6,
                "cpu_mb_s": raw / max(t["cpu_s"], 1e-9) / 1e6,
                "gunzip_mb_s": raw / d["wall_s"] / 1e6,
            }
        )
        print(
            f"  gzip {backend} level {level}: {results[-1]['size_pct']:.1f}% of raw, "
            f"{results[-1]['mb_s']:.0f} MB/s"
        )
    return results


def section_encoders(
    table: pa.Table, parquet: Path, args: argparse.Namespace
) -> list[dict[str, Any]]:
    from transforms.encode import encode_table
    from transforms.schema import plan_features

    n = table.num_rows
    specs = plan_features(table.schema)
    results: list[dict[str, Any]] = []

    def add(name: str, rows: int, t: dict[str, float], note: str = "", **extra: Any) -> None:
        entry = {
            "encoder": name,
            "rows": rows,
            **t,
            "rows_s": rows / t["wall_s"],
            "rows_cpu_s": rows / max(t["cpu_s"], 1e-9),
            "note": note,
            **extra,
        }
        results.append(entry)
        print(f"  {name}: {entry['rows_s']:,.0f} rows/s ({rows:,} rows) {note}")

    # Per-row protobuf: the baseline, on a subsample.
    k = min(n, args.per_row_rows)
    encode_rows = pyproto_encoder(table.schema)
    sub = table.slice(0, k)
    reference: list[bytes] = []
    t = timed(lambda: reference.extend(encode_rows(sub)), 1)
    add("per-row tf.train.Example", k, t, "to_pylist + Example per row + SerializeToString")

    # Same records? Parse both and compare (and bytes, with deterministic serialization).
    check = min(k, 2000)
    ours, _ = encode_table(table.slice(0, check), specs, "bench", 0, False)
    import tensorflow as tf

    same_msgs = same_bytes = 0
    for i in range(check):
        mine = bytes(ours.buffer[ours.offsets[i] : ours.offsets[i + 1]])
        theirs = tf.train.Example.FromString(reference[i])
        if tf.train.Example.FromString(mine) == theirs:
            same_msgs += 1
        if mine == theirs.SerializeToString(deterministic=True):
            same_bytes += 1
    print(
        f"  check: {same_msgs}/{check} records parse equal to per-row, "
        f"{same_bytes}/{check} byte-identical to deterministic serialization"
    )
    check_result = {"rows": check, "equal_messages": same_msgs, "equal_bytes": same_bytes}

    # tfx_bsl, here or under another Python.
    why = tfx_bsl_available()
    if why is None:
        prepared = tfx_bsl_prepare(table)
        from tfx_bsl.coders.example_coder import RecordBatchToExamplesEncoder

        coder = RecordBatchToExamplesEncoder()
        t = timed(lambda: [coder.encode(b) for b in prepared], args.repeat)
        add("tfx_bsl RecordBatchToExamplesEncoder", n, t, "in this environment")
    elif args.tfx_python:
        cmd = [
            args.tfx_python,
            str(Path(__file__).resolve()),
            "_worker",
            "tfx-bsl-encode",
            "--input",
            str(parquet),
            "--repeat",
            str(args.repeat),
        ]
        proc = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO)
        if proc.returncode == 0:
            r = json.loads(proc.stdout.strip().splitlines()[-1])
            add(
                "tfx_bsl RecordBatchToExamplesEncoder",
                r["rows"],
                {"wall_s": r["wall_s"], "cpu_s": r["cpu_s"]},
                f"tfx_bsl {r['version']}, pyarrow {r['pyarrow']} (--tfx-python)",
            )
        else:
            print(f"  tfx_bsl: skipped, the --tfx-python worker failed:\n{proc.stderr[-2000:]}")
    else:
        print(f"  tfx_bsl: skipped ({why}; pass --tfx-python for an environment that has it)")

    # The project's encoder (its first call, numba compile or cache load, was in main()).
    for framed in (False, True):
        t = timed(lambda f=framed: _project_encode(table, specs, args.batch_rows, f), args.repeat)
        add(
            f"encode_table ({'framed' if framed else 'unframed'})",
            n,
            t,
            f"batches of {args.batch_rows:,} rows",
        )
    base = results[0]["rows_s"]
    base_cpu = results[0]["rows_cpu_s"]
    for r in results:
        r["vs_per_row"] = r["rows_s"] / base
        r["vs_per_row_cpu"] = r["rows_cpu_s"] / base_cpu
    results.append({"check": check_result})
    return results


def _cli(input_glob: str, out: Path, extra: Sequence[str]) -> list[str]:
    return [
        sys.executable,
        "-m",
        "pipeline",
        "convert",
        "--input",
        input_glob,
        "--output",
        str(out),
        "--overwrite",
        *extra,
    ]


def _tfx_style(
    python: str,
    input_glob: str,
    out: Path,
    compression: str,
    encoder: str,
    extra: Sequence[str] = (),
) -> list[str]:
    return [
        python,
        str(Path(__file__).resolve()),
        "_worker",
        "tfx-style",
        "--input",
        input_glob,
        "--output",
        str(out),
        "--compression",
        compression,
        "--encoder",
        encoder,
        *extra,
    ]


def e2e_configs(args: argparse.Namespace) -> list[dict[str, Any]]:
    """(name, kind, command builder) for each end-to-end configuration."""
    bsl_here = tfx_bsl_available() is None
    configs = [
        {
            "name": PROJECT_GZIP,
            "kind": "project",
            "compression": "gzip",
            "cmd": lambda i, o: _cli(i, o, ["--compression", "gzip"]),
        },
        {
            "name": "project gzip zlib 6",
            "kind": "project",
            "compression": "gzip",
            "cmd": lambda i, o: _cli(
                i,
                o,
                ["--compression", "gzip", "--gzip-backend", "zlib", "--compression-level", "6"],
            ),
        },
        {
            "name": PROJECT_NONE,
            "kind": "project",
            "compression": "none",
            "cmd": lambda i, o: _cli(i, o, ["--compression", "none"]),
        },
        {
            "name": "project gzip, --num-shards 8",
            "kind": "project",
            "compression": "gzip",
            "cmd": lambda i, o: _cli(i, o, ["--compression", "gzip", "--num-shards", "8"]),
        },
        {
            "name": "project gzip, --shuffle",
            "kind": "project",
            "compression": "gzip",
            "cmd": lambda i, o: _cli(i, o, ["--compression", "gzip", "--shuffle"]),
        },
        {
            "name": "project gzip, sink tfrecordio",
            "kind": "project",
            "compression": "gzip",
            "cmd": lambda i, o: _cli(i, o, ["--compression", "gzip", "--sink", "tfrecordio"]),
        },
        {
            "name": "TFX-style per-row gzip",
            "kind": "tfx-pyproto",
            "compression": "gzip",
            "cmd": lambda i, o: _tfx_style(sys.executable, i, o, "gzip", "pyproto"),
        },
        {
            "name": "TFX-style per-row none",
            "kind": "tfx-pyproto",
            "compression": "none",
            "cmd": lambda i, o: _tfx_style(sys.executable, i, o, "none", "pyproto"),
        },
    ]
    bsl_python = sys.executable if bsl_here else args.tfx_python
    if bsl_python:
        for comp in ("gzip", "none"):
            configs.append(
                {
                    "name": f"TFX-style tfx_bsl {comp}",
                    "kind": "tfx-bsl",
                    "compression": comp,
                    "cmd": lambda i, o, c=comp: _tfx_style(bsl_python, i, o, c, "tfx_bsl"),
                }
            )
    if args.quick:
        keep = {PROJECT_GZIP, "TFX-style per-row gzip"}
        configs = [c for c in configs if c["name"] in keep]
    if "e2e" not in args.section_list:  # the reader alone: only the outputs it reads
        configs = [c for c in configs if c["name"] in (PROJECT_GZIP, PROJECT_NONE)]
    return configs


def steady(
    small: dict[str, Any], large: dict[str, Any], n_small: int, n_large: int
) -> float | None:
    """Rows per second once running: the row difference over the wall-time difference."""
    dt = large["wall_s"] - small["wall_s"]
    if large.get("rc") or small.get("rc") or dt <= 0:
        return None
    return (n_large - n_small) / dt


def fixed_cost(run: dict[str, Any], rows: int, steady_rows_s: float | None) -> float | None:
    """Seconds not explained by the steady rate: startup, planning, pipeline setup, shutdown."""
    return None if not steady_rows_s else run["wall_s"] - rows / steady_rows_s


def measure(
    cmd: Sequence[str], out: Path, log: Path, rows: int, repeat: int, repeat_below_s: float
) -> dict[str, Any]:
    """Run a job up to `repeat` times (only while a run is shorter than `repeat_below_s`);
    the run with the least wall time is kept, with every wall time in `walls`."""
    best: dict[str, Any] | None = None
    walls = []
    for i in range(max(1, repeat)):
        shutil.rmtree(out, ignore_errors=True)
        r = run_process(cmd, log.with_name(f"{log.stem}-{i}.log"))
        r["bytes"] = output_bytes(out) if out.exists() else 0
        r["load"] = load_avg()
        walls.append(round(r["wall_s"], 2))
        if best is None or (r["rc"] == 0 and r["wall_s"] < best["wall_s"]) or best["rc"]:
            best = r
        if r["rc"] or r["wall_s"] >= repeat_below_s:
            break
    assert best is not None
    best["walls"] = walls
    best["rows"] = rows
    best["rows_s"] = rows / best["wall_s"]
    return best


def section_e2e(
    files: dict[str, Any], args: argparse.Namespace, work: Path
) -> list[dict[str, Any]]:
    results = []
    sizes = (
        [("large", args.rows)] if args.quick else [("small", args.small_rows), ("large", args.rows)]
    )
    for cfg in e2e_configs(args):
        entry: dict[str, Any] = {
            "name": cfg["name"],
            "kind": cfg["kind"],
            "compression": cfg["compression"],
        }
        for label, rows in sizes:
            slug = "".join(ch if ch.isalnum() else "_" for ch in cfg["name"])
            out = work / "out" / f"{slug}-{label}"
            r = measure(
                cfg["cmd"](str(files[label]), out),
                out,
                work / "logs" / f"{out.name}.log",
                rows,
                args.e2e_repeat,
                args.repeat_below,
            )
            entry[label] = r
            print(
                f"  {cfg['name']} {rows:,} rows: {r['wall_s']:.1f} s wall (runs {r['walls']}), "
                f"{r['max_rss_mb']:.0f} MB peak RSS, {r['bytes'] / 1e6:.1f} MB out "
                f"(load {r['load']})"
            )
            if cfg["name"] in (PROJECT_GZIP, PROJECT_NONE) and label == "large":
                entry["output_dir"] = str(out)
            elif not args.keep:
                shutil.rmtree(out, ignore_errors=True)
        if "small" in entry:
            entry["steady_rows_s"] = steady(
                entry["small"], entry["large"], args.small_rows, args.rows
            )
            entry["fixed_s"] = fixed_cost(entry["large"], args.rows, entry["steady_rows_s"])
        results.append(entry)
    return results


_SPIN = (
    "import os, time, zlib\n"
    "data = os.urandom(1 << 22)\n"
    "t = time.perf_counter()\n"
    "for _ in range({n}):\n"
    "    zlib.compress(data, 1)\n"
    "print(time.perf_counter() - t)\n"
)


def parallel_ceiling(n: int = 40) -> dict[str, float]:
    """What two CPU-bound processes get done together on this machine, against one alone:
    the same zlib loop once alone, then twice at the same time. Shared cores, hyperthreads
    and clock limits all show here; 2.0x is two full cores."""
    cmd = [sys.executable, "-c", _SPIN.format(n=n)]
    alone = float(subprocess.run(cmd, capture_output=True, text=True, check=True).stdout)
    procs = [subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True) for _ in range(2)]
    together = max(float(proc.communicate()[0]) for proc in procs)
    return {"alone_s": alone, "together_s": together, "ratio": 2 * alone / together}


def section_workers(args: argparse.Namespace, work: Path, files: dict[str, Any]) -> dict[str, Any]:
    ceiling = parallel_ceiling()
    print(
        f"  machine: one zlib loop {ceiling['alone_s']:.1f} s alone, two at once "
        f"{ceiling['together_s']:.1f} s: {ceiling['ratio']:.2f}x one process's work"
    )
    results = []
    two = ["--direct_num_workers=2", "--direct_running_mode=multi_processing"]
    sizes = (("small", args.workers_small_rows), ("large", args.workers_rows))
    for name, extra in (("1 worker", []), ("2 workers", two)):
        entry: dict[str, Any] = {"name": f"project gzip, 4 files, {name}"}
        for label, rows in sizes:
            out = work / "out" / f"workers-{len(extra)}-{label}"
            r = measure(
                _cli(files[f"parts_{label}"], out, ["--compression", "gzip", *extra]),
                out,
                work / "logs" / f"{out.name}.log",
                rows,
                args.e2e_repeat,
                args.repeat_below,
            )
            entry[label] = r
            print(
                f"  {entry['name']} {rows:,} rows: {r['wall_s']:.1f} s wall (runs {r['walls']}), "
                f"{r['cpu_s']:.1f} CPU-s, tree RSS {r['tree_rss_mb']:.0f} MB (load {r['load']})"
            )
            shutil.rmtree(out, ignore_errors=True)
        entry["steady_rows_s"] = steady(entry["small"], entry["large"], *(n for _, n in sizes))
        entry["fixed_s"] = fixed_cost(entry["large"], sizes[1][1], entry["steady_rows_s"])
        results.append(entry)
    return {"jobs": results, "ceiling": ceiling}


def section_rss(
    args: argparse.Namespace, work: Path, e2e: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    base = next((e for e in e2e if e["name"] == PROJECT_GZIP), None)
    path = work / f"{args.table}-{args.rss_rows}.parquet"
    print(f"  writing {args.rss_rows:,} rows to Parquet ...")
    write_parquet(args.table, args.rss_rows, path, args.row_group_rows)
    out = work / "out" / "rss-large"
    r = measure(
        _cli(str(path), out, ["--compression", "gzip"]),
        out,
        work / "logs" / "rss.log",
        args.rss_rows,
        1,
        0,
    )
    print(
        f"  project gzip {args.rss_rows:,} rows: {r['wall_s']:.1f} s wall, "
        f"{r['max_rss_mb']:.0f} MB peak RSS (load {r['load']})"
    )
    shutil.rmtree(out, ignore_errors=True)
    path.unlink()
    keys = ("wall_s", "cpu_s", "max_rss_mb", "tree_rss_mb")
    rows = []
    if base is not None:
        rows.append({"rows": args.rows, **{k: base["large"][k] for k in keys}})
    rows.append({"rows": args.rss_rows, **{k: r[k] for k in keys}})
    if len(rows) == 2:
        rows[1]["steady_rows_s"] = steady(rows[0], rows[1], args.rows, args.rss_rows)
    return rows


def _count_rows(batch: Any) -> int:
    value = next(iter(batch.values()))
    return int(value.shape[0]) if value.shape[0] is not None else int(value.nrows())


def tutorial_dataset(output_dir: str, batch_size: int, parallel: bool, rows: int) -> Any:
    """The tutorial way: TFRecordDataset -> map(parse_single_example) -> batch."""
    import tensorflow as tf

    manifest = json.loads(Path(output_dir, "manifest.json").read_text())
    dtypes = {"int64": tf.int64, "float": tf.float32, "bytes": tf.string}
    spec = {}
    for f in manifest["features"]:
        shape = f["shape"]
        if shape is None or (shape and shape[0] < 0):
            spec[f["name"]] = tf.io.VarLenFeature(dtypes[f["kind"]])
        else:
            spec[f["name"]] = tf.io.FixedLenFeature(shape, dtypes[f["kind"]])
    files = [str(Path(output_dir, name)) for name in manifest["splits"]["train"]["files"]]
    ds = tf.data.TFRecordDataset(files, compression_type=manifest["tf_compression_type"])
    ds = ds.take(rows)
    if parallel:
        ds = ds.map(
            lambda r: tf.io.parse_single_example(r, spec), num_parallel_calls=tf.data.AUTOTUNE
        )
        return ds.batch(batch_size).prefetch(tf.data.AUTOTUNE)
    return ds.map(lambda r: tf.io.parse_single_example(r, spec)).batch(batch_size)


def read_once(make: Callable[[], Any]) -> dict[str, Any]:
    """One pass over the dataset `make()` builds. The time to the first batch (building the
    dataset, tracing, opening files) is reported apart and left out of `rows_s`."""
    w0, c0 = time.perf_counter(), time.process_time()
    rows = first_rows = 0
    first_s = 0.0
    for batch in make():
        rows += _count_rows(batch)
        if not first_s:
            first_rows, first_s = rows, time.perf_counter() - w0
    wall, cpu = time.perf_counter() - w0, time.process_time() - c0
    return {
        "rows": rows,
        "wall_s": wall,
        "cpu_s": cpu,
        "first_batch_s": first_s,
        "rows_s": (rows - first_rows) / max(wall - first_s, 1e-9),
        "rows_s_with_first": rows / wall,
        "rows_cpu_s": rows / max(cpu, 1e-9),
    }


def read_best(make: Callable[[], Any], repeat: int) -> dict[str, Any]:
    """The pass with the best `rows_s` of `repeat` passes (every way gets the same number)."""
    runs = [read_once(make) for _ in range(max(1, repeat))]
    best = max(runs, key=lambda r: r["rows_s"])
    return {**best, "passes_rows_s": [round(r["rows_s"]) for r in runs]}


def section_reader(e2e: list[dict[str, Any]], args: argparse.Namespace) -> list[dict[str, Any]]:
    results = []
    try:
        from pipeline.reader import load_dataset
    except ImportError as err:
        print(f"  reader: skipped, pipeline.reader does not import ({err})")
        return [{"skipped": str(err)}]
    for entry in e2e:
        out = entry.get("output_dir")
        if not out:
            continue
        # The first whole batches up to --reader-rows records, read the same way by all.
        total = json.loads(Path(out, "manifest.json").read_text())["rows"]
        batches = max(1, min(args.reader_rows, total) // args.reader_batch)
        rows_expected = min(total, batches * args.reader_batch)
        ways = [
            (
                "tutorial: map(parse_single_example) -> batch",
                lambda o=out, n=rows_expected: tutorial_dataset(o, args.reader_batch, False, n),
            ),
            (
                "tutorial + num_parallel_calls=AUTOTUNE",
                lambda o=out, n=rows_expected: tutorial_dataset(o, args.reader_batch, True, n),
            ),
            (
                "pipeline.reader.load_dataset",
                lambda o=out, k=batches: load_dataset(o, batch_size=args.reader_batch).take(k),
            ),
        ]
        if args.quick:
            del ways[1]
        base = None
        for name, make in ways:
            r = {"output": entry["compression"], "way": name, **read_best(make, args.repeat)}
            rows = r["rows"]
            if rows != rows_expected:
                r["error"] = f"read {rows} rows, expected {rows_expected}"
            base = base or r["rows_s"]
            r["vs_tutorial"] = r["rows_s"] / base
            results.append(r)
            print(
                f"  reader {entry['compression']}: {name}: {r['rows_s']:,.0f} rows/s "
                f"(best of {r['passes_rows_s']}; first batch after {r['first_batch_s']:.2f} s; "
                f"cpu {r['cpu_s']:.1f} s for {r['wall_s']:.1f} s wall)"
            )
    return results


# --------------------------------------------------------------------------------------------
# Report
# --------------------------------------------------------------------------------------------


def _fmt(x: float | None, spec: str = ",.0f") -> str:
    return "n/a" if x is None else format(x, spec)


def _md_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def report(res: dict[str, Any]) -> str:
    meta = res["meta"]
    parts = [
        f"## Benchmark: table `{meta['table']}`, {meta['rows']:,} rows "
        f"({meta['record_bytes']:.0f} B/record serialized), {meta['date']}",
        f"Machine: {meta['cpus']} cores, {meta['machine']}; Python {meta['python']}, "
        f"Beam {meta['beam']}, pyarrow {meta['pyarrow']}; "
        f"load average at start {meta['load_start']}, at end {meta.get('load_end', '?')}.",
    ]
    if res.get("compression"):
        rows = [
            [
                f"{r['backend']} {r['level']}",
                _fmt(r.get("size_pct"), ".1f") + "%",
                _fmt(r.get("ratio"), ".2f"),
                _fmt(r.get("mb_s")),
                _fmt(r.get("gunzip_mb_s")),
            ]
            for r in res["compression"]
            if "skipped" not in r
        ]
        parts += [
            "### Per-block gzip (framed blocks, one core)",
            _md_table(
                ["backend level", "size of raw", "raw/compressed", "compress MB/s", "gunzip MB/s"],
                rows,
            ),
        ]
    if res.get("encoders"):
        enc = [r for r in res["encoders"] if "encoder" in r]
        rows = [
            [
                r["encoder"],
                f"{r['rows']:,}",
                _fmt(r["rows_s"]),
                _fmt(r["rows_cpu_s"]),
                _fmt(r["vs_per_row"], ".1f") + "x",
                r["note"],
            ]
            for r in enc
        ]
        parts += [
            "### Encoders (in-memory table -> serialized Examples, one core)",
            _md_table(["encoder", "rows", "rows/s", "rows/CPU-s", "vs per-row", "note"], rows),
        ]
        check = next((r["check"] for r in res["encoders"] if "check" in r), None)
        if check:
            parts.append(
                f"Check: {check['equal_messages']}/{check['rows']} records parse equal to "
                f"the per-row encoder's; {check['equal_bytes']}/{check['rows']} are "
                "byte-identical to SerializeToString(deterministic=True)."
            )
    if res.get("e2e"):
        e2e = res["e2e"]
        base = {
            c: next((e for e in e2e if e["kind"] == "tfx-pyproto" and e["compression"] == c), None)
            for c in ("gzip", "none")
        }
        bsl = {
            c: next((e for e in e2e if e["kind"] == "tfx-bsl" and e["compression"] == c), None)
            for c in ("gzip", "none")
        }
        rows = []
        for e in e2e:
            large = e["large"]
            small = e.get("small")
            b, s = base[e["compression"]], bsl[e["compression"]]

            def ratio(other: dict[str, Any] | None, key: str, e: dict[str, Any] = e) -> str:
                if other is None:
                    return "n/a"
                if key == "wall":
                    return _fmt(other["large"]["wall_s"] / e["large"]["wall_s"], ".2f") + "x"
                if e.get("steady_rows_s") and other.get("steady_rows_s"):
                    return _fmt(e["steady_rows_s"] / other["steady_rows_s"], ".2f") + "x"
                return "n/a"

            rows.append(
                [
                    e["name"],
                    (_fmt(small["wall_s"], ".1f") + " / " if small else "")
                    + _fmt(large["wall_s"], ".1f"),
                    _fmt(large["rows_s"]),
                    _fmt(e.get("steady_rows_s")),
                    _fmt(e.get("fixed_s"), ".1f"),
                    ratio(b, "wall"),
                    ratio(b, "steady"),
                    ratio(s, "wall"),
                    ratio(s, "steady"),
                    (_fmt(small["max_rss_mb"]) + " / " if small else "")
                    + _fmt(large["max_rss_mb"]),
                    _fmt(large["bytes"] / 1e6, ".1f"),
                ]
            )
        sizes = (
            f"{meta['small_rows']:,} / {meta['rows']:,}"
            if not meta["quick"]
            else f"{meta['rows']:,}"
        )
        parts += [
            f"### End to end, Parquet -> TFRecord (FnApiRunner, 1 worker; rows {sizes})",
            _md_table(
                [
                    "job",
                    "wall s",
                    "rows/s (whole process)",
                    "steady rows/s",
                    "fixed s",
                    "vs per-row TFX (wall)",
                    "vs per-row TFX (steady)",
                    "vs tfx_bsl TFX (wall)",
                    "vs tfx_bsl TFX (steady)",
                    "peak RSS MB",
                    "output MB",
                ],
                rows,
            ),
        ]
    if res.get("workers"):
        w = res["workers"]["jobs"]
        ceiling = res["workers"]["ceiling"]
        rows = [
            [
                e["name"],
                f"{e['small']['wall_s']:.1f} / {e['large']['wall_s']:.1f}",
                f"{e['small']['cpu_s']:.1f} / {e['large']['cpu_s']:.1f}",
                _fmt(e["large"]["rows_s"]),
                _fmt(e.get("steady_rows_s")),
                _fmt(e.get("fixed_s"), ".1f"),
                f"{e['large']['max_rss_mb']:.0f} / {e['large']['tree_rss_mb']:.0f}",
            ]
            for e in w
        ]
        if len(w) == 2 and w[0].get("steady_rows_s") and w[1].get("steady_rows_s"):
            speed = (
                f"2 vs 1 worker: {w[0]['large']['wall_s'] / w[1]['large']['wall_s']:.2f}x "
                f"(wall), {w[1]['steady_rows_s'] / w[0]['steady_rows_s']:.2f}x (steady state)"
            )
        else:
            speed = ""
        speed += (
            f"\n\nThe machine's own ceiling: two CPU-bound processes (a zlib loop) at once get "
            f"{ceiling['ratio']:.2f}x the work of one alone done ({ceiling['alone_s']:.1f} s "
            f"alone, {ceiling['together_s']:.1f} s for two together; 2.00x would be two full "
            "cores)."
        )
        parts += [
            f"### Local workers (4 input files; rows {w[0]['small']['rows']:,} / "
            f"{w[0]['large']['rows']:,})",
            _md_table(
                [
                    "job",
                    "wall s",
                    "CPU s",
                    "rows/s (whole process)",
                    "steady rows/s",
                    "fixed s",
                    "peak RSS MB (largest process / process tree)",
                ],
                rows,
            ),
            speed,
        ]
    if res.get("rss"):
        rows = [
            [
                f"{r['rows']:,}",
                f"{r['wall_s']:.1f}",
                f"{r['max_rss_mb']:.0f}",
                f"{r['tree_rss_mb']:.0f}",
                _fmt(r.get("steady_rows_s")),
            ]
            for r in res["rss"]
        ]
        parts += [
            "### Peak RSS of the job (project gzip defaults, 1 worker)",
            _md_table(
                ["rows", "wall s", "peak RSS MB", "tree RSS MB (sampled)", "steady rows/s"], rows
            ),
        ]
        if len(res["rss"]) == 2:
            parts.append(
                f"RSS ratio: {res['rss'][1]['max_rss_mb'] / res['rss'][0]['max_rss_mb']:.2f}x "
                f"for {res['rss'][1]['rows'] / res['rss'][0]['rows']:.0f}x the rows."
            )
    if res.get("reader") and "skipped" not in res["reader"][0]:
        rows = [
            [
                r["output"],
                r["way"],
                f"{r['rows']:,}",
                _fmt(r["first_batch_s"], ".2f"),
                _fmt(r["rows_s"]),
                _fmt(r["rows_s_with_first"]),
                _fmt(r["rows_cpu_s"]),
                _fmt(r["vs_tutorial"], ".1f")
                + "x"
                + (" ERROR: " + r["error"] if "error" in r else ""),
            ]
            for r in res["reader"]
        ]
        parts += [
            f"### Reader (tf.data, batch {meta['reader_batch']}; the first records of the "
            "job's 1-worker output)",
            _md_table(
                [
                    "output",
                    "way",
                    "rows",
                    "first batch s",
                    "rows/s after it",
                    "rows/s overall",
                    "rows/CPU-s",
                    "vs tutorial",
                ],
                rows,
            ),
        ]
    if res.get("targets"):
        rows = [[t["target"], t["measured"], t["status"]] for t in res["targets"]]
        parts += ["### Targets", _md_table(["target", "measured", "status"], rows)]
    return "\n\n".join(p for p in parts if p) + "\n"


def targets(res: dict[str, Any]) -> list[dict[str, str]]:
    out = []

    def add(
        target: str, value: float | None, goal: float, unit: str = "x", low: bool = False
    ) -> None:
        if value is None:
            out.append({"target": target, "measured": "n/a", "status": "not measured"})
            return
        ok = value <= goal if low else value >= goal
        shown = f"{value:,.0f} rows/s" if unit == "rows/s" else f"{value:.2f}x"
        status = (
            "met"
            if ok
            else (f"{value / goal:.0%} of target" if not low else f"{value / goal:.2f} of limit")
        )
        out.append({"target": target, "measured": shown, "status": status})

    enc = {r["encoder"]: r for r in res.get("encoders", []) if "encoder" in r}
    framed = enc.get("encode_table (framed)")
    add("encoder >= 1M rows/s per core", framed["rows_cpu_s"] if framed else None, 1e6, "rows/s")
    bsl = enc.get("tfx_bsl RecordBatchToExamplesEncoder")
    add("encoder >= 5x tfx_bsl", framed["rows_s"] / bsl["rows_s"] if framed and bsl else None, 5)
    add(
        "encoder >= 5x tfx_bsl (rows/CPU-s)",
        framed["rows_cpu_s"] / bsl["rows_cpu_s"] if framed and bsl else None,
        5,
    )
    e2e = {e["name"]: e for e in res.get("e2e", [])}

    def ss_ratio(a: str, b: str) -> float | None:
        x, y = e2e.get(a), e2e.get(b)
        if x and y and x.get("steady_rows_s") and y.get("steady_rows_s"):
            return x["steady_rows_s"] / y["steady_rows_s"]
        return None

    for comp, goal in (("gzip", 6), ("none", 8)):
        add(
            f"e2e steady state {comp} >= {goal}x TFX-style (per-row)",
            ss_ratio(PROJECT_GZIP if comp == "gzip" else PROJECT_NONE, f"TFX-style per-row {comp}"),
            goal,
        )
        if f"TFX-style tfx_bsl {comp}" in e2e:
            add(
                f"e2e steady state {comp} >= {goal}x TFX-style (tfx_bsl)",
                ss_ratio(
                    PROJECT_GZIP if comp == "gzip" else PROJECT_NONE, f"TFX-style tfx_bsl {comp}"
                ),
                goal,
            )
    rss = res.get("rss") or []
    scale = f"{rss[1]['rows'] / rss[0]['rows']:.0f}x" if len(rss) == 2 else "8x"
    add(
        f"peak RSS at {scale} the rows <= 1.3x",
        rss[1]["max_rss_mb"] / rss[0]["max_rss_mb"] if len(rss) == 2 else None,
        1.3,
        low=True,
    )
    w = (res.get("workers") or {}).get("jobs", [])
    two = (
        w[1]["steady_rows_s"] / w[0]["steady_rows_s"]
        if len(w) == 2 and w[0].get("steady_rows_s") and w[1].get("steady_rows_s")
        else None
    )
    add("2 workers >= 1.6x one (steady state)", two, 1.6)
    for r in res.get("reader", []):
        if r.get("way") == "pipeline.reader.load_dataset":
            add(f"reader >= 5x tutorial ({r['output']} output)", r["vs_tutorial"], 5)
    return out


# --------------------------------------------------------------------------------------------
# Workers (separate processes)
# --------------------------------------------------------------------------------------------


def worker_tfx_bsl_encode(argv: Sequence[str]) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--input", required=True)
    p.add_argument("--repeat", type=int, default=3)
    a = p.parse_args(argv)
    import tfx_bsl
    from tfx_bsl.coders.example_coder import RecordBatchToExamplesEncoder

    table = pq.read_table(a.input)
    prepared = tfx_bsl_prepare(table)
    coder = RecordBatchToExamplesEncoder()
    t = timed(lambda: [coder.encode(b) for b in prepared], a.repeat)
    print(
        json.dumps(
            {"rows": table.num_rows, **t, "version": tfx_bsl.__version__, "pyarrow": pa.__version__}
        )
    )
    return 0


def worker_tfx_style(argv: Sequence[str]) -> int:
    """ReadFromParquetBatched -> per-row encode -> WriteToTFRecord, on FnApiRunner."""
    p = argparse.ArgumentParser()
    p.add_argument("--input", required=True)
    p.add_argument("--output", required=True)
    p.add_argument("--compression", choices=("gzip", "none"), default="gzip")
    p.add_argument("--encoder", choices=("pyproto", "tfx_bsl"), default="pyproto")
    a, beam_args = p.parse_known_args(argv)
    import apache_beam as beam
    from apache_beam.io.filesystem import CompressionTypes
    from apache_beam.options.pipeline_options import PipelineOptions

    class Encode(beam.DoFn):
        def __init__(self, encoder: str) -> None:
            self._encoder = encoder
            self._fn: Callable[[pa.Table], list[bytes]] | None = None

        def process(self, table: pa.Table) -> Any:
            if self._fn is None:
                self._fn = (
                    tfx_bsl_encoder()
                    if self._encoder == "tfx_bsl"
                    else pyproto_encoder(table.schema)
                )
            yield from self._fn(table)

    compression = (
        CompressionTypes.GZIP if a.compression == "gzip" else CompressionTypes.UNCOMPRESSED
    )
    suffix = ".tfrecord.gz" if a.compression == "gzip" else ".tfrecord"
    options = PipelineOptions(["--runner=FnApiRunner", *beam_args])
    start = time.monotonic()
    with beam.Pipeline(options=options) as pipeline:
        _ = (
            pipeline
            | "Read" >> beam.io.ReadFromParquetBatched(a.input)
            | "Encode" >> beam.ParDo(Encode(a.encoder))
            | "Write"
            >> beam.io.WriteToTFRecord(
                os.path.join(a.output, "train"),
                file_name_suffix=suffix,
                compression_type=compression,
            )
        )
    print(f"tfx-style: {time.monotonic() - start:.1f} s in the pipeline")
    return 0


# --------------------------------------------------------------------------------------------
# Main
# --------------------------------------------------------------------------------------------


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rows", type=int, default=1_000_000, help="rows of the benchmark table")
    p.add_argument("--table", choices=TABLES, default="basic")
    p.add_argument("--quick", action="store_true", help="small sizes, fewer runs: a smoke check")
    p.add_argument("--small-rows", type=int, help="the small run of the steady-state pair (rows/5)")
    p.add_argument("--rss-rows", type=int, default=8_000_000, help="rows for the RSS-scaling run")
    p.add_argument("--per-row-rows", type=int, default=100_000, help="subsample for per-row encode")
    p.add_argument("--compression-rows", type=int, default=262_144, help="rows for the gzip table")
    p.add_argument("--batch-rows", type=int, default=32768, help="encode_table batch (job default)")
    p.add_argument("--row-group-rows", type=int, default=131_072, help="Parquet row group size")
    p.add_argument("--reader-batch", type=int, default=1024)
    p.add_argument("--reader-rows", type=int, default=300_000, help="records each reader way reads")
    p.add_argument(
        "--workers-rows",
        type=int,
        default=16_000_000,
        help="rows of the 4-file input for 1 vs 2 workers (the small run has a quarter)",
    )
    p.add_argument(
        "--e2e-repeat",
        type=int,
        default=2,
        help="job runs: best of N for runs shorter than --repeat-below seconds",
    )
    p.add_argument("--repeat-below", type=float, default=30.0)
    p.add_argument("--repeat", type=int, default=3, help="in-process timings: best of N")
    p.add_argument("--sections", help=f"comma-separated subset of {','.join(SECTIONS)}")
    p.add_argument(
        "--tfx-python",
        help="a Python with tfx_bsl installed, for its encoder and the TFX-style pipeline using it",
    )
    p.add_argument(
        "--workdir", help="where the Parquet inputs and outputs go (default: a temp dir)"
    )
    p.add_argument("--keep", action="store_true", help="keep the work directory")
    p.add_argument("--json", help="also write the results to this JSON file")
    p.add_argument("--markdown", help="also write the report to this file")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["_worker"]:
        mode = argv[1]
        return {"tfx-style": worker_tfx_style, "tfx-bsl-encode": worker_tfx_bsl_encode}[mode](
            argv[2:]
        )
    args = _parser().parse_args(argv)
    if args.quick:
        args.rows = min(args.rows, 20_000)
        args.per_row_rows = min(args.per_row_rows, 5_000)
        args.compression_rows = min(args.compression_rows, 20_000)
        args.repeat = 1
        args.e2e_repeat = 1
        args.reader_rows = min(args.reader_rows, args.rows)
    args.small_rows = args.small_rows or max(1, args.rows // 5)
    args.workers_small_rows = max(1, args.workers_rows // 4)
    sections = (
        args.sections.split(",")
        if args.sections
        else list(QUICK_SECTIONS if args.quick else SECTIONS)
    )
    args.section_list = sections
    unknown = set(sections) - set(SECTIONS)
    if unknown:
        print(f"unknown sections {sorted(unknown)}; known: {', '.join(SECTIONS)}", file=sys.stderr)
        return 2
    sys.path.insert(0, str(REPO))
    import apache_beam

    work = (
        Path(args.workdir) if args.workdir else Path(tempfile.mkdtemp(prefix="tfrecord-etl-bench-"))
    )
    work.mkdir(parents=True, exist_ok=True)
    res: dict[str, Any] = {
        "meta": {
            "table": args.table,
            "rows": args.rows,
            "small_rows": args.small_rows,
            "quick": args.quick,
            "date": datetime.date.today().isoformat(),
            "cpus": os.cpu_count(),
            "machine": platform.processor() or platform.machine(),
            "python": platform.python_version(),
            "beam": apache_beam.__version__,
            "pyarrow": pa.__version__,
            "load_start": load_avg(),
            "reader_batch": args.reader_batch,
            "sections": sections,
            "argv": argv,
        }
    }
    try:
        with open("/proc/cpuinfo") as f:
            model = next(
                (line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), ""
            )
        res["meta"]["machine"] = model or res["meta"]["machine"]
    except OSError:
        pass
    t0 = time.monotonic()
    print(
        f"# tables: {args.table}, {args.rows:,} rows (small run {args.small_rows:,}); "
        f"work dir {work}"
    )
    files: dict[str, Any] = {
        "large": work / f"{args.table}-{args.rows}.parquet",
        "small": work / f"{args.table}-{args.small_rows}.parquet",
    }
    write_parquet(args.table, args.rows, files["large"], args.row_group_rows)
    write_parquet(args.table, args.small_rows, files["small"], args.row_group_rows)
    if "workers" in sections:
        for label, rows in (("small", args.workers_small_rows), ("large", args.workers_rows)):
            whole = work / f"{args.table}-{rows}.parquet"
            if not whole.exists():
                write_parquet(args.table, rows, whole, args.row_group_rows)
            files[f"parts_{label}"] = split_parquet(
                whole, work / f"parts-{label}", 4, args.row_group_rows
            )
    table = pq.read_table(str(files["large"]))
    import numba  # noqa: F401  (numba and Beam, imported above, load before the timer)

    from transforms.schema import plan_features

    sample = table.slice(0, min(table.num_rows, 10_000))
    # The kernel module loads its helpers (compiled with explicit signatures) on import.
    first = time.perf_counter()
    from transforms.encode import encode_table

    enc, _ = encode_table(sample, plan_features(sample.schema), "bench", 0, False)
    res["meta"]["encode_first_call_s"] = time.perf_counter() - first
    res["meta"]["record_bytes"] = int(enc.offsets[-1]) / sample.num_rows
    res["meta"]["parquet_mb"] = files["large"].stat().st_size / 1e6
    print(
        f"  {table.num_columns} columns, {res['meta']['record_bytes']:.0f} B/record, "
        f"Parquet {res['meta']['parquet_mb']:.1f} MB ({time.monotonic() - t0:.1f} s); "
        "encoder start: kernel import + encode_table first call (numba compile/cache load) "
        f"{res['meta']['encode_first_call_s']:.2f} s"
    )
    try:
        if "compression" in sections:
            print("# compression")
            res["compression"] = section_compression(table, args)
        if "encoders" in sections:
            print("# encoders")
            res["encoders"] = section_encoders(table, files["large"], args)
        del table
        if "e2e" in sections:
            print("# end to end")
            res["e2e"] = section_e2e(files, args, work)
        elif "reader" in sections:
            print("# the outputs the reader reads")
            res["reader_outputs"] = section_e2e(files, args, work)
        if "workers" in sections:
            print("# workers")
            res["workers"] = section_workers(args, work, files)
        if "rss" in sections:
            print("# RSS scaling")
            res["rss"] = section_rss(args, work, res.get("e2e", []))
        if "reader" in sections:
            print("# reader")
            res["reader"] = section_reader(res.get("e2e") or res.get("reader_outputs", []), args)
    finally:
        res["meta"]["load_end"] = load_avg()
        res["meta"]["seconds"] = time.monotonic() - t0
        res["targets"] = targets(res)
        text = report(res)
        print()
        print(text)
        if args.json:
            Path(args.json).write_text(json.dumps(res, indent=2, default=str))
        if args.markdown:
            Path(args.markdown).write_text(text)
        if not args.keep and not args.workdir:
            shutil.rmtree(work, ignore_errors=True)
    print(f"({res['meta']['seconds']:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
