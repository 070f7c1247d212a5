"""Proof that a refactoring changed no output: the job on fixed inputs gives the records, manifests
and bad rows recorded in tests/golden/digests.json.

The cases cover the bundled sample (Parquet and CSV), the peer data (TFX's taxi CSV and
Parquet), a table of every supported type, splits (whole-row hash and split_key), preprocessing
with analyzers, `--num-shards`, `--shuffle`, bad rows, every compression and both sinks.

Every case runs through Beam (`--engine beam`), and every case the in-process engine can run
(pipeline/engines/choose.py: all but Beam's own sink) runs through it too, on 1, 2 and 7
worker processes, against the same digest.

Per case the digest holds the normalized manifest (times, versions and this machine's paths
taken out) and, per split, the record count and a hash of the sorted record hashes (records as
a multiset: the order inside a rolling write depends on the runner's bundles), and the shuffled
splits' record order (a seeded shuffle's order is part of its contract).

To record new digests after an intended change of output:
    TFRECORD_ETL_WRITE_GOLDEN=1 python -m pytest -q tests/test_no_change.py
and say in the commit why the output changed.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import zlib
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import REPO, SAMPLE_CSV, SAMPLE_PARQUET, peer_data_source, run_cli_captured
from test_reader import make_table

GOLDEN = Path(__file__).with_name("golden") / "digests.json"
WRITE = os.environ.get("TFRECORD_ETL_WRITE_GOLDEN") == "1"

SPLITS = {"splits": {"train": 8, "eval": 2}}
TAXI_CSV_TYPES = {
    "null_values": [""],
    "column_types": {
        "trip_start_timestamp": "int64",
        "pickup_census_tract": "float64",
        "fare": "float64",
        "company": "string",
    },
}
TAXI_TRANSFORMS = [
    {"drop": {"columns": ["pickup_census_tract", "dropoff_census_tract"]}},
    {"filter": {"expr": "fare > 0 and trip_seconds > 0"}},
    {"fill_missing": {"column": "trip_miles", "value": 0.0}},
    {"derive": {"name": "speed_mph", "expr": "trip_miles / (trip_seconds / 3600)"}},
    {"zscore": {"column": "fare", "output": "fare_z"}},
    {"fill_missing": {"column": "company", "value": "(none)"}},
    {"vocabulary": {"column": "company", "output": "company_id", "top_k": 20}},
    {"hash_bucket": {"column": "payment_type", "output": "payment_bucket", "num_buckets": 16}},
    {"bucketize": {"column": "fare_z", "output": "fare_bucket", "num_buckets": 4}},
]
ALL_TYPES_COLUMNS = {"pairs": {"shape": [-1, 2]}}

# name -> (input file (see _inputs), config, extra flags)
CASES: dict[str, tuple[str, dict[str, Any], list[str]]] = {
    "sample_parquet": ("sample.parquet", {}, []),
    "sample_csv": ("sample.csv", {}, []),
    "sample_config": (
        "sample.parquet",
        {
            "num_shards": 2,
            "columns": {
                "fare": {"keep_float64": True},
                "trip_seconds": {"null_policy": "default", "default": 0},
                "pickup_grid": {"shape": [2, 2]},
            },
        },
        [],
    ),
    "sample_splits_num_shards": ("sample.parquet", SPLITS, ["--num-shards", "3"]),
    "sample_splits_shuffle": ("sample.parquet", SPLITS, ["--shuffle", "--num-shards", "2"]),
    "sample_split_key_small_shards": (
        "sample.parquet",
        {**SPLITS, "split_key": "trip_id", "split_salt": "s1", "batch_rows": 300},
        ["--shard-mb", "0.02"],
    ),
    "sample_zlib": ("sample.parquet", {}, ["--compression", "zlib", "--num-shards", "2"]),
    "sample_none_tfrecordio": ("sample.csv", {}, ["--compression", "none", "--sink", "tfrecordio"]),
    "peer_csv": ("data.csv", {"csv": TAXI_CSV_TYPES}, []),
    "peer_parquet_splits": ("data.parquet", SPLITS, []),
    "peer_csv_preprocess": (
        "data.csv",
        {"csv": TAXI_CSV_TYPES, "transforms": TAXI_TRANSFORMS, **SPLITS, "batch_rows": 2048},
        [],
    ),
    "peer_parquet_preprocess_shuffle": (
        "data.parquet",
        {"transforms": TAXI_TRANSFORMS, "shuffle_seed": 7},
        ["--shuffle", "--num-shards", "3"],
    ),
    "all_types": ("all_types.parquet", {"columns": ALL_TYPES_COLUMNS}, []),
    "all_types_splits_shards": (
        "all_types.parquet",
        {"columns": ALL_TYPES_COLUMNS, **SPLITS, "batch_rows": 100},
        ["--num-shards", "2"],
    ),
    "bad_rows_csv": ("bad.csv", {"max_bad_rows": 10}, []),
}

# Every case but Beam's own sink runs in-process too (pipeline/engines/choose.py), on 1, 2 and
# 7 worker processes: each must give the Beam run's digest.
IN_PROCESS = tuple(name for name, (_, _, flags) in CASES.items() if "tfrecordio" not in flags)
WORKERS = (1, 2, 7)
RUNS = [(name, "beam", 0) for name in CASES] + [
    (name, "in-process", n) for name in IN_PROCESS for n in WORKERS
]

BAD_CSV = (
    'id,amount,name\n1,1.5,a\n2,not-a-number,b\n3,0,c\n4,2.5\n5,3.5,"quoted, with comma"\n6,,\n'
)


def _inputs(directory: Path) -> dict[str, Path]:
    """The cases' input files, written or copied into `directory`."""
    directory.mkdir(parents=True, exist_ok=True)
    peer = peer_data_source()
    files = {
        "sample.parquet": SAMPLE_PARQUET,
        "sample.csv": SAMPLE_CSV,
        "data.csv": peer / "data.csv",
        "data.parquet": peer / "data.parquet",
    }
    out = {}
    for name, source in files.items():
        if source.is_file():
            out[name] = directory / name
            out[name].write_bytes(source.read_bytes())
    table, _ = make_table()
    pq.write_table(table, directory / "all_types.parquet", row_group_size=250)
    out["all_types.parquet"] = directory / "all_types.parquet"
    (directory / "bad.csv").write_text(BAD_CSV, encoding="utf-8")
    out["bad.csv"] = directory / "bad.csv"
    return out


