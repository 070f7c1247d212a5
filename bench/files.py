"""`files:` columns: a CSV of image references converted by the job, against the usual recipe
(a plain Python loop that reads each file and writes `tf.train.Example`s with TensorFlow's
`TFRecordWriter`), in one run, on the same files, on the same machine at the same time.

The images: `--images` small JPEGs (seeded; 96-159 x 128-191 pixels, quality 90, about 6.5 KB
each), referenced by `--rows` rows of one CSV (`image,label`; the images in turn, each referenced
`rows / images` times, so the run is long enough to time a steady rate), and the same rows cut
into two CSV files. Their pages are read once before any timing, so every run reads them from
the page cache.

Modes, each against its baseline loop:
- `bytes` (`files: {image: {}}`): the file's bytes; the loop reads each file whole;
- `check` (`image: {}`): the bytes, each image decoded in full and its height, width and
  channels written; the loop decodes each with Pillow (`Image.open(...).load()`) too;
- `resize` (`image: {resize: 64, format: jpeg, quality: 90}`): each image resized (shorter side
  64) and re-encoded; the loop does the same with Pillow.

The loops run in this process, TensorFlow imported before the clock starts. The job runs as a
whole command (`python -m pipeline convert`, its start-up and plan included) at `--small` and
`--rows` rows: its wall time at `--rows`, and its steady rate (the row difference over the
wall-time difference: start-up and planning taken out). Both write uncompressed records
(`--compression none`, as the loop's default `TFRecordWriter`). `--python-reads` adds the job on
1 CSV with `FILE_READS=python`: local files kept as bytes read by `read_local` in Python rather
than by the compiled loop (transforms/files/local_reads.py). `--floor` adds, in bytes mode, that
compiled loop alone over the same files (in this process's children: one over every row, then
two at once over half each): what the job's reads cost with nothing encoded or written, the
ceiling of its steady rate. Every job output is checked to hold every row.

    python bench/files.py                       # 10,000 images, 100,000 rows
    python bench/files.py --images 2000 --rows 2000 --small 500 --rounds 1
    python bench/files.py --modes bytes --python-reads  # also FILE_READS=python, 1 CSV
    python bench/files.py --modes bytes --floor         # also the read loop alone
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from measure import convert_cmd, load_avg, run_process

MODES = {
    "bytes": {"image": {}},
    "check": {"image": {"image": {}}},
    "resize": {"image": {"image": {"resize": 64, "format": "jpeg", "quality": 90}}},
}
SIDE = 64  # the resize mode's shorter side


def make_images(work: Path, count: int) -> tuple[list[tuple[str, int]], int]:
    """`count` seeded JPEGs under work/img; (relative path, label) of each, and their bytes."""
    from PIL import Image

    folder = work / "img"
    folder.mkdir(parents=True, exist_ok=True)
    rows, total = [], 0
    for i in range(count):
        rng = np.random.default_rng(i)
        height, width = 96 + (i * 7) % 64, 128 + (i * 11) % 64
        small = Image.fromarray(rng.integers(0, 256, (4, 4, 3), dtype=np.uint8))
        smooth = np.asarray(small.resize((width, height), Image.BILINEAR)).astype(np.int16)
        grain = rng.integers(-12, 12, (height, width, 3))
        path = folder / f"{i:06d}.jpg"
        if not path.exists():
            Image.fromarray(np.clip(smooth + grain, 0, 255).astype(np.uint8)).save(path, quality=90)
        total += path.stat().st_size
        rows.append((f"img/{path.name}", i % 10))
    return rows, total


def write_csvs(work: Path, rows: list[tuple[str, int]], name: str) -> tuple[Path, Path]:
    """The rows as one CSV (work/NAME.csv) and as two (work/NAME-parts/part-{0,1}.csv)."""
    one = work / f"{name}.csv"
    with open(one, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["image", "label"])
        w.writerows(rows)
    parts = work / f"{name}-parts"
    parts.mkdir(exist_ok=True)
    half = (len(rows) + 1) // 2
    for k, chunk in enumerate((rows[:half], rows[half:])):
        with open(parts / f"part-{k}.csv", "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(["image", "label"])
            w.writerows((f"../{path}", label) for path, label in chunk)
    return one, parts


def warm(work: Path) -> None:
    """Every image read once: the runs after read them from the page cache."""
    for path in (work / "img").iterdir():
        path.read_bytes()


# -- the usual recipe ----------------------------------------------------------------------


def loop(work: Path, rows: list[tuple[str, int]], mode: str, out: Path) -> float:
    """The plain loop: each file read (and decoded, or resized and re-encoded), one Example
    each, written by TensorFlow's TFRecordWriter; its wall seconds."""
    import tensorflow as tf
    from PIL import Image

    def feature(value: bytes | int) -> tf.train.Feature:
        if isinstance(value, bytes):
            return tf.train.Feature(bytes_list=tf.train.BytesList(value=[value]))
        return tf.train.Feature(int64_list=tf.train.Int64List(value=[value]))

    start = time.perf_counter()
    with tf.io.TFRecordWriter(str(out)) as writer:
        for path, label in rows:
            with open(work / path, "rb") as f:
                data = f.read()
            values: dict[str, bytes | int] = {"image": data, "label": label}
            if mode == "check":
                image = Image.open(io.BytesIO(data))
                image.load()
                bands = len(image.getbands())
                values.update(image_height=image.height, image_width=image.width)
                values["image_channels"] = bands
            elif mode == "resize":
                image = Image.open(io.BytesIO(data)).convert("RGB")
                scale = SIDE / min(image.size)
                size = (round(image.width * scale), round(image.height * scale))
                image = image.resize(size, Image.Resampling.BICUBIC)
                buffer = io.BytesIO()
                image.save(buffer, format="JPEG", quality=90)
                values.update(image=buffer.getvalue(), image_height=image.height)
                values.update(image_width=image.width, image_channels=3)
            example = tf.train.Example(
                features=tf.train.Features(feature={k: feature(v) for k, v in values.items()})
            )
            writer.write(example.SerializeToString())
    return time.perf_counter() - start


