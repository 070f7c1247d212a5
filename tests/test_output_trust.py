"""An output directory is not trusted blindly: a path its manifest (shards, artifact files) or a
statistics file (vocabulary files) lists that leaves the directory (`..`, an absolute path, a
scheme) is refused by every entry point before anything is deleted or read: `--overwrite`,
`verify`, `inspect`, the reader and `--transform-artifacts`.

Each test hand-edits a real output and records every path Beam's FileSystems is asked to open,
delete, test or match (and Python's own `open`): none may lie outside the output."""

from __future__ import annotations

import builtins
import json
import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from apache_beam.io.filesystems import FileSystems
from conftest import run_cli_captured

from pipeline.output.manifest import Manifest
from pipeline.reader import load_dataset
from transforms import fs
from transforms.confine import check_inside

ESCAPES = ["../victim", "/etc/x", "gs://other/x", "file:///etc/x", "a/../../victim", "..\\victim"]


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    """One complete output with a vocabulary artifact, made once: (source, config, output)."""
    root = tmp_path_factory.mktemp("trust")
    source = root / "t.parquet"
    pq.write_table(pa.table({"id": list(range(20)), "c": [f"v{i % 3}" for i in range(20)]}), source)
    config = root / "job.yaml"
    config.write_text(
        json.dumps({"transforms": [{"vocabulary": {"column": "c", "output": "c_id"}}]}),
        encoding="utf-8",
    )
    out = root / "out"
    result = run_cli_captured(["convert", "--config", config, "--input", source, "--output", out])
    assert result.code == 0, result.err
    return source, config, out


@pytest.fixture
def work(base, tmp_path):
    """A copy of the base output in a fresh directory, with a victim file beside it."""
    source, config, out = base
    copy = tmp_path / "out"
    shutil.copytree(out, copy)
    victim = tmp_path / "victim"
    victim.write_text("must stay", encoding="utf-8")
    return source, config, copy, victim


@pytest.fixture
def touched(monkeypatch):
    """Every path handed to FileSystems.open/create/delete/exists/match (Beam's and
    transforms/fs.py's), to transforms/fs.py's functions and to builtins.open."""
    paths: list[str] = []

    def recording(original):
        def call(target, *args, **kwargs):
            paths.append(str(target))
            return original(target, *args, **kwargs)

        return call

    def spy(systems, name, many=False):
        original = getattr(systems, name)

        def call(target, *args, **kwargs):
            paths.extend(str(p) for p in (target if many else [target]))
            return original(target, *args, **kwargs)

        monkeypatch.setattr(systems, name, staticmethod(call))

    # Beam's, and transforms/fs.py's, which serves local paths without Beam
    for systems in (FileSystems, fs.FileSystems):
        for name in ("open", "create", "exists"):
            spy(systems, name)
        spy(systems, "delete", many=True)
        spy(systems, "match", many=True)
    for name in ("exists", "match", "open_read"):
        monkeypatch.setattr(fs, name, recording(getattr(fs, name)))
    real_open = builtins.open

    def recording_open(file, *args, **kwargs):
        paths.append(str(file))
        return real_open(file, *args, **kwargs)

    monkeypatch.setattr(builtins, "open", recording_open)
    return paths


def edit_manifest(out: Path, change) -> Path:
    path = out / "manifest.json"
    data = json.loads(path.read_text(encoding="utf-8"))
    change(data)
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


def outside(paths: list[str]) -> list[str]:
    """The recorded paths that name something the edited files point at outside the output:
    the victim (by any route, `..` included), /etc/x, another bucket, a file:// URL."""
    return [
        p
        for p in paths
        if "victim" in p or "/etc/x" in p or "other/x" in p or p.startswith("file:")
    ]


# ----------------------------------------------------------------------------- the check itself


@pytest.mark.parametrize("name", [*ESCAPES, "", "a\x00b", "C:\\x"])
def test_check_inside_refuses_what_leaves_the_directory(name):
    with pytest.raises(ValueError, match=r"m\.json: key 'k\.x'"):
        check_inside(name, "m.json", "k.x")


@pytest.mark.parametrize(
    "name", ["train-00000-of-00001.tfrecord.gz", "transform/statistics.json", "a..b/c..d", ".x"]
)
def test_check_inside_keeps_a_relative_path(name):
    assert check_inside(name, "m.json", "k") == name


