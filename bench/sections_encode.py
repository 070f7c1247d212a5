"""Sections: per-block gzip (compression) and in-memory encoders (encoders)."""

from __future__ import annotations

import argparse
import json
import subprocess
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
from baselines import pyproto_encoder, tfx_bsl_available, tfx_bsl_prepare
from measure import REPO, SCRIPT, timed

GZIP_LEVELS = (("zlib", 1), ("zlib", 6), ("isal", 1), ("isal", 2))


def _project_encode(table: pa.Table, specs: Sequence[Any], batch_rows: int, framed: bool) -> int:
    from transforms.encode.records import encode_table

    total = 0
    for start in range(0, table.num_rows, batch_rows):
        encoded, _ = encode_table(table.slice(start, batch_rows), specs, "bench", start, framed)
        total += int(encoded.offsets[-1])
    return total


def section_compression(table: pa.Table, args: argparse.Namespace) -> list[dict[str, Any]]:
    import zlib

    from transforms.encode.records import encode_table
    from transforms.encode.schema import plan_features
    from transforms.write.compression import gzip_compressor

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
    from transforms.encode.records import encode_table
    from transforms.encode.schema import plan_features

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
            str(SCRIPT),
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
