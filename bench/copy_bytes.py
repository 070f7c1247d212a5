"""Gathering records into a new order (`gather_records`: the shuffle's map phase, by bucket, and
its reduce phase, by key) with a memcpy per record (`copy_memory`, LLVM's memcpy: the C
library's) against the loop of 8-byte loads and stores it used before, in one run, on the same
buffers: records of 40-80, 250-350 and 6,000-7,000 bytes, in the order of 768 buckets (3 shards
of 256), as a shuffle's map phase gathers them. Printed: MB/s of each and the ratio (word loop
time over memcpy time), best of `--repeat`.

(The encoder kernel's `copy_bytes` keeps its word loop: with a memcpy, encoding a binary column
of 10-30, 250-350 or 6,000-7,000-byte values ran at the same rate, within 2%.)

    python bench/copy_bytes.py
"""

from __future__ import annotations

import argparse
import sys
from functools import partial
from pathlib import Path

import numpy as np
from numba import njit

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from measure import best

from transforms.encode.kernel.memory import load_i64, load_u8, store_u8, store_u64
from transforms.encode.records import _gathered_offsets, gather_records

SIZES = ((40, 80), (250, 350), (6_000, 7_000))


@njit
def _copy_words(src, dst, offsets, out_off, order):
    for i in range(order.shape[0]):
        r = order[i]
        s, d, n = src + offsets[r], dst + out_off[i], offsets[r + 1] - offsets[r]
        j = 0
        while j + 8 <= n:
            store_u64(d + j, load_i64(s + j))
            j += 8
        while j < n:
            store_u8(d + j, load_u8(s + j))
            j += 1


def gather_words(buffer: np.ndarray, offsets: np.ndarray, order: np.ndarray) -> tuple:
    out_off = _gathered_offsets(offsets, order)
    out = np.empty(int(out_off[-1]), dtype=np.uint8)
    _copy_words(buffer.ctypes.data, out.ctypes.data, offsets, out_off, order)
    return out, out_off


def records(rng: np.random.Generator, n: int, lo: int, hi: int) -> tuple[np.ndarray, np.ndarray]:
    lens = rng.integers(lo, hi, n)
    offsets = np.zeros(n + 1, np.int64)
    offsets[1:] = np.cumsum(lens)
    return rng.integers(0, 256, int(offsets[-1]), dtype=np.uint8), offsets


def section_gather(rng: np.random.Generator, total: int, repeat: int) -> None:
    print("| gather: record bytes | word loop MB/s | memcpy MB/s | ratio |")
    print("| --- | ---: | ---: | ---: |")
    for lo, hi in SIZES:
        n = max(1, total // ((lo + hi) // 2))
        data, offsets = records(rng, n, lo, hi)
        order = np.argsort(rng.integers(0, 768, n).astype(np.uint16), kind="stable")
        a, b = gather_words(data, offsets, order), gather_records(data, offsets, order)
        if not (np.array_equal(a[0], b[0]) and np.array_equal(a[1], b[1])):
            raise SystemExit("the two gathers differ")
        t_words = best(partial(gather_words, data, offsets, order), repeat)
        t_memcpy = best(partial(gather_records, data, offsets, order), repeat)
        mb = data.nbytes / 1e6
        print(f"| {lo}-{hi} | {mb / t_words:,.0f} | {mb / t_memcpy:,.0f} | "
              f"{t_words / t_memcpy:.2f} |", flush=True)  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--megabytes", type=int, default=200, help="bytes of each case, about")
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    total = args.megabytes << 20
    section_gather(rng, total, args.repeat)


if __name__ == "__main__":
    main()
