"""Which engine runs a convert job (pipeline/engines/choose.py), and the in-process engine's run: no
Beam imported, the output equal to Beam's, its refusals as one-line usage errors. (The golden
cases of tests/test_no_change.py run through both engines against one digest.)"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipeline.engines.choose import choose_engine, unsupported
from pipeline.job.config import JobConfig
from pipeline.job.plan import plan_job

ROOT = Path(__file__).resolve().parent.parent
SAMPLE = ROOT / "sample" / "trips.parquet"


def _plan(tmp_path, **config):
    return plan_job(JobConfig(inputs=(str(SAMPLE),), output=str(tmp_path / "out"), **config))


def test_auto_is_in_process_for_a_local_job_without_beam_options(tmp_path):
    plan = _plan(tmp_path)
    assert unsupported(plan) is None
    assert choose_engine("auto", [], plan) == "in-process"
    assert choose_engine("in-process", [], plan) == "in-process"
    assert choose_engine("beam", [], plan) == "beam"


def test_a_beam_option_means_beam(tmp_path):
    plan = _plan(tmp_path)
    assert choose_engine("auto", ["--runner=FnApiRunner"], plan) == "beam"
    assert choose_engine("auto", ["--direct_num_workers=2"], plan) == "beam"
    with pytest.raises(ValueError, match=r"do not apply: --runner=Dask; .* use --engine beam"):
        choose_engine("in-process", ["--runner=Dask"], plan)


@pytest.mark.parametrize(
    "config",
    [{"num_shards": 2}, {"num_shards": 2, "shuffle": ("train",)}, {"shuffle": ("train",)}],
)
def test_grouped_writes_run_in_process(tmp_path, config):
    plan = _plan(tmp_path, **config)
    assert unsupported(plan) is None
    assert choose_engine("auto", [], plan) == "in-process"


def test_beams_own_sink_runs_on_beam(tmp_path):
    plan = _plan(tmp_path, sink="tfrecordio", compression="none")
    assert "tfrecordio sink" in unsupported(plan)
    assert choose_engine("auto", [], plan) == "beam"
    with pytest.raises(ValueError, match="--engine in-process cannot run this job"):
        choose_engine("in-process", [], plan)


def test_an_object_store_path_runs_on_beam(tmp_path):
    plan = _plan(tmp_path)
    remote = dataclasses.replace(
        plan, config=dataclasses.replace(plan.config, output="gs://bucket/out")
    )
    assert "local files only" in unsupported(remote)
    assert choose_engine("auto", [], remote) == "beam"


def test_a_grouped_sequence_runs_in_process(tmp_path):
    path = tmp_path / "events.parquet"
    pq.write_table(pa.table({"user": ["a", "a", "b"], "ts": [2, 1, 5], "v": [1.0, 2.0, 3.0]}), path)
    config = tmp_path / "seq.yaml"
    config.write_text("sequence:\n  group_by: user\n  order_by: ts\n", encoding="utf-8")
    from pipeline.job.config import load_config

    plan = plan_job(load_config(str(config), {"input": [str(path)], "output": str(tmp_path / "o")}))
    assert plan.sequence.grouped and unsupported(plan) is None
    assert choose_engine("auto", [], plan) == "in-process"


def test_engine_in_process_refusal_is_one_line(run_cli_captured, tmp_path):
    out = tmp_path / "out"
    flags = ["--engine", "in-process", "--sink", "tfrecordio", "--compression", "none"]
    result = run_cli_captured(["convert", "--input", SAMPLE, "--output", out, *flags])
    assert result.code == 2
    lines = [line for line in result.err.splitlines() if line.strip()]
    assert len(lines) == 1 and "--engine in-process cannot run this job" in lines[0]
    assert not out.exists()  # nothing written, nothing leased
    summary = json.loads(result.out.strip().splitlines()[-1])
    assert summary["status"] == "invalid"


# `convert` in a fresh interpreter, which then must hold neither Beam nor TensorFlow
_NO_BEAM_PROBE = (
    "import sys\n"
    "from pipeline.cli.main import main\n"
    "code = main(sys.argv[1:])\n"
    "assert 'apache_beam' not in sys.modules, 'Beam was imported'\n"
    "assert 'tensorflow' not in sys.modules, 'TensorFlow was imported'\n"
    "sys.exit(code)\n"
)


def _convert_without_beam(*args: object) -> dict:
    """Run `convert ARGS` under `_NO_BEAM_PROBE`; its JSON summary."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-c", _NO_BEAM_PROBE, "convert", *map(str, args)],
        cwd=ROOT, env=env, capture_output=True, text=True,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_in_process_convert_imports_no_beam(tmp_path):
    """The whole `convert` of the sample, in a fresh interpreter: Beam never imported, and the
    output equals a Beam run's byte for byte (records, statistics, schema; the manifest but for
    its time and path)."""
    here = tmp_path / "here"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    assert _convert_without_beam("--input", SAMPLE, "--output", here)["engine"] == "in-process"
    beam = tmp_path / "beam"
    done = subprocess.run(
        [sys.executable, "-m", "pipeline", "convert", "--input", str(SAMPLE), "--output",
         str(beam), "--engine", "beam"],
        cwd=ROOT, env=env, capture_output=True, text=True,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.strip().splitlines()[-1])["runner"] == "FnApiRunner"
    files = sorted(p.relative_to(here) for p in here.rglob("*") if p.is_file())
    assert files == sorted(p.relative_to(beam) for p in beam.rglob("*") if p.is_file())
    for name in files:
        if name.name == "manifest.json":
            a, b = (json.loads((d / name).read_text()) for d in (here, beam))
            for m in (a, b):
                m.pop("created")
                m["config"].pop("output")
            assert a == b
        else:
            assert (here / name).read_bytes() == (beam / name).read_bytes(), name


