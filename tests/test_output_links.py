"""An output directory never reaches outside itself: a symbolic link found inside an output is
never followed by convert (clearing, writing, the lease), verify, inspect, report or the reader
(pipeline/output/entries.py). Without --overwrite convert refuses it before deleting anything
(exit 2, the entry named); with --overwrite it removes the link itself, never its target.

Every test keeps a tree of a user's files beside the output (`victims/`), points links at it
(relative and absolute, to files and to folders, at every depth), and checks that not a byte of
it changed. A property test does the same over random trees of files, folders and links.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import REPO, run_cli_captured
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pipeline.output.entries import (
    LinkInOutputError,
    delete,
    link_on_way,
    list_files,
    scan,
)
from pipeline.reader import load_dataset

ENGINES = ["in-process", "beam"]


# ---------------------------------------------------------- a user's files beside the output


def make_victims(root: Path) -> Path:
    """A user's tree: files at two depths, an empty folder."""
    victims = root / "victims"
    (victims / "deep" / "er").mkdir(parents=True)
    (victims / "empty").mkdir()
    (victims / "keep.txt").write_text("must stay", encoding="utf-8")
    (victims / "train-00000-of-00001.tfrecord.gz").write_bytes(b"a user's file named like a shard")
    (victims / "deep" / "FeatureStats.pb").write_bytes(b"\x00\x01 not ours")
    (victims / "deep" / "er" / "errors-00000-of-00001.jsonl").write_text("{}\n", encoding="utf-8")
    (victims / "manifest.json").write_text('{"manifest_version": 1}', encoding="utf-8")
    return victims


def snapshot(root: Path) -> dict[str, bytes | None]:
    """Every entry below `root` (files: their bytes; folders: None), links not followed."""
    out: dict[str, bytes | None] = {}
    for folder, dirs, files in os.walk(root):
        for name in dirs:
            out[os.path.relpath(os.path.join(folder, name), root)] = None
        for name in files:
            path = os.path.join(folder, name)
            rel = os.path.relpath(path, root)
            out[rel] = (
                b"LINK:" + os.readlink(path).encode()
                if os.path.islink(path)
                else Path(path).read_bytes()
            )
    return out


def link(at: Path, target: Path, relative: bool) -> None:
    at.parent.mkdir(parents=True, exist_ok=True)
    at.symlink_to(os.path.relpath(target, at.parent) if relative else target)


@pytest.fixture
def source(tmp_path):
    path = tmp_path / "t.parquet"
    pq.write_table(pa.table({"id": list(range(50)), "x": [i * 0.5 for i in range(50)]}), path)
    return path


def convert(source, out, *flags, engine="in-process"):
    return run_cli_captured(
        ["convert", "--input", source, "--output", out, "--engine", engine, *flags]
    )


# ------------------------------------------------------------------ the primitives


def test_link_on_way_finds_a_link_at_any_depth(tmp_path):
    out = tmp_path / "out"
    (out / "a" / "b").mkdir(parents=True)
    victims = make_victims(tmp_path)
    link(out / "a" / "b" / "c", victims / "deep", relative=True)
    assert link_on_way(str(out), str(out / "a" / "b" / "c" / "FeatureStats.pb")) == str(
        out / "a" / "b" / "c"
    )
    assert link_on_way(str(out), str(out / "a" / "b" / "nothing")) is None
    # the output itself may be a link (the user's choice)
    alias = tmp_path / "alias"
    alias.symlink_to(out)
    assert link_on_way(str(alias), str(alias / "a" / "b")) is None


