"""The worked example config (configs/taxi_preprocess.yaml) on the Chicago taxi peer data,
end to end through the CLI, read back with `load_dataset` and compared row by row with a
plain numpy/Python reference; artifacts reused on the Parquet copy; errors through the CLI."""

from __future__ import annotations

import json
import math

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv
import pytest
from conftest import REPO, read_manifest, run_cli_captured

from pipeline.output.directory import clear_previous_output
from pipeline.reader import load_dataset
from transforms.hashing import hash_bytes

CONFIG = REPO / "configs" / "taxi_preprocess.yaml"
ROWS = 10_000


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    return tmp_path_factory.mktemp("preprocess-out")


@pytest.fixture(scope="module")
def csv_out(peer_data, work):
    out = work / "csv"
    result = run_cli_captured(
        ["convert", "--config", CONFIG, "--input", peer_data / "data.csv", "--output", out]
    )
    assert result.code == 0, result.err
    return out


@pytest.fixture(scope="module")
def parquet_reused(peer_data, work, csv_out):
    out = work / "parquet"
    args = ["convert", "--config", CONFIG, "--input", peer_data / "data.parquet"]
    result = run_cli_captured([*args, "--output", out, "--transform-artifacts", csv_out])
    assert result.code == 0, result.err
    return out


@pytest.fixture(scope="module")
def source(peer_data) -> list[dict]:
    """The CSV as the config reads it (empty cells are nulls), as Python rows."""
    types = {"trip_start_timestamp": pa.int64(), "fare": pa.float64(), "company": pa.string()}
    types["trip_seconds"] = pa.float64()
    options = pacsv.ConvertOptions(column_types=types, null_values=[""], strings_can_be_null=True)
    table = pacsv.read_csv(peer_data / "data.csv", convert_options=options)
    assert table.num_rows == ROWS
    return table.to_pylist()


def statistics(out) -> dict[int, dict]:
    data = json.loads((out / "transform" / "statistics.json").read_text())
    return {e["step"]: e for e in data["analyzers"]}


def read_all(out) -> dict[str, np.ndarray]:
    """Every restored feature of the output, concatenated over batches."""
    parts: dict[str, list] = {}
    for batch in load_dataset(str(out), batch_size=4096):
        for name, value in batch.items():
            value = value.to_list() if hasattr(value, "to_list") else value.numpy()
            parts.setdefault(name, []).append(value)
    return {
        k: np.concatenate(v) if isinstance(v[0], np.ndarray) else [x for part in v for x in part]
        for k, v in parts.items()
    }


def f32(x: float) -> float:
    return float(np.float32(x))


def kept(source: list[dict]) -> list[dict]:
    return [
        r
        for r in source
        if r["fare"] is not None
        and r["trip_seconds"] is not None
        and r["fare"] > 0
        and r["trip_seconds"] > 0
    ]


def within_rank(values: list[float], q: float, fraction: float, epsilon: float) -> bool:
    data = np.sort(np.asarray(values))
    target = math.ceil(fraction * data.size)
    low = int(np.searchsorted(data, q, side="left")) + 1
    high = int(np.searchsorted(data, q, side="right"))
    return low - epsilon * data.size <= target <= high + epsilon * data.size


def test_statistics_equal_the_exact_full_pass(csv_out, source):
    rows = kept(source)
    stats = statistics(csv_out)
    assert sorted(stats) == [6, 7, 8, 9, 10, 14, 18, 19]
    assert {s["pass"] for i, s in stats.items() if i != 19} == {1} and stats[19]["pass"] == 2
    fares = np.array([r["fare"] for r in rows])
    assert stats[6]["count"] == len(rows)
    assert stats[6]["mean"] == pytest.approx(fares.mean(), rel=1e-12)
    assert stats[6]["std"] == pytest.approx(fares.std(), rel=1e-9)
    hours = [r["trip_start_hour"] for r in rows]
    assert (stats[7]["min"], stats[7]["max"]) == (min(hours), max(hours))
    lats = [r["dropoff_latitude"] for r in rows if r["dropoff_latitude"] is not None]
    assert stats[8]["count"] == len(lats)
    assert within_rank(lats, stats[8]["quantiles"][0], 0.5, stats[8]["epsilon"])
    lons = [r["dropoff_longitude"] for r in rows if r["dropoff_longitude"] is not None]
    assert stats[9]["mean"] == pytest.approx(np.mean(lons), rel=1e-12)
    areas = [r["pickup_community_area"] for r in rows if r["pickup_community_area"] is not None]
    assert stats[10]["value"] == max(sorted(set(areas)), key=areas.count)
    companies = [(r["company"] or "(none)").lower().strip(" .") for r in rows]
    order = sorted(set(companies), key=lambda c: (-companies.count(c), c.encode()))
    vocabulary = (csv_out / "transform" / stats[14]["file"]).read_text().split("\n")[:-1]
    assert vocabulary == order[:20] and stats[14]["distinct"] == len(order)
    seconds = [r["trip_seconds"] for r in rows]
    for i, q in enumerate(stats[18]["quantiles"], start=1):
        assert within_rank(seconds, q, i / 10, stats[18]["epsilon"])


