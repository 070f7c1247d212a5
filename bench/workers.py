"""`convert --workers N`: the in-process engine on one core and on every core, in one run.

Each configuration runs `python -m pipeline convert` as a whole process at two sizes; the runs of
the compared configurations alternate (a change of load hits both alike) and the least wall time
of each is kept; the page cache is synced before each run (the run before's output written back).
Printed:

- throughput: Parquet and CSV inputs, gzip and no compression, `--workers 1` against
  `--workers 2` (or `--workers`): wall seconds at each size, the steady rows/s (row difference
  over wall-time difference: start-up and planning taken out) and the ratios;
- onefile: the CSV input as one file (about 100 MB a million rows), `--workers 1` against
  `--workers 2`, read as byte ranges (the default) and read whole (`csv.range_bytes: 0`, as
  before ranges): steady and whole-process ratios;
- `--shuffle` against the default rolling write, both on every worker, and `--shuffle` with its
  spill files written around the page cache (`SPILL_IO=direct`, the default before);
- output: the shards written around the page cache (the default) against through it
  (`OUTPUT_IO=buffered`), gzip and no compression, on every worker;
- ceiling: what two processes get from this machine with no coordination at all: two
  `--workers 1` jobs at once, each on half the input (Parquet: the table cut in two files; CSV:
  four files each), against one on the whole, at both sizes, gzip and no compression (the
  cores, caches, memory and disk shared, no launcher, merge or assembly), and `--workers 2`
  against the same one-worker runs; before them, the same small piece of work in one process
  and in two at once;
- memory: the peak RSS and PSS of the whole process tree (the launcher and its workers, summed,
  sampled every 0.2 s) at each of `--rss-rows`, for one worker and for every worker. RSS counts
  the pages a forked worker shares with the launcher once per process; PSS splits them.

    python bench/workers.py                                  # 1M and 4M rows; RSS 1M, 4M, 8M
    python bench/workers.py --rows 2000000 --small-rows 500000 --rss-rows 1000000 --rounds 1
"""

from __future__ import annotations

import argparse
import concurrent.futures
import itertools
import os
import shutil
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pyarrow.csv as pacsv
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parent))

from measure import convert_cmd, load_avg, run_process, steady
from tables import split_parquet, write_parquet

ROW_GROUP_ROWS = 131_072
CSV_FILES = 8  # a CSV file is one work item: the input is cut into this many files