def test_ctrl_c_stops_a_run_with_one_line(monkeypatch, run_cli_captured, tmp_path):
    """Ctrl-C in a run: one line, exit 130, the JSON line says "interrupted", the lease is gone
    and the output has no manifest; the next run goes ahead."""
    import pipeline.engines.inprocess.engine

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    out = tmp_path / "out"
    monkeypatch.setattr(pipeline.engines.inprocess.engine, "run_in_process", interrupted)
    result = run_cli_captured(["convert", "--input", SAMPLE, "--output", out])
    assert result.code == 130
    assert result.err.strip().splitlines()[-1].startswith("tfrecord-etl: interrupted:")
    assert json.loads(result.out.strip().splitlines()[-1])["status"] == "interrupted"
    assert not (out / "manifest.json").exists()
    assert not (out / "_LEASE").exists()
    monkeypatch.undo()
    assert run_cli_captured(["convert", "--input", SAMPLE, "--output", out]).code == 0


def test_in_process_quantile_analyzers_import_no_beam(tmp_path):
    """`bucketize` and a median `fill_missing` fit their quantile sketch without Beam (a copy of
    Beam's, transforms/preprocess/quantile_sketch.py), and fit the boundaries and the median
    of the values."""
    rng = np.random.default_rng(5)
    values = rng.normal(10.0, 2.0, 40_000)
    source = tmp_path / "t.parquet"
    pq.write_table(pa.table({"x": values, "y": np.where(values > 12, np.nan, values)}), source)
    config = tmp_path / "c.yaml"
    config.write_text(
        "transforms:\n"
        "  - bucketize: {column: x, output: xb, num_buckets: 4}\n"
        "  - fill_missing: {column: y, strategy: median}\n",
        encoding="utf-8",
    )
    out = tmp_path / "out"
    summary = _convert_without_beam(
        "--input", source, "--output", out, "--config", config, "--workers", "1"
    )
    assert summary["engine"] == "in-process"
    fitted = json.loads((out / "transform" / "statistics.json").read_text())["analyzers"]
    bucketize, median = (a["quantiles"] for a in fitted)
    n = len(values)
    finite = np.sort(values[values <= 12])
    # each within the sketch's rank error, 0.001 x N, of the exact quantile
    for got, q in zip(bucketize, (0.25, 0.5, 0.75), strict=True):
        rank = np.searchsorted(np.sort(values), got)
        assert abs(rank - q * n) <= 0.001 * n + 1, (got, q)
    rank = np.searchsorted(finite, median[0])
    assert abs(rank - 0.5 * len(finite)) <= 0.001 * len(finite) + 1


@pytest.mark.parametrize("suffix", [".csv.gz", ".jsonl.gz"])
def test_in_process_compressed_local_input_imports_no_beam(tmp_path, suffix):
    """A gzip-compressed local CSV or JSON Lines file is decompressed by pyarrow: no Beam."""
    import gzip

    source = tmp_path / f"t{suffix}"
    if suffix == ".csv.gz":
        text = "a,b\n" + "".join(f"{i},{i * 0.5}\n" for i in range(100))
    else:
        text = "".join(f'{{"a": {i}, "b": {i * 0.5}}}\n' for i in range(100))
    source.write_bytes(gzip.compress(text.encode()))
    summary = _convert_without_beam(
        "--input", source, "--output", tmp_path / "out", "--workers", "1"
    )
    assert summary["engine"] == "in-process" and summary["rows_out"] == 100
