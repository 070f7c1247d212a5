"""Where an output keeps its statistics (a module of names only: reading a manifest, `inspect`
and `verify` need them without the statistics' code, its numpy, pyarrow and numba).

    statistics/<split>/FeatureStats.pb   the split's DatasetFeatureStatisticsList (proto.py)
    statistics/<split>/sketches.npz      its accumulator, where saved (sketches_file.py)
"""

from __future__ import annotations

__all__ = ["SKETCHES_FILE", "STATISTICS_DIR", "STATISTICS_FILE", "sketches_path", "statistics_path"]

STATISTICS_DIR = "statistics"
STATISTICS_FILE = "FeatureStats.pb"  # StatisticsGen's name
SKETCHES_FILE = "sketches.npz"


def statistics_path(split: str) -> str:
    """The statistics file of `split`, relative to the output directory."""
    return f"{STATISTICS_DIR}/{split}/{STATISTICS_FILE}"


def sketches_path(split: str) -> str:
    """The accumulator file of `split`, relative to the output directory."""
    return f"{STATISTICS_DIR}/{split}/{SKETCHES_FILE}"
