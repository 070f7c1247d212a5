"""The project's hash of many values at once (`hash_ranges`: the shuffle key of every record, a
record's split when the job has splits and no `split_key`) against the loop it used before, in
one run, on the same buffers: four consecutive values side by side over the bytes all four
have, a byte load each, then each value's rest alone. Now: four lanes that step a word (eight
bytes, one load) at a time, each taking the next value as soon as its own is done
(transforms/hashing.py). Both give the same hashes (checked here before timing). Values of
8-24, 40-120, 250-350 and 300 bytes (an Example of the bench's basic table is about 300):
MB/s of each and the ratio (the old loop's time over the new one's), best of `--repeat`.

    python bench/hashing.py
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

from transforms.hashing import _FNV_PRIME, FNV_OFFSET, _final_mix, _fnv1a, hash_ranges_kernel

SIZES = ((8, 24), (40, 120), (250, 350), (300, 301))


@njit
def four_consecutive(starts, ends, data, prefix):
    """The loop before: four consecutive values over their common bytes, then each alone."""
    n = len(starts)
    out = np.empty(n, dtype=np.uint64)
    h0 = _fnv1a(prefix, 0, len(prefix), FNV_OFFSET)
    i = 0
    while i + 4 <= n:
        s0, s1, s2, s3 = starts[i], starts[i + 1], starts[i + 2], starts[i + 3]
        e0, e1, e2, e3 = ends[i], ends[i + 1], ends[i + 2], ends[i + 3]
        common = max(0, min(min(e0 - s0, e1 - s1), min(e2 - s2, e3 - s3)))
        a, b, c, d = h0, h0, h0, h0
        for j in range(common):
            a = (a ^ np.uint64(data[s0 + j])) * _FNV_PRIME
            b = (b ^ np.uint64(data[s1 + j])) * _FNV_PRIME
            c = (c ^ np.uint64(data[s2 + j])) * _FNV_PRIME
            d = (d ^ np.uint64(data[s3 + j])) * _FNV_PRIME
        out[i] = _final_mix(_fnv1a(data, s0 + common, e0, a))
        out[i + 1] = _final_mix(_fnv1a(data, s1 + common, e1, b))
        out[i + 2] = _final_mix(_fnv1a(data, s2 + common, e2, c))
        out[i + 3] = _final_mix(_fnv1a(data, s3 + common, e3, d))
        i += 4
    while i < n:
        out[i] = _final_mix(_fnv1a(data, starts[i], ends[i], h0))
        i += 1
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--megabytes", type=int, default=300, help="bytes of each case, about")
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    salt = np.frombuffer(b"shuffle:1", np.uint8)
    print("| value bytes | values | before MB/s | now MB/s | ratio |")
    print("| --- | ---: | ---: | ---: | ---: |")
    for lo, hi in SIZES:
        n = max(1, (args.megabytes << 20) // ((lo + hi) // 2))
        sizes = rng.integers(lo, hi, n)
        ends = np.cumsum(sizes).astype(np.int64)
        starts = ends - sizes
        data = rng.integers(0, 256, int(ends[-1]), dtype=np.uint8)
        before = partial(four_consecutive, starts, ends, data, salt)
        now = partial(hash_ranges_kernel, starts, ends, data, salt)
        if not np.array_equal(before(), now()):
            raise SystemExit("the two loops hash differently")
        t_before, t_now = best(before, args.repeat), best(now, args.repeat)
        mb = int(sizes.sum()) / 1e6
        print(f"| {lo}-{hi} | {n:,} | {mb / t_before:,.0f} | {mb / t_now:,.0f} | "
              f"{t_before / t_now:.2f} |", flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
