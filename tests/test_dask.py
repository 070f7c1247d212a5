"""The whole job on Beam's DaskRunner (with the gaps pipeline/engines/beam/dask_runner.py closes)
against a real Dask cluster on 127.0.0.1: a scheduler and two worker processes the tests start.

- Parity: the cases of tests/test_no_change.py (Parquet, CSV, splits, preprocessing with
  analyzers, bad rows, `--num-shards`, `--shuffle`) give, on Dask, the records (as multisets),
  the bad rows and the manifest the local runner gives (its digests in tests/golden, which
  test_no_change holds to the local runner).
- Lost work: a worker SIGKILLed while shards are being written; a write that raises once and is
  retried (a worker preload module injects the fault: tests/dask_fault.py). The output then
  holds the source's rows exactly once: compared as a multiset with the local runner's output
  of the same input, and by `tfrecord-etl verify --source`.
- The translation itself (pipeline/engines/beam/dask_runner.py): tagged outputs, side inputs,
  finish_bundle outputs, Impulse, on small pipelines.
"""

from __future__ import annotations

import collections
import json
import os
import signal
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import apache_beam as beam
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from apache_beam.internal.cloudpickle import cloudpickle
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.transforms.window import GlobalWindow
from apache_beam.utils.timestamp import MIN_TIMESTAMP
from apache_beam.utils.windowed_value import WindowedValue
from conftest import run_cli_captured
from dask_cluster import DaskCluster
from dask_fault import FAULT_MESSAGE, MARKER_ENV
from test_no_change import CASES, GOLDEN, _inputs, _records, digest_output

RUNNER = "pipeline.engines.beam.dask_runner.DaskRunner"
TESTS = Path(__file__).resolve().parent

SLOW = pytest.mark.skipif(
    os.environ.get("TFRECORD_ETL_SLOW") != "1", reason="more cases; set TFRECORD_ETL_SLOW=1"
)

# The golden cases run on Dask. Together the first four have Parquet, CSV, splits, `--shuffle`
# with `--num-shards` (a GroupByKey), preprocessing with analyzers (side inputs), bad rows
# (`max_bad_rows`, the error sink) and `--num-shards` alone; the others (TFRECORD_ETL_SLOW=1)
# each add one alone.
DASK_CASES = [
    "sample_splits_shuffle",  # Parquet, splits, --shuffle --num-shards (order compared too)
    "peer_csv_preprocess",  # CSV, analyzers (side inputs), splits, filters
    "bad_rows_csv",  # CSV, max_bad_rows: bad rows written and counted
    "sample_splits_num_shards",  # --num-shards without a shuffle
    pytest.param("sample_parquet", marks=SLOW),
    pytest.param("sample_csv", marks=SLOW),
    pytest.param("peer_parquet_preprocess_shuffle", marks=SLOW),
]


FAULT_MARKER = "fault-marker"  # in the cluster's directory; "armed" makes one write raise


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> DaskCluster:
    """Two workers (one process, one thread each) with the fault preload, unarmed."""
    work = tmp_path_factory.mktemp("dask")
    env = {MARKER_ENV: str(work / FAULT_MARKER)}
    with DaskCluster(2, preload="dask_fault", preload_path=TESTS, env=env, log_dir=work) as c:
        yield c


def dask_args(cluster: DaskCluster) -> list[str]:
    return [f"--runner={RUNNER}", f"--dask_client_address={cluster.address}"]


# ----------------------------------------------------------------------------- the translation


def _pipeline(cluster: DaskCluster) -> beam.Pipeline:
    return beam.Pipeline(options=PipelineOptions(dask_args(cluster)))


class _Tags(beam.DoFn):
    def process(self, x: int):
        if x % 3 == 0:
            yield beam.pvalue.TaggedOutput("three", x)
        else:
            yield x


class _Last(beam.DoFn):
    """Emits a bundle's sum in finish_bundle only."""

    def start_bundle(self) -> None:
        self._sum = 0

    def process(self, x: int):
        self._sum += x
        return []

    def finish_bundle(self):
        yield WindowedValue(self._sum, MIN_TIMESTAMP, [GlobalWindow()])


def _collect(path: Path, values: list) -> None:
    path.write_text(json.dumps(sorted(values)), encoding="utf-8")


def _side_effect(_: None, directory: Path) -> int:
    """Leaves one file per run: how often the step ran."""
    (directory / uuid.uuid4().hex).touch()
    return 100