# -- the job's read loop alone -------------------------------------------------------------


def _reads(paths: list[str], out: Any) -> None:
    """Read every file of `paths` as the job's compiled loop does (parts of the stage's size,
    each part's buffers dropped before the next); put (start, end) on `out`."""
    import pyarrow as pa

    from transforms.files.local_reads import LocalRows
    from transforms.files.stage import CHUNK_BYTES

    rows = LocalRows([pa.array(paths, pa.large_string())], [64 << 20])
    start, done = time.perf_counter(), 0
    while done < rows.n:
        done, _ = rows.read(done, CHUNK_BYTES)
    if rows.fallback.any():
        raise SystemExit(f"the read loop left {int(rows.fallback.sum())} files to Python")
    out.put((start, time.perf_counter()))


def read_floor(work: Path, rows: list[tuple[str, int]], processes: int) -> float:
    """Wall seconds of the job's compiled read loop alone (transforms/files/local_reads.py) over
    the rows' files, cut in `processes` consecutive runs read by as many processes at once
    (forked, the kernel loaded before): what the job's file reads cost with nothing decoded,
    encoded or written, the floor of its steady rate on that many workers."""
    import multiprocessing

    from transforms.files.local_reads import compile_kernel

    compile_kernel()
    paths = [str(work / path) for path, _ in rows]
    step = -(-len(paths) // processes)
    context = multiprocessing.get_context("fork")
    queue = context.Queue()
    procs = [
        context.Process(target=_reads, args=(paths[i : i + step], queue))
        for i in range(0, len(paths), step)
    ]
    for proc in procs:
        proc.start()
    spans = [queue.get() for _ in procs]
    for proc in procs:
        proc.join()
        if proc.exitcode:
            raise SystemExit(f"a read-loop process failed (exit code {proc.exitcode})")
    return max(end for _, end in spans) - min(start for start, _ in spans)


# -- the job -------------------------------------------------------------------------------


def job(
    work: Path, source: Path | str, mode: str, rows: int, tag: str, env: dict | None = None
) -> dict:
    config = work / f"{mode}.yaml"
    config.write_text(json.dumps({"files": MODES[mode]}), encoding="utf-8")
    out = work / f"out-{tag}"
    shutil.rmtree(out, ignore_errors=True)
    cmd = convert_cmd(source, out, "--config", str(config), "--compression", "none", "--quiet")
    result = run_process(cmd, work / "logs" / f"{tag}.log", env)
    if result["rc"] == 0:
        manifest = json.loads((out / "manifest.json").read_text())
        if manifest["rows"] != rows or manifest["bad_rows"]["count"]:
            raise SystemExit(f"{tag}: {manifest['rows']} rows of {rows}, bad rows in {out}")
    shutil.rmtree(out, ignore_errors=True)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--images", type=int, default=10_000)
    parser.add_argument("--rows", type=int, default=100_000, help="rows of the large run")
    parser.add_argument("--small", type=int, default=2_000, help="rows of the small job run")
    parser.add_argument("--rounds", type=int, default=2, help="runs of each; the best is kept")
    parser.add_argument("--modes", default="bytes,check,resize")
    parser.add_argument("--workdir", type=Path, default=None)
    parser.add_argument("--keep", action="store_true", help="keep the work directory")
    parser.add_argument(
        "--python-reads",
        action="store_true",
        help="also the job on 1 CSV with FILE_READS=python (local files kept as bytes read "
        "in Python, not by the compiled loop)",
    )
    parser.add_argument(
        "--floor",
        action="store_true",
        help="bytes mode: also the job's compiled read loop alone, in 1 process and in 2 at once",
    )
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    work = args.workdir or Path(tempfile.mkdtemp(prefix="bench-files-"))
    work.mkdir(parents=True, exist_ok=True)
    modes = args.modes.split(",")
    try:
        print(f"making {args.images:,} JPEGs in {work} ...", file=sys.stderr)
        images, _ = make_images(work, args.images)
        rows = [images[i % len(images)] for i in range(args.rows)]
        total = sum((work / p).stat().st_size for p, _ in rows)
        big, big_parts = write_csvs(work, rows, "images")
        small, small_parts = write_csvs(work, rows[: args.small], "small")
        small_bytes = sum((work / p).stat().st_size for p, _ in rows[: args.small])
        warm(work)
        import tensorflow as tf  # noqa: F401 - imported before the loops' clocks start

        results: dict = {"images": args.images, "rows": args.rows, "mb": total / 1e6}
        results["load_before"] = load_avg()
        for mode in modes:
            best: dict[str, float] = {}
            for r in range(args.rounds):
                order = [("loop", None), ("one", (small, big)), ("two", (small_parts, big_parts))]
                if args.python_reads:
                    order.insert(2, ("python", (small, big)))
                for name, sources in order if r % 2 == 0 else order[::-1]:
                    if sources is None:
                        wall = loop(work, rows, mode, work / "loop.tfrecord")
                        best["loop"] = min(best.get("loop", wall), wall)
                        if args.floor and mode == "bytes":
                            for n in (1, 2):
                                wall = read_floor(work, rows, n)
                                best[f"floor{n}"] = min(best.get(f"floor{n}", wall), wall)
                        continue
                    source_small, source_big = sources
                    if name == "two":
                        source_small, source_big = source_small / "*.csv", source_big / "*.csv"
                    for size, source, count in (
                        ("small", source_small, args.small),
                        ("large", source_big, args.rows),
                    ):
                        env = {"FILE_READS": "python"} if name == "python" else None
                        res = job(work, source, mode, count, f"{mode}-{name}-{size}-{r}", env)
                        key = f"{name}_{size}"
                        if res["rc"] == 0:
                            best[key] = min(best.get(key, res["wall_s"]), res["wall_s"])
                print(f"  {mode} round {r + 1}: {best} (load {load_avg()})", file=sys.stderr)
            results[mode] = best
        results["load_after"] = load_avg()
        report(results, args.rows, args.small, total, small_bytes)
        if args.json:
            args.json.write_text(json.dumps(results, indent=2), encoding="utf-8")
    finally:
        if not args.keep and args.workdir is None:
            shutil.rmtree(work, ignore_errors=True)


def report(results: dict, rows: int, small: int, total: int, small_bytes: int) -> None:
    mb = total / 1e6
    load = f"load average {results['load_before']} before, {results['load_after']} after"
    print(f"{results['images']:,} JPEGs in {rows:,} rows, {mb:.1f} MB; {load}")
    print()
    print("| mode | way | wall s | images/s | MB/s | vs loop |")
    print("| --- | --- | ---: | ---: | ---: | ---: |")
    for mode in MODES:
        best = results.get(mode)
        if not best or "loop" not in best:
            continue
        base = rows / best["loop"]
        print(f"| {mode} | loop (in process) | {best['loop']:.2f} | {base:,.0f} | "
              f"{mb / best['loop']:.1f} | 1.00 |")  # fmt: skip
        for n in (1, 2):
            if f"floor{n}" in best:
                wall = best[f"floor{n}"]
                label, ratio = f"the job's read loop alone, {n} process(es)", best["loop"] / wall
                print(f"| {mode} | {label} | {wall:.2f} | {rows / wall:,.0f} | {mb / wall:.1f} | "
                      f"{ratio:.2f} |")  # fmt: skip
        ways = (("one", "job, 1 CSV"), ("python", "job, 1 CSV, read in Python"))
        for name, label in (*ways, ("two", "job, 2 CSVs")):
            if f"{name}_large" not in best:
                continue
            wall = best[f"{name}_large"]
            print(f"| {mode} | {label}: whole command | {wall:.2f} | {rows / wall:,.0f} | "
                  f"{mb / wall:.1f} | {best['loop'] / wall:.2f} |")  # fmt: skip
            dt = wall - best.get(f"{name}_small", float("inf"))
            if dt > 0:
                rate = (rows - small) / dt
                mbs = (total - small_bytes) / 1e6 / dt
                print(f"| {mode} | {label}: steady | | {rate:,.0f} | {mbs:.1f} | "
                      f"{rate / base:.2f} |")  # fmt: skip


if __name__ == "__main__":
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    main()