def reference(r: dict, stats: dict[int, dict], vocabulary: list[str]) -> dict:
    """What the config makes of one source row, in plain Python."""
    company = (r["company"] or "(none)").lower().strip(" .")
    company_id = (
        vocabulary.index(company)
        if company in vocabulary
        else len(vocabulary) + hash_bytes(company.encode()) % 1
    )
    miles = 0.0 if r["trip_miles"] is None else r["trip_miles"]
    z = (r["fare"] - stats[6]["mean"]) / stats[6]["std"]
    lat = r["dropoff_latitude"]
    lon = r["dropoff_longitude"]
    area = r["pickup_community_area"]
    return {
        "fare": r["fare"],
        "fare_z": f32(z),
        "fare_bucket": int(np.searchsorted(stats[19]["boundaries"], z, side="left")),
        "speed_mph": f32(min(miles / (r["trip_seconds"] / 3600), 100.0)),
        "log_tips": f32(math.log1p(r["tips"])),
        "hour_01": f32(
            (r["trip_start_hour"] - stats[7]["min"]) / (stats[7]["max"] - stats[7]["min"])
        ),
        "dropoff_latitude": f32(stats[8]["quantiles"][0] if lat is None else lat),
        "dropoff_longitude": f32(stats[9]["mean"] if lon is None else lon),
        "pickup_community_area": stats[10]["value"] if area is None else area,
        "company_id": company_id,
        "company_onehot": [float(i == company_id) for i in range(21)],
        "company_tokens": [t.encode() for t in company.split()],
        "payment_bucket": hash_bytes(r["payment_type"].encode()) % 16,
        "duration_bucket": int(
            np.searchsorted(stats[18]["boundaries"], r["trip_seconds"], side="left")
        ),
        "trip_start_day": r["trip_start_day"],
        "pickup_time": r["trip_start_timestamp"],
    }


def source_key(r: dict) -> tuple:
    """A key unique over the rows of this data, from columns the output keeps."""
    lat = r["pickup_latitude"]
    return (
        r["trip_start_timestamp"],
        r["fare"],
        f32(r["trip_seconds"]),
        f32(r["trip_miles"] or 0.0),
        f32(r["tips"]),
        None if lat is None else f32(lat),
        r["company"] or "(none)",
        r["payment_type"],
    )


def output_key(got: dict, i: int) -> tuple:
    present = got["pickup_latitude__present"][i] if "pickup_latitude__present" in got else True
    return (
        int(got["pickup_time"][i]),
        float(got["fare"][i]),
        f32(got["trip_seconds"][i]),
        f32(got["trip_miles"][i]),
        f32(got["tips"][i]),
        f32(got["pickup_latitude"][i]) if present else None,
        got["company"][i].decode(),
        got["payment_type"][i].decode(),
    )


def test_every_row_read_back_equals_the_reference(csv_out, source):
    stats = statistics(csv_out)
    vocabulary = (csv_out / "transform" / stats[14]["file"]).read_text().split("\n")[:-1]
    rows = kept(source)
    expected = {source_key(r): r for r in rows}
    assert len(expected) == len(rows)  # the key is unique in this data
    got = read_all(csv_out)
    assert len(got["fare"]) == len(rows)
    assert got["trip_start_day"].dtype == np.int8
    assert got["company_onehot"].shape == (len(rows), 21)
    assert "pickup_census_tract" not in got and "trip_start_timestamp" not in got
    seen = set()
    for i in range(len(rows)):
        key = output_key(got, i)
        seen.add(key)
        want = reference(expected[key], stats, vocabulary)
        for name, value in want.items():
            have = got[name][i]
            have = have.tolist() if isinstance(have, np.ndarray) else have
            if isinstance(value, float):
                assert math.isclose(have, value, rel_tol=1e-6, abs_tol=1e-6), (name, key)
            else:
                assert have == value, (name, key)
    assert len(seen) == len(rows)


