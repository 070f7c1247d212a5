"""The TensorFlow-free reader against load_dataset, and random access through index files.

On the bench's `basic` table (bench/tables.py) converted once per compression (gzip, none; with
`--index`), each way of reading runs in its own process pinned to one core (`taskset -c 0`:
tf.data would otherwise spread over every core), the ways alternating, best of `--rounds`.
Printed: rows/s of a whole pass (after one pass that loads the compiled code and TensorFlow's),
the ratio iter_batches / load_dataset (and against the `tfrecord` package's PyTorch-side reader,
one dict of numpy arrays per record, on the split's first 200,000 records, when it is
installed: `pip install tfrecord`), and random access: rows/s of 10,000 random rows read one
at a time (RecordIndex.record: the bytes, crcs checked) and decoded in batches of 256
(RecordIndex.batch).

    python bench/readers.py --rows 1000000
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from measure import REPO, convert_cmd, load_avg
from tables import write_parquet

PASS = """
import itertools, json, sys, time, os
os.environ["TF_CPP_MIN_LOG_LEVEL"] = "2"
out, way, batch = sys.argv[1], sys.argv[2], 1024
if way == "iter_batches":
    from pipeline.reader.arrays import iter_batches
    make = lambda: iter_batches(out, batch_size=batch)
    count = lambda b: len(b["user_id"])
elif way == "tfrecord_package":  # its reader, one dict of numpy arrays per record
    import itertools, json as j
    from tfrecord.reader import tfrecord_loader
    manifest = j.load(open(os.path.join(out, "manifest.json")))
    files = [os.path.join(out, f) for f in manifest["splits"]["train"]["files"]]
    kind = None if manifest["compression"] == "none" else manifest["compression"]
    every = lambda: itertools.chain.from_iterable(
        tfrecord_loader(f, None, compression_type=kind) for f in files)
    make = lambda: itertools.islice(every(), 200_000)  # a per-record reader: a part of the split
    count = lambda b: 1
else:
    from pipeline.reader import load_dataset
    make = lambda: load_dataset(out, batch_size=batch)
    count = lambda b: int(b["user_id"].shape[0])
for _ in itertools.islice(make(), 100) if way == "tfrecord_package" else make():
    pass
t = time.perf_counter()
rows = sum(count(b) for b in make())
print(json.dumps({"rows": rows, "seconds": time.perf_counter() - t}))
"""

RANDOM = """
import json, sys, time
import numpy as np
from pipeline.reader.index import RecordIndex
records = RecordIndex(sys.argv[1])
picks = np.random.default_rng(0).integers(0, len(records), 10_000)
records.batch(picks[:10])
t = time.perf_counter()
for i in picks.tolist():
    records.record(i)
one = time.perf_counter() - t
t = time.perf_counter()
for j in range(0, len(picks), 256):
    records.batch(picks[j:j + 256])
batched = time.perf_counter() - t
print(json.dumps({"one_at_a_time": len(picks) / one, "batches_of_256": len(picks) / batched}))
"""


HAS_TFRECORD = importlib.util.find_spec("tfrecord") is not None


def _run(code: str, *args: str) -> dict:
    cmd = ["taskset", "-c", "0", sys.executable, "-c", code, *args]
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, check=True)
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="readers-bench-"))
    print(f"bench/readers.py: {args.rows:,} rows, one core; load {load_avg()}", flush=True)
    try:
        source = work / "basic.parquet"
        write_parquet("basic", args.rows, source, 131_072)
        for compression in ("gzip", "none"):
            out = work / f"out-{compression}"
            cmd = convert_cmd(source, out, "--quiet", "--index", "--compression", compression)
            subprocess.run(cmd, cwd=REPO, check=True, stdout=subprocess.DEVNULL)
            best: dict[str, float] = {}
            ways = ["iter_batches", "load_dataset", *(["tfrecord_package"] if HAS_TFRECORD else [])]
            for r in range(args.rounds):
                for way in ways if r % 2 == 0 else ways[::-1]:
                    got = _run(PASS, str(out), way)
                    rate = got["rows"] / got["seconds"]
                    print(f"  {compression} {way:<13} {rate:>10,.0f} rows/s (load {load_avg()})")
                    best[way] = max(best.get(way, 0.0), rate)
            ratio = best["iter_batches"] / best["load_dataset"]
            print(f"{compression}: iter_batches {best['iter_batches']:,.0f} rows/s, load_dataset "
                  f"{best['load_dataset']:,.0f} rows/s: {ratio:.2f}x", flush=True)  # fmt: skip
            if HAS_TFRECORD:
                theirs = best["tfrecord_package"]
                print(f"{compression}: the tfrecord package's reader {theirs:,.0f} rows/s: "
                      f"iter_batches {best['iter_batches'] / theirs:.1f}x", flush=True)  # fmt: skip
            rnd = max((_run(RANDOM, str(out)) for _ in range(args.rounds)),
                      key=lambda r: r["batches_of_256"])  # fmt: skip
            one, batched = rnd["one_at_a_time"], rnd["batches_of_256"]
            print(f"{compression}: random access, 10,000 rows: {one:,.0f} records/s one at a "
                  f"time, {batched:,.0f} rows/s decoded in batches of 256", flush=True)  # fmt: skip
            shutil.rmtree(out)
        print(f"load at the end {load_avg()}")
    finally:
        shutil.rmtree(work, ignore_errors=True)
        os.sync()


if __name__ == "__main__":
    main()
