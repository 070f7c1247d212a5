"""Shard compression: names, levels, file suffixes and the per-block gzip compressor.

With gzip each block of framed records is compressed on its own into one gzip member: a file
of concatenated members is a standard .gz file that TensorFlow, Beam and Python's gzip all read
whole, and files can be joined by concatenating their bytes.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable

__all__ = [
    "COMPRESSIONS",
    "DEFAULT_LEVEL",
    "GZIP_BACKENDS",
    "INDEX_MEMBER_BYTES",
    "ZLIB_LEVEL",
    "check_level",
    "file_suffix",
    "gzip_compressor",
]

COMPRESSIONS = ("gzip", "zlib", "none")
GZIP_BACKENDS = ("isal", "zlib")
# Measured on the benchmark table (bench/): isal level 2 compresses ~13x faster than zlib level 6
# for a ~14% larger file; zlib level 6 is what Beam's WriteToTFRecord uses.
DEFAULT_LEVEL = {"isal": 2, "zlib": 6}
ZLIB_LEVEL = 6  # compression "zlib" (TensorFlow's ZLIB): one zlib stream per file, as Beam writes
# An indexed gzip output's members: about this many framed bytes each, so that reading one record
# at random inflates a member of this size (transforms/write/index.py)
INDEX_MEMBER_BYTES = 32 << 10
_LEVELS = {"isal": range(0, 4), "zlib": range(0, 10)}
_SUFFIX = {"gzip": ".tfrecord.gz", "zlib": ".tfrecord.deflate", "none": ".tfrecord"}


def file_suffix(compression: str) -> str:
    return _SUFFIX[compression]


def check_level(backend: str, level: int | None) -> int:
    """The level to use (the backend's default for None); raises for one it does not have."""
    if backend not in GZIP_BACKENDS:
        raise ValueError(f"gzip backend {backend!r} is not one of {list(GZIP_BACKENDS)}")
    if level is None:
        return DEFAULT_LEVEL[backend]
    if level not in _LEVELS[backend]:
        levels = _LEVELS[backend]
        raise ValueError(
            f"{backend} has compression levels {levels.start}-{levels.stop - 1}, not {level}"
        )
    return level


def gzip_compressor(level: int | None, backend: str) -> Callable[[memoryview], bytes]:
    """A function that turns one block into one complete gzip member."""
    level = check_level(backend, level)
    if backend == "isal":
        from isal import isal_zlib

        return lambda data: isal_zlib.compress(data, level, wbits=31)
    return lambda data: zlib.compress(data, level, wbits=31)