def test_translation_tags_side_inputs_finish_bundle(cluster, tmp_path):
    """Tagged outputs split, a side input computed once for two consumers, finish_bundle
    outputs kept, Impulse and Flatten, CombineGlobally (a GroupByKey)."""
    # the DoFns above go to the workers by value (they cannot import this test module)
    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    out = tmp_path / "out.json"
    runs = tmp_path / "runs"
    runs.mkdir()
    with _pipeline(cluster) as p:
        nums = p | "Nums" >> beam.Create(range(10))
        tagged = nums | "Tag" >> beam.ParDo(_Tags()).with_outputs("three", main="rest")
        total = tagged.three | "Sum3" >> beam.CombineGlobally(sum)  # 0+3+6+9
        shifted = tagged.rest | "Shift" >> beam.Map(
            lambda x, t: x + t, beam.pvalue.AsSingleton(total)
        )
        sums = shifted | "Last" >> beam.ParDo(_Last())
        once = p | "Start" >> beam.Create([None]) | "Effect" >> beam.Map(_side_effect, runs)
        plus = [
            sums | f"Plus{i}" >> beam.Map(lambda x, o: x + o, beam.pvalue.AsSingleton(once))
            for i in range(2)
        ]  # the same side input, two consumers
        impulse = p | "Impulse" >> beam.Impulse() | "One" >> beam.Map(lambda _: -1)
        merged = (*plus, impulse) | "Merge" >> beam.Flatten()
        _ = (
            p
            | "Once" >> beam.Create([None])
            | "Write" >> beam.Map(lambda _, v: _collect(out, v), beam.pvalue.AsList(merged))
        )
    cloudpickle.unregister_pickle_by_value(sys.modules[__name__])
    got = json.loads(out.read_text(encoding="utf-8"))
    # one element per bundle: the bundles of 1,2,4,5,7,8 sum to it + 18 (0+3+6+9), the bundles
    # of 0,3,6,9 (tagged "three") to 0; each + 100 (the side input) in each of the two
    # consumers; the Impulse gives one -1
    sums = [0, 0, 0, 0, *(x + 18 for x in (1, 2, 4, 5, 7, 8))]
    assert sorted(got) == sorted([-1, *(x + 100 for x in sums * 2)])
    assert len(list(runs.iterdir())) == 1  # the side input's step ran once for both consumers


# ----------------------------------------------------------------------------- parity


# `--num-shards` without a shuffle deals each batch's records from an offset hashed from its
# file's path: that case reads the inputs where test_no_change writes them; the others read a
# copy of their own (another run of test_no_change rewrites that shared directory).
PATH_BOUND = {"sample_splits_num_shards"}


@pytest.fixture(scope="module")
def inputs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return _inputs(tmp_path_factory.mktemp("inputs"))


@pytest.fixture(scope="module")
def shared_inputs() -> dict[str, Path]:
    return _inputs(Path(tempfile.gettempdir()) / "tfrecord-etl-golden-inputs")


@pytest.fixture(scope="module")
def golden() -> dict[str, Any]:
    return json.loads(GOLDEN.read_text(encoding="utf-8"))


@pytest.mark.parametrize("name", DASK_CASES)
def test_case_on_dask_equals_local_runner(name, cluster, request, golden, tmp_path):
    source, config, flags = CASES[name]
    inputs = request.getfixturevalue("shared_inputs" if name in PATH_BOUND else "inputs")
    if source not in inputs:
        pytest.skip(f"{source}: peer data not found")
    out = tmp_path / name
    args = ["convert", "--input", str(inputs[source]), "--output", str(out), *flags]
    if config:
        path = tmp_path / f"{name}.yaml"
        path.write_text(json.dumps(config), encoding="utf-8")
        args += ["--config", str(path)]
    result = run_cli_captured([*args, *dask_args(cluster)])
    assert result.code == 0, result.err
    got = digest_output(out, "--shuffle" in flags)
    expected = golden[name]
    assert got["splits"] == expected["splits"]
    assert got["bad_rows"] == expected["bad_rows"]
    assert got["manifest"] == expected["manifest"]
    assert not list(out.rglob("beam-temp-*"))


# ----------------------------------------------------------------------------- lost work

KILL_FILES = 4
KILL_ROWS = 40_000  # per file: writing takes some seconds on two one-thread workers


def _big_input(directory: Path) -> Path:
    """KILL_FILES Parquet files of KILL_ROWS rows each (a string, ints, floats, a list)."""
    directory.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(5)
    for i in range(KILL_FILES):
        n = KILL_ROWS
        ids = np.arange(i * n, (i + 1) * n, dtype=np.int64)
        table = pa.table(
            {
                "id": ids,
                "name": pa.array([f"row-{k}-{'x' * (k % 40)}" for k in ids.tolist()]),
                "value": rng.normal(size=n),
                "counts": pa.array(list(rng.integers(0, 1000, size=(n, 8)))),
            }
        )
        pq.write_table(table, directory / f"part-{i}.parquet", row_group_size=10_000)
    return directory


def _multiset(output: Path) -> collections.Counter:
    manifest = json.loads((output / "manifest.json").read_text(encoding="utf-8"))
    records: collections.Counter = collections.Counter()
    for split in manifest["splits"].values():
        for f in split["files"]:
            records.update(_records(output / f, manifest["compression"]))
    return records