def test_check_inside_refuses_a_non_string():
    with pytest.raises(ValueError, match="is not a path"):
        check_inside(["x"], "m.json", "k")


@pytest.mark.parametrize("bad", ESCAPES)
@pytest.mark.parametrize(
    ("key", "place"),
    [
        ("splits.train.files[0]", lambda d, v: d["splits"]["train"]["files"].__setitem__(0, v)),
        (
            "splits.train.shards[0].file",
            lambda d, v: d["splits"]["train"]["shards"][0].__setitem__("file", v),
        ),
        ("transform.files[1]", lambda d, v: d["transform"]["files"].__setitem__(1, v)),
    ],
)
def test_manifest_from_json_names_the_key_and_path(base, bad, key, place):
    data = json.loads((base[2] / "manifest.json").read_text(encoding="utf-8"))
    Manifest.from_json(data, "out/manifest.json")  # as written: accepted
    place(data, bad)
    with pytest.raises(ValueError) as err:
        Manifest.from_json(data, "out/manifest.json")
    assert f"out/manifest.json: key '{key}': path {bad!r} leaves the directory" in str(err.value)


def test_transform_files_must_be_a_list(base):
    data = json.loads((base[2] / "manifest.json").read_text(encoding="utf-8"))
    data["transform"]["files"] = "../victim"
    with pytest.raises(ValueError, match=r"key 'transform\.files' must be a list"):
        Manifest.from_json(data, "m.json")


# ----------------------------------------------------------------------------- entry points


@pytest.mark.parametrize("escape", ["../victim", "{victim}", "gs://other/x"])
def test_overwrite_deletes_nothing_outside(work, touched, escape):
    source, config, out, victim = work
    bad = escape.format(victim=victim)
    manifest = edit_manifest(out, lambda d: d["transform"]["files"].append(bad))
    before = sorted(p.name for p in out.rglob("*"))
    args = ["convert", "--config", config, "--input", source, "--output", out, "--overwrite"]
    result = run_cli_captured(args)
    assert result.code == 2
    assert f"{manifest}: key 'transform.files[2]': path {bad!r}" in result.err
    assert victim.read_text(encoding="utf-8") == "must stay"
    assert sorted(p.name for p in out.rglob("*")) == before  # nothing deleted, no lease left
    assert outside(touched) == []


@pytest.mark.parametrize("escape", ["../victim", "{victim}", "gs://other/x"])
def test_verify_and_inspect_read_nothing_outside(work, touched, escape):
    _, _, out, victim = work
    bad = escape.format(victim=victim)
    manifest = edit_manifest(out, lambda d: d["splits"]["train"]["files"].__setitem__(0, bad))
    verify = run_cli_captured(["verify", out, "--source"])
    assert verify.code == 2
    assert f"{manifest}: key 'splits.train.files[0]': path {bad!r}" in verify.err
    inspect = run_cli_captured(["inspect", out])
    assert inspect.code == 1
    assert f"{manifest}: key 'splits.train.files[0]': path {bad!r}" in inspect.err
    assert outside(touched) == []


def test_reader_reads_nothing_outside(work, touched):
    _, _, out, victim = work
    edit_manifest(out, lambda d: d["splits"]["train"]["shards"][0].__setitem__("file", str(victim)))
    with pytest.raises(ValueError, match=r"key 'splits\.train\.shards\[0\]\.file'"):
        load_dataset(str(out))
    assert outside(touched) == []


@pytest.mark.parametrize("escape", ["../victim", "{victim}", "gs://other/x"])
def test_transform_artifacts_read_nothing_outside(work, touched, tmp_path, escape):
    source, config, out, victim = work
    bad = escape.format(victim=victim)
    statistics = out / "transform" / "statistics.json"
    data = json.loads(statistics.read_text(encoding="utf-8"))
    (entry,) = data["analyzers"]
    entry["file"] = bad
    statistics.write_text(json.dumps(data), encoding="utf-8")
    args = ["convert", "--config", config, "--input", source, "--output", tmp_path / "again"]
    result = run_cli_captured([*args, "--transform-artifacts", out])
    assert result.code == 2
    assert f"{statistics}: key 'analyzers[step {entry['step']}].file': path {bad!r}" in result.err
    assert not (tmp_path / "again").exists()  # refused while planning: nothing written
    assert outside(touched) == []