def inputs(work: Path, rows: int, fmt: str) -> str:
    """The bench table of `rows` rows as Parquet (131,072-row groups) or CSV (CSV_FILES files)."""
    parquet = work / f"basic-{rows}.parquet"
    if not parquet.exists():
        write_parquet("basic", rows, parquet, ROW_GROUP_ROWS)
    if fmt == "parquet":
        return str(parquet)
    if fmt == "csv1":  # the same rows as one CSV file
        one = work / f"csv1-{rows}.csv"
        if not one.exists():
            pacsv.write_csv(pq.read_table(parquet).drop_columns(["emb"]), one)
        return str(one)
    folder = work / f"csv-{rows}"
    if not folder.exists():
        folder.mkdir()
        table = pq.read_table(parquet).drop_columns(["emb"])  # CSV holds no lists
        step = -(-table.num_rows // CSV_FILES)
        for i in range(CSV_FILES):
            pacsv.write_csv(table.slice(i * step, step), folder / f"part-{i}.csv")
    return str(folder / "part-*.csv")


def _kernel(kind: str, out: Any) -> None:
    """One process's share of `core_scaling`: its seconds put on `out`."""
    import hashlib
    import mmap
    import time
    import zlib

    import numpy as np

    data = np.random.default_rng(0).integers(0, 50, 8 << 20, dtype=np.uint8)
    start = time.perf_counter()
    if kind == "sha256":
        for _ in range(600):
            hashlib.sha256(data[: 1 << 20]).digest()
    elif kind == "zlib":
        for _ in range(6):
            zlib.compress(data.tobytes(), 6)
    elif kind == "copy 64 MiB":
        a, b = np.ones(64 << 20, dtype=np.uint8), np.empty(64 << 20, dtype=np.uint8)
        start = time.perf_counter()
        for _ in range(60):
            np.copyto(b, a)
    elif kind == "fresh pages":
        for _ in range(40):
            m = mmap.mmap(-1, 64 << 20)
            np.frombuffer(m, dtype=np.uint8)[::4096] = 1
            m.close()
    else:  # a loop of Python bytecode
        total = 0
        for i in range(15_000_000):
            total += i & 7
    out.put(time.perf_counter() - start)


def core_scaling(rounds: int) -> dict[str, float]:
    """The same work in one process and in two at once (`rounds` times each, the least kept):
    2 x one's time / the pair's, for kinds of work the job does (2.0: two full cores)."""
    import multiprocessing

    context = multiprocessing.get_context("fork")
    out = {}
    for kind in ("sha256", "zlib", "copy 64 MiB", "fresh pages", "python loop"):
        best = {}
        for _ in range(max(1, rounds)):
            for n in (1, 2):
                queue = context.Queue()
                procs = [context.Process(target=_kernel, args=(kind, queue)) for _ in range(n)]
                for proc in procs:
                    proc.start()
                took = max(queue.get() for _ in procs)
                for proc in procs:
                    proc.join()
                best[n] = min(best.get(n, took), took)
        out[kind] = 2 * best[1] / best[2]
    return out


def _rows_per_s(rate: float | None) -> str:
    """A steady rate as printed: n/a where it could not be had."""
    return f"{rate:,.0f}" if rate else "n/a"


def _ratio(rate: dict[str, float | None], a: str, b: str) -> str:
    """rate[a] / rate[b], or n/a where a steady rate could not be had (the sizes too close)."""
    return f"{rate[a] / rate[b]:.2f}" if rate[a] and rate[b] else "n/a"


def halves(work: Path, rows: int, fmt: str) -> list[str]:
    """The bench table of `rows` rows in two halves: two Parquet files, or two globs of half
    the CSV files each."""
    whole = inputs(work, rows, fmt)
    if fmt == "csv":
        half = CSV_FILES // 2
        return [whole.replace("part-*", f"part-[0-{half - 1}]"),
                whole.replace("part-*", f"part-[{half}-{CSV_FILES - 1}]")]  # fmt: skip
    folder = work / f"halves-{rows}"
    if not folder.exists():
        split_parquet(Path(whole), folder, 2, ROW_GROUP_ROWS)
    return [str(folder / f"part-{i:05d}.parquet") for i in range(2)]


def run_pair(work: Path, sources: Sequence[str], flags: Sequence[str], label: str) -> dict:
    """Two one-worker jobs started at once, each on its source: the wall time of the later."""
    os.sync()
    outs = [work / f"out-pair-{i}" for i in range(2)]

    def one(i: int) -> dict:
        cmd = convert_cmd(sources[i], outs[i], "--quiet", "--workers", "1", *flags)
        return run_process(cmd, work / "logs" / f"{label}-{i}.log")

    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        got = list(pool.map(one, range(2)))
    for out in outs:
        shutil.rmtree(out, ignore_errors=True)
    return {
        "wall_s": max(g["wall_s"] for g in got),
        "cpu_s": sum(g["cpu_s"] for g in got),
        "rc": max(g["rc"] for g in got),
        "load": load_avg(),
    }


def ceiling(
    work: Path, fmt: str, compression: str, sizes: Sequence[int], rounds: int
) -> dict[str, float | None]:
    """Steady rows/s of `--workers 1`, `--workers 2` and a pair of one-worker jobs on halves
    (`run_pair`), alternating, with the shards' `compression`; the best run of each at each
    size."""
    flags = ["--compression", compression]

    def one(name: str, n: int) -> dict:
        label = f"{name}-{compression}-{n}"
        if name == "pair":
            return run_pair(work, halves(work, n, fmt), flags, label)
        return run(work, inputs(work, n, fmt), ["--workers", name[1:], *flags], label)

    names = ["w1", "w2", "pair"]
    best: dict[tuple[str, int], dict] = {}
    for n in sizes:
        for r in range(rounds):
            for name in names if r % 2 == 0 else names[::-1]:
                got = one(name, n)
                print(f"  {fmt} {compression} {name:<5} {n:>10,} rows: {got['wall_s']:6.2f} s  "
                      f"cpu {got['cpu_s']:6.2f} s  (load {got['load']})", flush=True)  # fmt: skip
                if got["rc"] == 0 and (
                    (name, n) not in best or got["wall_s"] < best[name, n]["wall_s"]
                ):
                    best[name, n] = got
    return {k: steady(best[k, sizes[0]], best[k, sizes[1]], *sizes) for k in names}


def run(work: Path, source: str, flags: Sequence[str], label: str, env: dict | None = None) -> dict:
    out = work / "out"
    shutil.rmtree(out, ignore_errors=True)
    # Each run starts with no dirty page left by the one before: on a virtual disk, writing back
    # a gigabyte of the last run's output takes CPU time from the next run.
    os.sync()
    result = run_process(
        convert_cmd(source, out, "--quiet", *flags), work / "logs" / f"{label}.log", env
    )
    result["load"] = load_avg()
    shutil.rmtree(out, ignore_errors=True)
    return result


def compare(
    work: Path,
    configs: dict[str, tuple],
    sizes: Sequence[int],
    rounds: int,
) -> dict[tuple[str, int], dict]:
    """Every config, (input format, flags[, environment]), at every size, `rounds` times,
    alternating; the best run of each."""
    best: dict[tuple[str, int], dict] = {}
    names = list(configs)
    for n in sizes:
        for r in range(rounds):
            for name in names if r % 2 == 0 else names[::-1]:
                fmt, flags, *env = configs[name]
                label = f"{name}-{n}-{r}".replace(" ", "-").replace(",", "")
                got = run(work, inputs(work, n, fmt), flags, label, *env)
                print(f"  {name:<28} {n:>10,} rows: {got['wall_s']:6.2f} s  "
                      f"cpu {got['cpu_s']:6.2f} s  (load {got['load']})", flush=True)  # fmt: skip
                if got["rc"] == 0 and (
                    (name, n) not in best or got["wall_s"] < best[name, n]["wall_s"]
                ):
                    best[name, n] = got
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=4_000_000)
    parser.add_argument("--small-rows", type=int, default=1_000_000)
    parser.add_argument("--workers", type=int, default=2, help="the many-worker side (default 2)")
    parser.add_argument("--rss-rows", default="1000000,4000000,8000000")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--sections", default="throughput,onefile,shuffle,output,ceiling,memory")
    parser.add_argument(
        "--ceiling-compressions",
        type=lambda text: text.split(","),
        default=["gzip", "none"],
        help="the shards' compressions the ceiling section runs (default gzip,none)",
    )
    parser.add_argument("--workdir", help="where inputs and outputs go (default: a temp dir)")
    args = parser.parse_args()
    sections = set(args.sections.split(","))
    sizes = (args.small_rows, args.rows)
    many = args.workers
    print(f"bench/workers.py: {sizes[0]:,} and {sizes[1]:,} rows, 1 vs {many} workers; "
          f"load {load_avg()}", flush=True)  # fmt: skip
    work = Path(args.workdir or tempfile.mkdtemp(prefix="workers-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    report = []
    if "throughput" in sections:
        for fmt in ("parquet", "csv"):
            for compression in ("gzip", "none"):
                flags = ["--compression", compression]
                configs = {
                    f"{fmt} {compression} w1": (fmt, [*flags, "--workers", "1"]),
                    f"{fmt} {compression} w{many}": (fmt, [*flags, "--workers", str(many)]),
                }
                best = compare(work, configs, sizes, args.rounds)
                one, all_ = list(configs)
                rate1 = steady(best[one, sizes[0]], best[one, sizes[1]], *sizes)
                rate_n = steady(best[all_, sizes[0]], best[all_, sizes[1]], *sizes)
                whole = best[one, sizes[1]]["wall_s"] / best[all_, sizes[1]]["wall_s"]
                walls = {k: [best[k, n]["wall_s"] for n in sizes] for k in configs}
                report.append(
                    f"| {fmt} | {compression} | {walls[one][0]:.2f} / {walls[one][1]:.2f} | "
                    f"{walls[all_][0]:.2f} / {walls[all_][1]:.2f} | "
                    f"{rate1:,.0f} | {rate_n:,.0f} | {rate_n / rate1:.2f} | {whole:.2f} |"
                )
        print()
        print(f"| input | compression | w1 wall s ({sizes[0]:,} / {sizes[1]:,}) | "
              f"w{many} wall s | w1 steady rows/s | w{many} steady rows/s | "
              f"steady w{many}/w1 | whole process w{many}/w1 ({sizes[1]:,}) |")  # fmt: skip
        print("| --- | --- | --- | --- | --- | --- | --- | --- |")
        print("\n".join(report), flush=True)
    if "onefile" in sections:
        whole = work / "whole.yaml"  # every CSV file read whole, as before byte ranges
        whole.write_text("csv: {range_bytes: 0}\n", encoding="utf-8")
        configs = {
            "one CSV w1": ("csv1", ["--workers", "1"]),
            f"one CSV w{many}": ("csv1", ["--workers", str(many)]),
            f"one CSV w{many}, read whole": ("csv1", ["--workers", str(many), "--config", whole]),
        }
        best = compare(work, configs, sizes, args.rounds)
        rates = {k: steady(best[k, sizes[0]], best[k, sizes[1]], *sizes) for k in configs}
        one, ranged, read_whole = configs
        print(f"\none CSV file ({sizes[1]:,} rows): w{many} / w1 steady "
              f"{rates[ranged] / rates[one]:.2f}, whole process "
              f"{best[one, sizes[1]]['wall_s'] / best[ranged, sizes[1]]['wall_s']:.2f}; "
              f"w{many} read whole / w1 steady {rates[read_whole] / rates[one]:.2f}, whole "
              f"process {best[one, sizes[1]]['wall_s'] / best[read_whole, sizes[1]]['wall_s']:.2f}",
              flush=True)  # fmt: skip
    if "shuffle" in sections:
        shuffle = ["--workers", str(many), "--shuffle"]
        configs = {
            "default": ("parquet", ["--workers", str(many)]),
            "shuffle": ("parquet", shuffle),  # spill files through the page cache
            # around it (O_DIRECT), the default before (transforms/write/direct.py)
            "shuffle, direct spill": ("parquet", shuffle, {"SPILL_IO": "direct"}),
        }  # fmt: skip
        best = compare(work, configs, sizes, args.rounds)
        rates = {k: steady(best[k, sizes[0]], best[k, sizes[1]], *sizes) for k in configs}
        print()
        for name in ("shuffle", "shuffle, direct spill"):
            print(f"{name} on {many} workers: steady {_rows_per_s(rates[name])} rows/s against "
                  f"{_rows_per_s(rates['default'])} rows/s: {_ratio(rates, name, 'default')}; "
                  f"whole process at {sizes[1]:,} rows: "
                  f"{best[name, sizes[1]]['wall_s']:.2f} s against "
                  f"{best['default', sizes[1]]['wall_s']:.2f} s", flush=True)  # fmt: skip
        walls = {k: best[k, sizes[1]]["wall_s"] for k in configs}
        print(f"spill through the page cache / around it: steady "
              f"{_ratio(rates, 'shuffle', 'shuffle, direct spill')}, whole process at "
              f"{sizes[1]:,} rows {walls['shuffle, direct spill'] / walls['shuffle']:.2f}",
              flush=True)  # fmt: skip
    if "output" in sections:
        for compression in ("gzip", "none"):
            flags = ["--workers", str(many), "--compression", compression]
            configs = {
                f"{compression}, direct shards": ("parquet", flags),
                # the shards through the page cache, as before (transforms/write/files.py)
                f"{compression}, buffered shards": ("parquet", flags, {"OUTPUT_IO": "buffered"}),
            }
            best = compare(work, configs, sizes, args.rounds)
            rates = {k: steady(best[k, sizes[0]], best[k, sizes[1]], *sizes) for k in configs}
            direct, buffered = configs
            print(f"{compression} on {many} workers: shards around the page cache steady "
                  f"{rates[direct]:,.0f} rows/s against {rates[buffered]:,.0f} through it: "
                  f"{rates[direct] / rates[buffered]:.2f}; whole process at {sizes[1]:,} rows "
                  f"{best[direct, sizes[1]]['wall_s']:.2f} s against "
                  f"{best[buffered, sizes[1]]['wall_s']:.2f} s (cpu "
                  f"{best[direct, sizes[1]]['cpu_s']:.2f} against "
                  f"{best[buffered, sizes[1]]['cpu_s']:.2f} s)", flush=True)  # fmt: skip
    if "ceiling" in sections:
        scaling = core_scaling(args.rounds)
        print("\nthe cores: the same work in two processes at once against one: "
              + ", ".join(f"{k} {v:.2f}" for k, v in scaling.items()), flush=True)  # fmt: skip
        print("\n| input | steady pair of w1 on halves / w1 | steady w2 / w1 | w2 / pair |")
        print("| --- | --- | --- | --- |")
        for fmt, compression in itertools.product(("parquet", "csv"), args.ceiling_compressions):
            rate = ceiling(work, fmt, compression, sizes, args.rounds)
            pair, w2 = _ratio(rate, "pair", "w1"), _ratio(rate, "w2", "w1")
            print(f"| {fmt}, {compression} | {pair} | {w2} | {_ratio(rate, 'w2', 'pair')} |")
    if "memory" in sections:
        rss_sizes = [int(x) for x in args.rss_rows.split(",")]
        configs = {
            "w1": ("parquet", ["--workers", "1"]),
            f"w{many}": ("parquet", ["--workers", str(many)]),
        }
        best = compare(work, configs, rss_sizes, 1)
        print("\n| rows | workers | tree RSS MiB | tree PSS MiB | largest process RSS MiB |")
        print("| --- | --- | --- | --- | --- |")
        for n in rss_sizes:
            for name in configs:
                b = best[name, n]
                print(f"| {n:,} | {name[1:]} | {b['tree_rss_mb']:.0f} | {b['tree_pss_mb']:.0f} | "
                      f"{b['max_rss_mb']:.0f} |")  # fmt: skip
    print(f"\nload at the end {load_avg()}")
    if not args.workdir:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