def test_scan_lists_links_without_following_them(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    victims = make_victims(tmp_path)
    link(out / "_errors", victims / "deep", relative=False)
    link(out / "statistics" / "train", victims / "deep", relative=True)
    (out / "transform").write_text("a file where a folder goes", encoding="utf-8")
    found = scan(str(out), ["transform", "_errors"], ["manifest.json"])
    assert sorted(os.path.relpath(p, out) for p, _ in found.links) == [
        "_errors",
        os.path.join("statistics", "train"),
    ]
    assert [(os.path.relpath(p, out), kind) for p, kind in found.wrong_kind] == [
        ("transform", "folder")
    ]


def test_list_and_delete_never_follow_a_link(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    victims = make_victims(tmp_path)
    before = snapshot(victims)
    link(out / "_errors", victims / "deep" / "er", relative=True)
    link(out / "train-00000-of-00001.tfrecord.gz", victims / "keep.txt", relative=False)
    (out / "beam-temp-x").mkdir()
    link(out / "beam-temp-x" / "inner", victims, relative=True)
    listed = list_files(str(out), [str(out / "_errors" / "*"), str(out / "train-*")])
    assert listed == [str(out / "train-00000-of-00001.tfrecord.gz")]  # the link, as an entry
    with pytest.raises(LinkInOutputError, match="_errors is a symbolic link"):
        delete(str(out), [str(out / "_errors" / "errors-00000-of-00001.jsonl")])
    delete(str(out), [str(out / "_errors"), *listed, str(out / "beam-temp-x")])
    assert sorted(os.listdir(out)) == []
    assert snapshot(victims) == before


# ------------------------------------------------------------------ convert, both engines


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("relative", [True, False], ids=["relative", "absolute"])
def test_a_linked_errors_folder_is_refused_then_removed_with_overwrite(
    source, tmp_path, engine, relative
):
    """The case found by a user: `_errors` replaced by a link to a folder holding a user's
    file; `convert --overwrite` deleted that file and failed, leaving a temp folder."""
    out = tmp_path / "out"
    assert convert(source, out, engine=engine).code == 0
    victims = make_victims(tmp_path)
    before = snapshot(victims)
    link(out / "_errors", victims / "deep" / "er", relative)
    result = convert(source, out, engine=engine)
    assert result.code == 2
    assert f"{out / '_errors'} is a symbolic link" in result.err
    assert "--overwrite" in result.err and len(result.err.strip().splitlines()) == 1
    assert (out / "manifest.json").is_file()  # nothing of the output touched either
    result = convert(source, out, "--overwrite", engine=engine)
    assert result.code == 0, result.err
    assert f"removed the link {out / '_errors'}" in result.err
    assert snapshot(victims) == before
    assert not (out / "_errors").exists() and not list(out.glob("beam-temp-*"))
    (batch,) = load_dataset(str(out), batch_size=100)
    assert sorted(batch["id"].numpy().tolist()) == list(range(50))


@pytest.mark.parametrize("engine", ENGINES)
def test_links_to_files_and_folders_at_every_depth_under_overwrite(source, tmp_path, engine):
    out = tmp_path / "out"
    assert convert(source, out, "--report", engine=engine).code == 0
    victims = make_victims(tmp_path)
    before = snapshot(victims)
    shard = out / "train-00000-of-00001.tfrecord.gz"
    shard.unlink()
    link(shard, victims / "train-00000-of-00001.tfrecord.gz", relative=True)  # a listed shard
    (out / "statistics" / "train" / "FeatureStats.pb").unlink()
    link(
        out / "statistics" / "train" / "FeatureStats.pb",
        victims / "deep" / "FeatureStats.pb",
        False,
    )
    (out / "report.html").unlink()
    link(out / "report.html", victims / "keep.txt", relative=False)
    link(out / "beam-temp-old", victims / "deep", relative=True)  # a leftover's name
    link(out / "schema.pbtxt.keep", victims / "empty", relative=True)  # not a name of the job
    result = convert(source, out, "--overwrite", "--report", engine=engine)
    assert result.code == 0, result.err
    assert result.err.count("removed the link") == 5
    assert snapshot(victims) == before
    assert not any(p.is_symlink() for p in out.rglob("*"))
    assert (out / "report.html").read_text(encoding="utf-8").startswith("<!DOCTYPE html>")


@pytest.mark.parametrize("engine", ENGINES)
def test_a_linked_lease_and_manifest(source, tmp_path, engine):
    out = tmp_path / "out"
    out.mkdir()
    victims = make_victims(tmp_path)
    before = snapshot(victims)
    link(out / "_LEASE", victims / "keep.txt", relative=True)
    result = convert(source, out, "--overwrite", engine=engine)
    assert result.code == 2 and f"{out / '_LEASE'} is a symbolic link" in result.err
    (out / "_LEASE").unlink()
    link(out / "manifest.json", victims / "manifest.json", relative=False)
    assert convert(source, out, engine=engine).code == 2
    result = convert(source, out, "--overwrite", engine=engine)
    assert result.code == 0, result.err
    assert snapshot(victims) == before
    assert not (out / "manifest.json").is_symlink()


def test_the_output_path_itself_may_be_a_link(source, tmp_path):
    real = tmp_path / "real"
    real.mkdir()
    alias = tmp_path / "alias"
    alias.symlink_to(real)
    assert convert(source, alias).code == 0
    assert convert(source, alias, "--overwrite").code == 0
    assert (real / "manifest.json").is_file()


# ------------------------------------------------------------------ the readers


@pytest.fixture
def linked_output(source, tmp_path):
    """A complete output whose shard is a link to a copy of itself outside (the reader would
    read the same records through it), with `_errors/` a link: (output, victims)."""
    out = tmp_path / "out"
    assert convert(source, out, "--report").code == 0
    victims = make_victims(tmp_path)
    shard = out / "train-00000-of-00001.tfrecord.gz"
    copy = victims / "copy.tfrecord.gz"
    copy.write_bytes(shard.read_bytes())
    shard.unlink()
    link(shard, copy, relative=True)
    return out, victims


def test_the_reader_refuses_a_linked_shard(linked_output):
    out, _ = linked_output
    with pytest.raises(
        LinkInOutputError, match=r"train-00000-of-00001\.tfrecord\.gz is a symbolic"
    ):
        load_dataset(str(out))


def test_inspect_refuses_a_linked_shard(linked_output):
    out, _ = linked_output
    result = run_cli_captured(["inspect", out])
    assert result.code == 1 and "is a symbolic link" in result.err


def test_verify_names_every_link_and_reads_nothing_through_them(linked_output):
    out, victims = linked_output
    before = snapshot(victims)
    link(out / "_errors", victims / "deep" / "er", relative=False)
    result = run_cli_captured(["verify", out, "--json"])
    assert result.code == 1
    report = json.loads(result.out.splitlines()[-1])
    texts = " ".join(f["message"] for f in report["findings"])
    assert "train-00000-of-00001.tfrecord.gz: a symbolic link" in texts
    assert snapshot(victims) == before


def test_report_never_writes_through_a_link(linked_output):
    out, victims = linked_output
    before = snapshot(victims)
    (out / "report.html").unlink()
    link(out / "report.html", victims / "keep.txt", relative=True)
    result = run_cli_captured(["report", out])
    assert result.code == 1 and "report.html is a symbolic link" in result.err
    assert snapshot(victims) == before


# ------------------------------------------------------------------ a failed run


@pytest.mark.parametrize("engine", ENGINES)
def test_a_failed_overwrite_says_what_it_cleared_and_left(source, tmp_path, engine):
    out = tmp_path / "out"
    assert convert(source, out, engine=engine).code == 0
    bad = tmp_path / "bad.csv"
    bad.write_text("id,x\n1,1.5\n2,oops\n3,2.5\n", encoding="utf-8")
    config = tmp_path / "c.yaml"
    config.write_text(json.dumps({"csv": {"column_types": {"x": "float64"}}}), encoding="utf-8")
    result = run_cli_captured(
        ["convert", "--config", config, "--input", bad, "--output", out, "--overwrite",
         "--engine", engine]
    )  # fmt: skip
    assert result.code == 1
    (line,) = [x for x in result.err.splitlines() if x.startswith("tfrecord-etl: error:")]
    assert (
        "before it failed, the run had removed the previous output (manifest.json, 1 shard(s)"
        in line
    )
    assert f"left in {out}: _errors/ (1 file)" in line
    assert not list(out.rglob("beam-temp-*"))  # its temp folders went with it
    summary = json.loads(result.out.splitlines()[-1])
    assert "before it failed" in summary["error"]


# ------------------------------------------------------------------ beside links


def test_another_tools_manifest_is_never_replaced(source, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    theirs = {"name": "another tool", "files": ["part-0"]}
    (out / "manifest.json").write_text(json.dumps(theirs), encoding="utf-8")
    (out / "part-0").write_text("their data", encoding="utf-8")
    for flags in ([], ["--overwrite"]):
        result = convert(source, out, *flags)
        assert result.code == 2
        assert "is not a tfrecord-etl manifest" in result.err
        assert len(result.err.strip().splitlines()) == 1
    assert json.loads((out / "manifest.json").read_text(encoding="utf-8")) == theirs
    assert (out / "part-0").read_text(encoding="utf-8") == "their data"


@pytest.mark.parametrize(
    "entry", ["_errors", "statistics", "statistics/train", "transform", "Split-train"]
)
def test_a_file_where_a_folder_goes(source, tmp_path, entry):
    out = tmp_path / "out"
    (out / entry).parent.mkdir(parents=True, exist_ok=True)
    (out / entry).write_text("a user's file", encoding="utf-8")
    result = convert(source, out, "--overwrite")
    assert result.code == 2
    assert f"{out / entry} is a file where the job writes a folder" in result.err
    assert (out / entry).read_text(encoding="utf-8") == "a user's file"


def test_a_file_as_the_output_path(source, tmp_path):
    out = tmp_path / "out"
    out.write_text("a user's file", encoding="utf-8")
    result = convert(source, out, "--overwrite")
    assert result.code == 2 and "is a file where the job writes a folder" in result.err
    assert out.read_text(encoding="utf-8") == "a user's file"


def _mount_tmpfs(where: Path, options: str) -> bool:
    where.mkdir(parents=True, exist_ok=True)
    proc = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(where)],
        capture_output=True,
        check=False,
    )
    return proc.returncode == 0


@pytest.fixture
def mounted(tmp_path):
    mounts = []

    def mount(name: str, options: str) -> Path:
        where = tmp_path / name
        if not _mount_tmpfs(where, options):
            pytest.skip("needs root to mount a tmpfs (CI runs as root)")
        mounts.append(where)
        return where

    yield mount
    for where in mounts:
        subprocess.run(["umount", "-l", str(where)], check=False)


def test_a_read_only_output(source, tmp_path, mounted):
    where = mounted("ro", "size=1m")
    (where / "out").mkdir()
    (where / "out" / "keep.txt").write_text("kept", encoding="utf-8")
    subprocess.run(["mount", "-o", "remount,ro", str(where)], check=True)
    result = convert(source, where / "out", "--overwrite")
    assert result.code == 2
    (line,) = result.err.strip().splitlines()
    assert "cannot write into the output directory" in line and "Read-only file system" in line
    assert (where / "out" / "keep.txt").read_text(encoding="utf-8") == "kept"


def test_an_output_without_space(tmp_path, mounted):
    where = mounted("full", "size=256k")
    big = tmp_path / "big.parquet"
    pq.write_table(pa.table({"s": [os.urandom(256).hex() for _ in range(4000)]}), big)
    result = convert(big, where / "out", "--compression", "none")
    assert result.code == 1
    (line,) = [x for x in result.err.splitlines() if x.startswith("tfrecord-etl: error:")]
    assert "No space left on device" in line and "left in" in line
    assert not list((where / "out").rglob("beam-temp-*"))


# ------------------------------------------------------------------ random trees


NAMES = [
    "_errors",
    "statistics",
    "transform",
    "beam-temp-0123",
    "train-00000-of-00001.tfrecord.gz",
    "train-00001-of-00002.tfrecord.gz",
    "manifest.json",
    "schema.pbtxt",
    "report.html",
    "Split-train",
    "notes",
    "x",
]
FOLDERS = ["_errors", "statistics", "transform", "notes", "beam-temp-0123", "Split-train"]


@st.composite
def trees(draw):
    """A list of (relative path, kind, target) to make inside an output: kinds "file",
    "folder", "link" (target: a victim, an entry of the output, or nothing), relative or
    absolute links."""
    entries = []
    for _ in range(draw(st.integers(1, 6))):
        depth = draw(st.integers(1, 3))
        parts = [draw(st.sampled_from(NAMES)) for _ in range(depth)]
        kind = draw(st.sampled_from(["file", "folder", "link", "link"]))
        target = draw(st.sampled_from(["keep.txt", "deep", "deep/er", "empty", "@inside", "@none"]))
        entries.append(("/".join(parts), kind, target, draw(st.booleans())))
    return entries


def build_tree(out: Path, victims: Path, entries) -> None:
    for rel, kind, target, relative in entries:
        at = out / rel
        if any(p.is_symlink() or p.is_file() for p in [*at.parents][: len(at.parents) - 1]):
            continue  # below a link or a file: the entry cannot be made there
        if at.exists() or at.is_symlink():
            continue
        at.parent.mkdir(parents=True, exist_ok=True)
        if kind == "file":
            at.write_text(f"a user's {rel}", encoding="utf-8")
        elif kind == "folder":
            at.mkdir()
        elif target == "@inside":
            at.symlink_to(out if not relative else os.path.relpath(out, at.parent))
        elif target == "@none":
            at.symlink_to(victims / "gone")
        else:
            link(at, victims / target, relative)


def _outside_intact(source, victims, before):
    assert snapshot(victims) == before
    assert source.is_file()


@settings(
    max_examples=int(os.environ.get("TFRECORD_ETL_LINK_EXAMPLES", "25")),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(entries=trees())
def test_random_trees_never_lose_a_byte_outside(source, tmp_path_factory, entries):
    root = tmp_path_factory.mktemp("tree")
    victims = make_victims(root)
    before = snapshot(victims)
    out = root / "out"
    assert convert(source, out).code == 0
    build_tree(out, victims, entries)
    result = convert(source, out, "--overwrite")
    assert result.code in (0, 2), result.err
    if result.code == 2:  # a file where a folder goes, or the reverse: refused
        assert "where the job writes a" in result.err, result.err
    _outside_intact(source, victims, before)
    run_cli_captured(["verify", out])
    run_cli_captured(["report", out])
    run_cli_captured(["inspect", out])
    _outside_intact(source, victims, before)


def _kill_when_writing(source: Path, out: Path) -> int:
    proc = subprocess.Popen(
        [sys.executable, "-m", "pipeline", "convert", "--input", str(source), "--output",
         str(out), "--overwrite", "--batch-rows", "2000"],
        cwd=REPO, env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"),
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
    )  # fmt: skip
    deadline = time.monotonic() + 120
    try:
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                if list(out.glob("beam-temp-*/*")):
                    break  # the run writes its shards
            except FileNotFoundError:
                pass  # a folder of the tree that the run's --overwrite cleared while we looked
            time.sleep(0.005)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=60)
    return proc.returncode


def test_killed_runs_then_reruns_over_random_trees(tmp_path):
    """Three random trees (seeded): a run killed while it writes, then a re-run, never lose a
    byte outside the output, and the re-run leaves a complete output with no temp folder."""
    rows = 300_000
    big = tmp_path / "big.parquet"
    pq.write_table(pa.table({"id": range(rows), "s": [f"v{i % 97}" for i in range(rows)]}), big,
                   row_group_size=20_000)  # fmt: skip
    rng = random.Random(24)
    for case in range(3):
        root = tmp_path / f"case{case}"
        victims = make_victims(root)
        before = snapshot(victims)
        out = root / "out"
        entries = [  # links anywhere; folders only where the job makes folders
            (
                "/".join(rng.choice(NAMES) for _ in range(rng.randint(1, 2))),
                "link",
                rng.choice(["keep.txt", "deep", "deep/er", "@inside", "@none"]),
                rng.random() < 0.5,
            )
            for _ in range(4)
        ]
        entries += [(rng.choice(FOLDERS), "folder", "", False) for _ in range(2)]
        build_tree(out, victims, entries)
        assert _kill_when_writing(big, out) == -signal.SIGKILL  # killed, not finished
        assert snapshot(victims) == before
        result = convert(big, out, "--overwrite")
        assert result.code == 0, result.err
        assert snapshot(victims) == before
        assert not list(out.rglob("beam-temp-*"))
        assert json.loads((out / "manifest.json").read_text(encoding="utf-8"))["rows"] == rows


def test_transform_artifacts_are_never_read_through_a_link(tmp_path):
    source = tmp_path / "t.parquet"
    pq.write_table(pa.table({"id": list(range(20)), "c": [f"v{i % 3}" for i in range(20)]}), source)
    config = tmp_path / "job.yaml"
    config.write_text(
        json.dumps({"transforms": [{"vocabulary": {"column": "c", "output": "c_id"}}]}),
        encoding="utf-8",
    )
    first = tmp_path / "first"
    flags = ["convert", "--config", config, "--input", source]
    assert run_cli_captured([*flags, "--output", first]).code == 0
    victims = make_victims(tmp_path)
    moved = victims / "transform"
    (first / "transform").rename(moved)
    link(first / "transform", moved, relative=True)
    result = run_cli_captured(
        [*flags, "--output", tmp_path / "second", "--transform-artifacts", first]
    )
    assert result.code == 2 and f"{first / 'transform'} is a symbolic link" in result.err
