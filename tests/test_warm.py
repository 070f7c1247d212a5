"""`python -m pipeline.job.warm`, the step of the workers' image that compiles numba's kernels:
from an empty cache, after it, jobs of other shapes than its own (the bundled sample with its
options, sequences, splits with a shuffle on two workers, CSV) compile nothing in new
processes: numba's cache gains no file. Compiled for the generic CPU, as the image does."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from conftest import REPO, SAMPLE_PARQUET


def _cached(cache: Path) -> set[str]:
    return {str(p.relative_to(cache)) for p in cache.rglob("*") if p.is_file()}


def test_jobs_after_warming_compile_nothing(tmp_path):
    cache = tmp_path / "numba-cache"
    cache.mkdir()
    env = {**os.environ, "NUMBA_CACHE_DIR": str(cache), "NUMBA_CPU_NAME": "generic"}

    def run(*args: str) -> subprocess.CompletedProcess:
        done = subprocess.run(
            [sys.executable, *args], cwd=REPO, env=env, capture_output=True, text=True
        )
        assert done.returncode == 0, done.stderr[-3000:]
        return done

    warmed = run("-m", "pipeline.job.warm")
    assert "the kernels are compiled" in warmed.stdout
    compiled = _cached(cache)
    assert any(name.endswith(".nbc") for name in compiled)

    splits = tmp_path / "splits.yaml"
    splits.write_text("splits: {train: 4, eval: 1}\n", encoding="utf-8")
    csv = REPO / "sample" / "trips.csv"
    ranges = tmp_path / "ranges.yaml"  # the sample CSV cut into byte ranges
    ranges.write_text("csv: {range_bytes: 20000}\n", encoding="utf-8")
    jobs = [
        ["--config", str(REPO / "configs" / "sample.yaml")],
        ["--config", str(REPO / "configs" / "taxi_sequence.yaml")],
        ["--input", str(SAMPLE_PARQUET), "--config", str(splits), "--shuffle", "--workers", "2"],
        ["--input", str(csv), "--num-shards", "3"],
        ["--input", str(csv), "--config", str(ranges)],
    ]
    for i, job in enumerate(jobs):
        out = tmp_path / f"out{i}"
        run("-m", "pipeline", "convert", *job, "--output", str(out), "--overwrite", "--quiet")
        new = sorted(_cached(cache) - compiled)
        assert not new, f"convert {' '.join(job)} compiled kernels the warm-up did not: {new}"