def test_manifest_lists_the_steps_and_artifacts(csv_out):
    manifest = read_manifest(csv_out)
    transform = manifest["transform"]
    assert transform["analysis_passes"] == 2 and transform["artifacts_from"] is None
    assert transform["files"] == [
        "transform/statistics.json",
        "transform/vocabulary_14_company_id.txt",
    ]
    assert transform["steps"][0] == {
        "drop": {"columns": ["pickup_census_tract", "dropoff_census_tract"]}
    }
    assert transform["steps"][14] == {
        "vocabulary": {
            "column": "company_clean",
            "output": "company_id",
            "top_k": 20,
            "num_oov_buckets": 1,
        }
    }
    for name in transform["files"]:
        assert (csv_out / name).is_file()
    features = {f["name"]: f for f in manifest["features"]}
    assert (
        features["company_onehot"]["shape"] == [21] and features["company_tokens"]["shape"] is None
    )
    assert (
        features["fare"]["encoding"] == "float64_bytes"
    )  # columns: options apply after transforms


def test_reused_artifacts_apply_without_refitting(parquet_reused, csv_out, source):
    transform = read_manifest(parquet_reused)["transform"]
    assert transform["analysis_passes"] == 0 and transform["artifacts_from"] == str(csv_out)
    assert statistics(parquet_reused) == statistics(csv_out)
    assert (parquet_reused / "transform" / "vocabulary_14_company_id.txt").read_bytes() == (
        csv_out / "transform" / "vocabulary_14_company_id.txt"
    ).read_bytes()
    got = read_all(parquet_reused)
    stats = statistics(csv_out)
    fares = got["fare"]
    assert len(fares) == len(kept(source))
    np.testing.assert_allclose(
        got["fare_z"], (fares - stats[6]["mean"]) / stats[6]["std"], rtol=1e-6, atol=1e-6
    )
    # pandas wrote the CSV's empty company cells as "nan" in the Parquet file: not in the
    # CSV's vocabulary, so they get the out-of-vocabulary id (20).
    assert int(np.sum(got["company_id"] == 20)) >= 3000


def test_a_failing_row_fails_the_job_naming_file_row_and_column(tmp_path, peer_data):
    config = tmp_path / "bad.yaml"
    config.write_text(
        'transforms:\n  - filter: {expr: "fare > 10"}\n  - cast: {column: company, to: int64}\n'
    )
    result = run_cli_captured(
        [
            "convert",
            "--config",
            config,
            "--input",
            peer_data / "data.csv",
            "--output",
            tmp_path / "o",
        ]
    )
    assert result.code == 1
    assert (
        f"{peer_data / 'data.csv'}: row 1: column 'company': transforms[1].cast ({config}): "
        "Failed to parse string: 'Dispatch Taxi Affiliation'"
    ) in result.err
    assert not (tmp_path / "o" / "manifest.json").exists()
    errors = [
        json.loads(line)
        for path in (tmp_path / "o" / "_errors").glob("*.jsonl")
        for line in path.read_text(encoding="utf-8").splitlines()
    ]
    first = min(errors, key=lambda e: e["row"])
    assert (first["row"], first["column"], first["stage"]) == (1, "company", "transform")
    assert first["values"]["company"] == "Dispatch Taxi Affiliation"


def test_construction_errors_exit_2_naming_file_and_key(tmp_path, peer_data):
    config = tmp_path / "bad.yaml"
    config.write_text(
        "transforms:\n  - fill_missing: {column: fare, value: 0.0}\n  - zscore: {column: farex}\n"
    )
    args = [
        "convert",
        "--config",
        config,
        "--input",
        peer_data / "data.csv",
        "--output",
        tmp_path / "o",
    ]
    result = run_cli_captured(args)
    assert result.code == 2
    where = f"{config}: key 'transforms[1].zscore.column': "
    assert (
        f"{where}column 'farex' is not in the input (columns: pickup_community_area, " in result.err
    )
    result = run_cli_captured([*args, "--transform-artifacts", tmp_path])
    assert result.code == 2


def test_overwrite_removes_the_old_transform_files(tmp_path):
    out = tmp_path / "o"
    (out / "transform").mkdir(parents=True)
    for name in ("transform/statistics.json", "transform/vocabulary_01_x.txt", "train-0.tfrecord"):
        (out / name).write_text("x")
    manifest = {
        "manifest_version": 1,
        "splits": {"train": {"rows": 1, "files": ["train-0.tfrecord"]}},
        "features": [],
        "transform": {"files": ["transform/statistics.json", "transform/vocabulary_01_x.txt"]},
    }
    (out / "manifest.json").write_text(json.dumps(manifest))
    clear_previous_output(str(out), overwrite=True)
    assert sorted(p.name for p in out.rglob("*") if p.is_file()) == []
