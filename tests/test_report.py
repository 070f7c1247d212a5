"""`tfrecord-etl report` on hand-made outputs: the page's numbers equal the statistics, every
user string is escaped, nothing is fetched, at most 20 KB a feature (2 MB for 100), the report
imports neither Beam nor TensorFlow, an output on gs://, s3:// and azfs://; the figures; the
`report` config key. The sample's report, `convert --report` and the browser checks:
test_report_sample.py."""

from __future__ import annotations

import html
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from conftest import REPO
from report_page import check_numbers, make_output, page_cells
from tensorflow_metadata.proto.v0 import statistics_pb2

from pipeline.job.config import ConfigError, config_to_json, load_config
from pipeline.output.manifest import Manifest
from pipeline.report.files import load_manifest
from pipeline.report.write import render_report, write_report

NASTY = "<script>alert(1)</script>"
ODD_NAME = 'we<ird> "name" & $x$'


def _table(rows: int, seed: int) -> pa.Table:
    rng = np.random.default_rng(seed)
    fare = rng.gamma(2.0, 6.0, rows).round(2)
    fare[rng.random(rows) < 0.1] = 0.0
    tags = [
        None if i % 9 == 0 else [NASTY, "a&b \"q\" 'x'", "$\\alpha$", "t\x00ctl", "</td>"][: i % 6]
        for i in range(rows)
    ]
    return pa.table(
        {
            "fare": pa.array([None if i % 7 == 0 else f for i, f in enumerate(fare)]),
            ODD_NAME: pa.array(rng.integers(-3, 50, rows), pa.int32()),
            "city": pa.array(rng.choice(["Chicago", NASTY, "Zürich & co"], rows).tolist()),
            "tags": pa.array(tags, pa.list_(pa.string())),
            "grid": pa.array(
                rng.integers(0, 9, (rows, 2, 2)).tolist(), pa.list_(pa.list_(pa.int32()))
            ),
            "blob": pa.array([bytes([i % 256, 255]) for i in range(rows)], pa.binary()),
        }
    )


BAD = [
    {"source": "in.parquet", "row": 3, "column": ODD_NAME, "stage": "encode", "reason": NASTY},
    {"source": "in.parquet", "row": 8, "column": None, "stage": "read", "reason": "short row"},
    {"source": "in.parquet", "row": 9, "column": ODD_NAME, "stage": "encode", "reason": "x"},
]


