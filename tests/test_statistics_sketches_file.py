"""A split's statistics accumulator saved and read back (transforms/stats/sketches_file.py):
the same statistics, alone and merged, as the live accumulator; a bad file named."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from conftest import plan_specs
from stats_oracle import assert_same_statistics
from test_reader import make_table
from test_statistics import COLUMNS, _extra_table

from transforms.stats.features import FeatureStats, SplitStats, batch_statistics
from transforms.stats.proto import to_proto
from transforms.stats.sketches import HyperLogLog, Sample, TopK
from transforms.stats.sketches_file import (
    dump_sketches,
    load_sketches,
    read_sketches,
    write_sketches,
)


@pytest.mark.parametrize("case", ["every_type", "zeros_nan_strings"])
def test_saved_statistics_read_back_the_same(case: str) -> None:
    table, columns = (make_table()[0], COLUMNS) if case == "every_type" else (_extra_table(), {})
    specs = plan_specs(table, columns)
    stats = batch_statistics(table, specs, "in.parquet", np.arange(table.num_rows))
    again = load_sketches(dump_sketches(stats), "test")
    assert to_proto("train", again, specs) == to_proto("train", stats, specs)
    assert dump_sketches(again) == dump_sketches(stats)  # nothing lost on the way


def test_saved_halves_merge_to_the_whole(tmp_path) -> None:
    """Two runs' accumulators, each saved and read back, merge to what one run over both
    halves gives (as two spans of a dataset do)."""
    table = _extra_table(3000)
    specs = plan_specs(table, {})
    rows = np.arange(table.num_rows)
    whole = batch_statistics(table, specs, "in.parquet", rows)
    merged = SplitStats()
    for i, (start, stop) in enumerate(((0, 1200), (1200, 3000))):
        part = batch_statistics(
            table.slice(start, stop - start), specs, "in.parquet", rows[start:stop]
        )
        write_sketches(str(tmp_path / f"run{i}"), "train", part)
        merged.merge(read_sketches(str(tmp_path / f"run{i}"), "train"))
    assert_same_statistics(to_proto("train", whole, specs), to_proto("train", merged, specs), 1e-9)


def test_full_sketches_keep_their_state() -> None:
    """A sample past k, distinct counts past the exact limit (registers), top values cut."""
    rng = np.random.default_rng(5)
    sample = Sample(64)
    sample.add(rng.normal(size=1000), rng.integers(0, 2**63, 1000, dtype=np.uint64))
    hll = HyperLogLog(p=8, exact_limit=16)
    hll.add_hashes(rng.integers(0, 2**63, 500, dtype=np.uint64))
    top = TopK(capacity=4)
    top.add_values(pa.array([f"v{i % 9}" for i in range(200)] + ["é"] * 50))
    stats = SplitStats(rows=1000)
    stats.features["n"] = FeatureStats("numeric", present=1000, count=1000, sample=sample)
    stats.features["s"] = FeatureStats("string", present=250, distinct=hll, top=top)
    again = load_sketches(dump_sketches(stats), "test")
    n, s = again.features["n"], again.features["s"]
    assert sorted(n.sample.values) == sorted(sample.values) and n.sample.bound() == sample.bound()
    assert not s.distinct.exact and s.distinct.estimate() == hll.estimate()
    assert not s.top.exact and s.top.top(4) == top.top(4) and s.top.top(1)[0][0] == "é"


def test_a_bad_file_is_named(tmp_path) -> None:
    path = tmp_path / "statistics" / "train" / "sketches.npz"
    path.parent.mkdir(parents=True)
    path.write_bytes(b"not an archive")
    with pytest.raises(ValueError, match=r"sketches.npz: not a statistics accumulator file"):
        read_sketches(str(tmp_path), "train")
    with pytest.raises(FileNotFoundError, match="no statistics accumulator"):
        read_sketches(str(tmp_path), "eval")