def _records(path: Path, compression: str) -> list[bytes]:
    """The records of one shard, read with Python's own gzip/zlib and the TFRecord framing
    (8-byte length, 4-byte crc, data, 4-byte crc), independent of the project's reader."""
    raw = path.read_bytes()
    if compression == "gzip":
        raw = gzip.decompress(raw)
    elif compression == "zlib":
        raw = zlib.decompress(raw)
    out, pos = [], 0
    while pos < len(raw):
        (length,) = struct.unpack_from("<Q", raw, pos)
        out.append(raw[pos + 12 : pos + 12 + length])
        pos += 12 + length + 4
    return out


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _normalized_manifest(manifest: dict[str, Any]) -> dict[str, Any]:
    """The manifest without what differs between runs or machines (times, versions, paths,
    bytes of compressed files: the block layout may follow the runner's bundles)."""
    m = json.loads(json.dumps(manifest))
    for key in ("created", "versions", "sources"):
        m.pop(key, None)
    for split in m["splits"].values():
        for shard in split.get("shards", []):
            shard.pop("bytes", None)
    m.get("sharding", {}).pop("estimated_bytes", None)
    config = m.get("config", {})
    config["input"] = [Path(p).name for p in config.get("input", [])]
    config.pop("output", None)
    m["bad_rows"]["files"] = len(m["bad_rows"]["files"])
    return m


def digest_output(output: Path, shuffled: bool) -> dict[str, Any]:
    manifest = json.loads((output / "manifest.json").read_text(encoding="utf-8"))
    splits = {}
    for name, split in manifest["splits"].items():
        ordered = [r for f in split["files"] for r in _records(output / f, manifest["compression"])]
        hashes = sorted(_sha(r) for r in ordered)
        entry = {"records": len(ordered), "multiset": _sha("".join(hashes).encode())}
        if shuffled:
            entry["order"] = _sha("".join(_sha(r) for r in ordered).encode())
        splits[name] = entry
    bad = []
    for path in sorted((output / "_errors").glob("*.jsonl")):
        for line in path.read_text(encoding="utf-8").splitlines():
            row = json.loads(line)
            row["source"] = Path(row["source"]).name
            row["reason"] = row["reason"].replace(str(output.parent), "<dir>")
            bad.append(json.dumps(row, sort_keys=True))
    return {
        "manifest": _normalized_manifest(manifest),
        "splits": splits,
        "bad_rows": sorted(bad),
    }