@pytest.fixture(scope="module")
def output(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tables = {"train": _table(400, 1), "eval": _table(120, 2)}
    return make_output(tmp_path_factory.mktemp("report") / "out", tables, bad_rows=BAD)


@pytest.fixture(scope="module")
def page(output: Path) -> str:
    result = write_report(str(output))
    assert result.path == str(output / "report.html")
    assert result.splits_with_statistics == ("train", "eval")
    assert result.features == 6  # fare, the odd name, city, tags, grid, blob
    return (output / "report.html").read_text(encoding="utf-8")


def test_numbers_equal_the_statistics(output: Path, page: str) -> None:
    stats = {s: output / f"statistics/{s}/FeatureStats.pb" for s in ("train", "eval")}
    checked = check_numbers(page, stats)
    assert checked > 2 * 6 * 6  # every split, feature and statistic


def test_splits_shards_and_bad_rows(page: str) -> None:
    cells = page_cells(page)
    split = {
        (c.get("data-split"), c["data-stat"]): int(c["data-value"])
        for c in cells
        if c.get("data-stat") in ("rows", "shards", "bytes") and not c["table-feature"]
    }
    assert split[("train", "rows")] == 400 and split[("eval", "rows")] == 120
    assert split[("train", "shards")] == 1 and split[("eval", "bytes")] == 1037
    bad = [int(c["data-value"]) for c in cells if c["data-stat"] == "bad rows"]
    assert bad == [2, 1]  # (encode, the odd column) twice, then (read, whole row)
    assert "3 bad row(s)" in page


def test_user_strings_are_escaped(page: str) -> None:
    assert "<script" not in page.lower()  # the page has no script, and no value made one
    assert html.escape(NASTY) in page  # the value is shown, as text
    assert html.escape(ODD_NAME, quote=True) in page
    assert "<code>&lt;/td&gt;</code>" in page  # a top value that closes a cell, as text
    assert "\x00" not in page and "<code>t\ufffdctl</code>" in page


def test_nothing_is_fetched(page: str) -> None:
    assert re.search(r"""(src|href)\s*=\s*["']?(https?:|//)""", page) is None
    assert "<link" not in page and "@import" not in page and "url(" not in page
    assert "default-src 'none'" in page  # the CSP: a browser fetches nothing for it
    sources = re.findall(r'src="([^"]*)"', page)
    assert sources and all(s.startswith("data:image/svg+xml;base64,") for s in sources)


def test_type_mapping(output: Path, page: str) -> None:
    manifest = load_manifest(str(output))
    for feature in manifest.features:
        row = (
            f"<td>{html.escape(feature.spec.source_type)}</td><td><code>"
            f"{html.escape(feature.name)}</code></td><td>{feature.spec.kind}</td>"
            f"<td>{feature.spec.dtype}</td>"
        )
        assert row in page
    assert "<td>(2, 2)</td>" in page and "<td>variable-length list</td>" in page


def test_statistics_of_an_unknown_feature_are_named(tmp_path: Path) -> None:
    out = make_output(tmp_path / "out", {"train": _table(30, 6)})
    stats_file = out / "statistics/train/FeatureStats.pb"
    stats = statistics_pb2.DatasetFeatureStatisticsList.FromString(stats_file.read_bytes())
    stats.datasets[0].features.add(name="<gone>", type=statistics_pb2.FeatureNameStatistics.INT)
    stats_file.write_bytes(stats.SerializeToString())
    page, result = render_report(str(out))
    assert result.features == 6
    assert "does not list (not shown): <code>&lt;gone&gt;</code>" in page


def test_without_statistics(tmp_path: Path) -> None:
    out = make_output(tmp_path / "out", {"train": _table(50, 3)}, statistics=False)
    page, result = render_report(str(out))
    assert result.features == 0 and result.splits_with_statistics == ()
    assert "This output has no statistics" in page and "<img" not in page
    assert html.escape(ODD_NAME) in page  # the type mapping is there


def test_statistics_paths_stay_inside(tmp_path: Path) -> None:
    out = make_output(tmp_path / "out", {"train": _table(20, 4)})
    data = json.loads((out / "manifest.json").read_text())
    assert Manifest.from_json(data).statistics == {"train": "statistics/train/FeatureStats.pb"}
    assert Manifest.from_json({**data, "schema": "schema.pbtxt"}).to_json()["schema"] == (
        "schema.pbtxt"
    )
    for bad in ({"statistics": {"train": "../x.pb"}}, {"schema": "/etc/passwd"}):
        with pytest.raises(ValueError, match="leaves the directory"):
            Manifest.from_json({**data, **bad})
    (out / "statistics/train/FeatureStats.pb").write_bytes(b"\x0a\xff\xff")
    with pytest.raises(ValueError, match="not a DatasetFeatureStatisticsList"):
        render_report(str(out))


SLOW = pytest.mark.skipif(
    os.environ.get("TFRECORD_ETL_SLOW") != "1", reason="100 features; set TFRECORD_ETL_SLOW=1"
)


@pytest.mark.parametrize("features", [25, pytest.param(100, marks=SLOW)])
def test_hundred_features_under_two_megabytes(tmp_path: Path, features: int) -> None:
    """At most 20 KB a feature (2 MB for 100): 25 features by default, the 100 themselves with
    TFRECORD_ETL_SLOW=1 (a figure takes matplotlib a good part of a second on a busy machine)."""
    rng = np.random.default_rng(5)
    rows = 300
    columns = {}
    for i in range(features):
        kind = i % 4
        if kind == 0:
            columns[f"num_{i}"] = pa.array(rng.normal(i, 3, rows))
        elif kind == 1:
            columns[f"int_{i}"] = pa.array(rng.integers(0, 1000, rows))
        elif kind == 2:
            words = [f"value {j} of column {i}" for j in range(40)]
            columns[f"str_{i}"] = pa.array(rng.choice(words, rows).tolist())
        else:
            columns[f"list_{i}"] = pa.array(
                [rng.normal(0, 1, rng.integers(0, 6)).tolist() for _ in range(rows)]
            )
    table = pa.table(columns)
    out = make_output(tmp_path / "out", {"train": table.slice(0, 240), "eval": table.slice(240)})
    result = write_report(str(out))
    assert result.features == features
    print(f"report of {features} features, 2 splits: {result.bytes:,} bytes")
    assert result.bytes < features * 20_000


def test_report_imports_neither_beam_nor_tensorflow(output: Path) -> None:
    code = (
        "import sys; from pipeline.report.write import write_report; "
        f"write_report({str(output)!r}); "
        "bad = [m for m in ('apache_beam', 'tensorflow') if m in sys.modules]; "
        "sys.exit(f'imported {bad}' if bad else 0)"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]


def test_report_is_a_config_key_the_manifest_leaves_out(tmp_path: Path) -> None:
    config = tmp_path / "job.yaml"
    config.write_text("input: in.parquet\noutput: out\nreport: true\n", encoding="utf-8")
    assert load_config(str(config), {}).report is True
    assert load_config(str(config), {"report": False}).report is False  # the flag wins
    assert "report" not in config_to_json(load_config(str(config), {}))
    with pytest.raises(ConfigError, match="key 'report'"):
        load_config(None, {"input": ["x"], "output": "o", "report": "yes"})


def test_a_new_run_removes_an_earlier_report(tmp_path: Path) -> None:
    from pipeline.output.directory import clear_leftovers

    (tmp_path / "report.html").write_text("<p>an earlier output's</p>", encoding="utf-8")
    (tmp_path / "notes.html").write_text("kept", encoding="utf-8")
    clear_leftovers(str(tmp_path), [("train", 1)])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.html"]
    clear_leftovers(str(tmp_path), [("train", 1)])  # nothing to remove: no error


def test_figures_are_well_formed_svg_for_every_kind_of_summary() -> None:
    from xml.etree import ElementTree

    from pipeline.report.plots import feature_svg
    from pipeline.report.stats import FeatureSummary, ListLengths

    quantiles = tuple((float(i), float(i + 1), 5.0) for i in range(10))
    cases = {
        "quantiles only": FeatureSummary("q", "FLOAT", 60, 50, 10, {}, quantiles, True),
        "all null": FeatureSummary("n", "INT", 40, 0, 40, {}),
        "constant": FeatureSummary("c", "INT", 5, 5, 0, {}, ((7.0, 7.0, 5.0),)),
        "strings": FeatureSummary(
            "s", "STRING", 9, 9, 0, {}, top_values=(("<b>&\x00$x$", 5.0), ("y" * 80, 4.0))
        ),
        "lists": FeatureSummary(
            "l", "FLOAT", 9, 8, 1, {}, lengths=ListLengths(0, 4, 2.0, quantiles[:4], True)
        ),
    }
    texts = {}
    for name, summary in cases.items():
        svg = feature_svg({"train": summary, "eval <&>": summary})
        root = ElementTree.fromstring(svg)  # well-formed XML, or this raises
        texts[name] = "".join(t.text or "" for t in root.iter("{http://www.w3.org/2000/svg}text"))
    assert "<b>&\ufffd$x$" in texts["strings"]  # as text: no markup, no math, no NUL
    assert "y" * 21 + "…" in texts["strings"] and "y" * 22 not in texts["strings"]
    assert "eval <&>: 100.0%" in texts["all null"] and "null rate" in texts["all null"]
    assert "values per row: cumulative share" in texts["lists"]
    assert "values: cumulative share" in texts["quantiles only"]


def test_report_of_an_output_on_gs(output: Path) -> None:
    """The hand-made output copied to a GCS emulator: the report read and written there is the
    local one with the output's name changed."""
    from apache_beam.io.filesystems import FileSystems
    from gcs_emulator import GcsEmulator

    with GcsEmulator(("bucket",)) as gcs, gcs.environ():
        remote = "gs://bucket/out"
        for path in output.rglob("*"):
            if path.is_file() and path.name != "report.html":
                with FileSystems.create(f"{remote}/{path.relative_to(output).as_posix()}") as f:
                    f.write(path.read_bytes())
        result = write_report(remote)
        assert result.path == f"{remote}/report.html" and result.features == 6
        page = gcs.read("bucket", "out/report.html").decode("utf-8")
    local, _ = render_report(str(output))
    assert page == local.replace(html.escape(str(output)), html.escape(remote))


def test_report_of_an_output_on_s3(output: Path) -> None:
    """The same on an S3 emulator (moto's server): the report read and written on s3://."""
    from s3_emulator import S3Emulator

    from transforms.fs import FileSystems

    with S3Emulator(("bucket",)) as s3, s3.environ():
        remote = "s3://bucket/out"
        for path in output.rglob("*"):
            if path.is_file() and path.name != "report.html":
                with FileSystems.create(f"{remote}/{path.relative_to(output).as_posix()}") as f:
                    f.write(path.read_bytes())
        result = write_report(remote)
        assert result.path == f"{remote}/report.html" and result.features == 6
        page = s3.read("bucket", "out/report.html").decode("utf-8")
    local, _ = render_report(str(output))
    assert page == local.replace(html.escape(str(output)), html.escape(remote))


def test_report_of_an_output_on_azure(output: Path) -> None:
    """The same on azurite: the report read and written on azfs://."""
    from azure_emulator import ACCOUNT, AzureEmulator, installed

    from transforms.fs import FileSystems

    if installed() is not None:
        pytest.skip(str(installed()))
    with AzureEmulator(("bucket",)) as azure, azure.environ():
        remote = f"azfs://{ACCOUNT}/bucket/out"
        for path in output.rglob("*"):
            if path.is_file() and path.name != "report.html":
                with FileSystems.create(f"{remote}/{path.relative_to(output).as_posix()}") as f:
                    f.write(path.read_bytes())
        result = write_report(remote)
        assert result.path == f"{remote}/report.html" and result.features == 6
        page = azure.read("bucket", "out/report.html").decode("utf-8")
    local, _ = render_report(str(output))
    assert page == local.replace(html.escape(str(output)), html.escape(remote))


def test_shard_bytes_from_the_file_when_the_writer_did_not_count(tmp_path: Path) -> None:
    out = make_output(tmp_path / "out", {"train": _table(20, 7)}, statistics=False)
    manifest = json.loads((out / "manifest.json").read_text())
    for shard in manifest["splits"]["train"]["shards"]:
        shard["rows"] = shard["bytes"] = None  # as Beam's own TFRecord sink leaves them
    (out / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")
    (out / "train-00000-of-00001.tfrecord.gz").write_bytes(b"y" * 4321)
    page, _ = render_report(str(out))
    cells = {c["data-stat"]: c["data-value"] for c in page_cells(page) if c.get("data-split")}
    assert cells["bytes"] == "4321" and cells["shard bytes"] == "4321"
    assert "shard rows" not in cells and "<td>?</td>" in page