def _job_files(output: Path) -> set[str]:
    return {str(p.relative_to(output)) for p in output.rglob("*") if p.is_file()}


def _listed(output: Path) -> set[str]:
    manifest = json.loads((output / "manifest.json").read_text(encoding="utf-8"))
    metadata = {*manifest.get("statistics", {}).values(), manifest["schema"]}
    return (
        {f for s in manifest["splits"].values() for f in s["files"]} | {"manifest.json"} | metadata
    )


@pytest.fixture(scope="module")
def big(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, collections.Counter]:
    """The big input and the local runner's records of it (splits, shard size ~1 MB)."""
    work = tmp_path_factory.mktemp("big")
    source = _big_input(work / "in")
    out = work / "local"
    result = run_cli_captured(_big_args(source, out, work))
    assert result.code == 0, result.err
    return source, _multiset(out)


def _big_args(source: Path, out: Path, work: Path) -> list[str]:
    config = work / "big.yaml"
    config.write_text(json.dumps({"splits": {"train": 9, "eval": 1}}), encoding="utf-8")
    return [
        "convert",
        "--input",
        str(source / "*.parquet"),
        "--output",
        str(out),
        "--config",
        str(config),
        "--shard-mb",
        "1",
    ]


def _verify(out: Path) -> None:
    result = run_cli_captured(["verify", str(out), "--source"])
    assert result.code == 0, result.out[-3000:]


def _poll_temp_file(out: Path, stop: threading.Event, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and not stop.is_set():
        if any(p.is_file() for p in out.glob("beam-temp-*/*")):
            return True
        time.sleep(0.05)
    return False


def test_worker_killed_while_writing(cluster, big, tmp_path):
    """SIGKILL a worker once a temp shard exists: Dask reruns its lost tasks on the other worker;
    a replacement joins. Every source row is in the output once, nothing else is left."""
    source, expected = big
    out = tmp_path / "out"
    victim = next(w for w in cluster.workers if w.poll() is None)
    done = threading.Event()
    killed: list[bool] = []

    def killer() -> None:
        if _poll_temp_file(out, done, timeout=120):
            cluster.kill_worker(victim)
            killed.append(True)

    thread = threading.Thread(target=killer, daemon=True)
    thread.start()
    try:
        result = run_cli_captured([*_big_args(source, out, tmp_path), *dask_args(cluster)])
    finally:
        done.set()
        thread.join(timeout=60)
        cluster.add_worker(wait=False)  # back to two workers (it joins when it is up)
    assert killed == [True], "no temp shard file appeared: the worker was never killed"
    assert victim.returncode == -signal.SIGKILL
    assert result.code == 0, result.err
    assert _multiset(out) == expected
    assert _job_files(out) == _listed(out)  # no temp or orphan file left
    _verify(out)


def _armed(cluster: DaskCluster) -> Path:
    marker = cluster.log_dir / FAULT_MARKER
    marker.write_text("armed", encoding="utf-8")
    return marker


def test_write_fails_once_and_is_retried(cluster, big, tmp_path):
    """One shard write raises after its first block reached the temp file; Dask retries the
    task: the same records, the failed attempt's temp file deleted."""
    source, expected = big
    out = tmp_path / "out"
    marker = _armed(cluster)
    try:
        result = run_cli_captured([*_big_args(source, out, tmp_path), *dask_args(cluster)])
        fired = marker.read_text(encoding="utf-8")
    finally:
        marker.unlink(missing_ok=True)
    assert fired == "fired"  # the fault did happen, once
    assert result.code == 0, result.err
    assert _multiset(out) == expected
    assert _job_files(out) == _listed(out)
    _verify(out)


@SLOW
def test_write_fault_without_retries_fails_the_job(cluster, big, tmp_path):
    """The fault is real: with `--dask_task_retries=0` the same fault fails the job (exit 1, the
    error named, no manifest)."""
    source, _ = big
    out = tmp_path / "out"
    marker = _armed(cluster)
    try:
        args = [*_big_args(source, out, tmp_path), *dask_args(cluster), "--dask_task_retries=0"]
        result = run_cli_captured(args)
    finally:
        marker.unlink(missing_ok=True)
    assert result.code == 1
    assert FAULT_MESSAGE in result.err
    assert not (out / "manifest.json").exists()


@pytest.mark.parametrize(
    "args",
    [
        ["--runner=DaskRunner"],
        ["--runner", "dask"],
        ["--runner=pipeline.engines.beam.dask_runner.DaskRunner"],
    ],
)
def test_the_short_names_select_the_projects_runner(args):
    from apache_beam.options.pipeline_options import StandardOptions

    from pipeline.engines.beam.options import beam_options

    assert beam_options(args).view_as(StandardOptions).runner == RUNNER