def case_args(
    name: str, inputs: dict[str, Path], work: Path, engine: str = "beam", workers: int = 0
) -> list[str]:
    """The command line of one case (its config written into `work`)."""
    source, config, flags = CASES[name]
    if source not in inputs:
        pytest.skip(f"{source}: peer data not found")
    args = ["convert", "--input", str(inputs[source]), "--output", str(work / name), *flags]
    args += ["--engine", engine]
    if workers:
        args += ["--workers", str(workers)]
    if config:
        path = work / f"{name}.yaml"
        path.write_text(json.dumps(config), encoding="utf-8")  # JSON is YAML
        args += ["--config", str(path)]
    return args


def run_case(
    name: str, inputs: dict[str, Path], work: Path, engine: str = "beam", workers: int = 0
) -> dict[str, Any]:
    result = run_cli_captured(case_args(name, inputs, work, engine, workers))
    assert result.code == 0, result.err
    return digest_output(work / name, "--shuffle" in CASES[name][2])


@pytest.fixture(scope="module")
def inputs() -> dict[str, Path]:
    """Inputs at a fixed path: `--num-shards` without a shuffle deals each batch's records
    round-robin from an offset hashed from its file's path, so the path is part of the case."""
    directory = Path(tempfile.gettempdir()) / "tfrecord-etl-golden-inputs"
    shutil.rmtree(directory, ignore_errors=True)
    return _inputs(directory)


@pytest.fixture(scope="module")
def golden() -> dict[str, Any]:
    if WRITE:
        return {}
    return json.loads(GOLDEN.read_text(encoding="utf-8"))


_written: dict[str, Any] = {}


@pytest.mark.parametrize(("name", "engine", "workers"), RUNS)
def test_output_unchanged(name, engine, workers, inputs, golden, tmp_path):
    got = run_case(name, inputs, tmp_path, engine, workers)
    if WRITE and engine == "beam":
        _written[name] = got
        GOLDEN.parent.mkdir(exist_ok=True)
        GOLDEN.write_text(json.dumps(_written, indent=1, sort_keys=True) + "\n", encoding="utf-8")
        return
    if WRITE:  # digests come from Beam runs
        return
    expected = golden[name]
    assert got["splits"] == expected["splits"]
    assert got["bad_rows"] == expected["bad_rows"]
    assert got["manifest"] == expected["manifest"]


# The console script's process, where pyarrow is kept from importing pandas
# (pipeline/cli/startup.py): every type (on both engines), CSV with bad rows, a shuffle,
# analyzers.
CONSOLE_RUNS = [
    ("all_types", "in-process"),
    ("all_types", "beam"),
    ("bad_rows_csv", "in-process"),
    ("sample_splits_shuffle", "in-process"),
    ("peer_csv_preprocess", "in-process"),
]
CONSOLE = """
import atexit, sys
atexit.register(lambda: print("imported:", "pandas" in sys.modules, "apache_beam" in sys.modules,
                              file=sys.stderr))
from pipeline.cli.main import run
sys.argv = ["tfrecord-etl", *sys.argv[1:]]
run()
"""


@pytest.mark.parametrize(("name", "engine"), CONSOLE_RUNS)
def test_output_unchanged_from_the_console_script(name, engine, inputs, golden, tmp_path):
    """`tfrecord-etl convert` as its own process (`run()`, as the console script): the same
    digest as the runs above, and pandas imported only where Beam is (the Beam engine, or
    the quantile sketch of a `bucketize` analyzer): Beam imports it itself."""
    if WRITE:
        pytest.skip("writing digests")
    args = case_args(name, inputs, tmp_path, engine, 2 if engine == "in-process" else 0)
    done = subprocess.run(
        [sys.executable, "-c", CONSOLE, *args, "--quiet"],
        cwd=REPO, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    pandas, beam = done.stderr.split("imported: ")[1].split()[:2]
    assert pandas == beam, done.stderr
    got = digest_output(tmp_path / name, "--shuffle" in CASES[name][2])
    assert got == {key: golden[name][key] for key in got}


def test_every_case_has_a_digest(golden):
    if WRITE:
        pytest.skip("writing digests")
    assert sorted(golden) == sorted(CASES)


def test_all_types_table_is_fixed():
    """The every-type table is made from a seed: a change to it would change the digests."""
    table, _ = make_table()
    assert isinstance(table, pa.Table) and table.num_rows == 700
