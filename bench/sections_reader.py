"""Section reader: pipeline.reader.load_dataset against TFRecordDataset -> parse_single_example."""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any


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
