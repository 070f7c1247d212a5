"""transforms/fs.py's FileSystems answers as Beam's FileSystems does, on the same directories:
each method, the pattern syntax of `match`, the errors, compressed files (left to Beam), and a
path with a scheme handed to Beam's class unchanged."""

from __future__ import annotations

import gzip
import os
import sys
from pathlib import Path

import pytest
from apache_beam.io.filesystem import BeamIOError
from apache_beam.io.filesystem import CompressionTypes as BeamCompressionTypes
from apache_beam.io.filesystems import FileSystems as Beam

from transforms import fs
from transforms.fs import CompressionTypes, FileSystems
from transforms.fs_match import FileSystemError

FILES = {
    "a.txt": b"a",
    "b.csv": b"bb",
    ".hidden": b"h",
    "x1.txt": b"x1",
    "x2.txt": b"x22",
    "xa.txt": b"xa",
    "[k].txt": b"k",
    "sub/c.txt": b"ccc",
    "sub/.h2": b"h2",
    "sub/deep/d.txt": b"dddd",
    "other/e.txt": b"e",
}

PATTERNS = [
    "*",
    "*.txt",
    "**",
    "**.txt",
    "**/*.txt",
    "sub/*",
    "sub/**",
    "sub/",
    "*/c.txt",
    "x?.txt",
    "x[12].txt",
    "x[!1].txt",
    "x[^1].txt",
    "[[]k].txt",
    "[k",
    ".*",
    "**/.*",
    "a.txt",
    "sub",
    "sub/deep",
    "missing.txt",
    "missing/*",
    "s*/d*/*",
]


def make_tree(root: Path) -> Path:
    for name, data in FILES.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    (root / "empty").mkdir()
    return root


@pytest.fixture
def tree(tmp_path) -> Path:
    return make_tree(tmp_path / "t")


def listing(results) -> list[tuple[str, list[tuple[str, int, float]]]]:
    return [
        (
            r.pattern,
            [(m.path, m.size_in_bytes, m.last_updated_in_seconds) for m in r.metadata_list],
        )
        for r in results
    ]


@pytest.mark.filterwarnings("ignore:Possible nested set:FutureWarning")  # "[[]k]": Beam's too
def test_match_equals_beams_for_each_pattern(tree):
    patterns = [os.path.join(str(tree), p) for p in PATTERNS]
    for pattern in patterns:
        assert listing(FileSystems.match([pattern])) == listing(Beam.match([pattern])), pattern
    # several at once, with limits; in os.walk's order, as Beam's
    limits = [2] * len(patterns)
    assert listing(FileSystems.match(patterns, limits)) == listing(Beam.match(patterns, limits))
    assert FileSystems.match([]) == Beam.match([]) == []


def test_match_reaches_hidden_files_and_stops_star_at_a_slash(tree):
    names = {
        os.path.relpath(m.path, tree) for m in FileSystems.match([f"{tree}/*"])[0].metadata_list
    }
    assert names == {n for n in FILES if "/" not in n}  # .hidden included, sub/... not
    deep = FileSystems.match([f"{tree}/**.txt"])[0].metadata_list
    assert {os.path.relpath(m.path, tree) for m in deep} == {n for n in FILES if ".txt" in n}
    (only,) = FileSystems.match([f"{tree}/sub/deep/d.txt"])[0].metadata_list
    assert (only.size_in_bytes, only.last_updated_in_seconds) == (4, os.stat(only.path).st_mtime)


def test_match_of_a_relative_pattern_equals_beams(tree, monkeypatch):
    monkeypatch.chdir(tree)
    for pattern in ["*.txt", "./*.txt", "sub/*", "a.txt", "./sub/**"]:
        assert listing(FileSystems.match([pattern])) == listing(Beam.match([pattern])), pattern


def test_module_match_is_the_sorted_paths(tree):
    assert fs.match(f"{tree}/x*.txt") == [f"{tree}/x1.txt", f"{tree}/x2.txt", f"{tree}/xa.txt"]


@pytest.mark.parametrize("path", ["/a/b/c.txt", "a/b", "rel", "/", "a/", "./x/../y", "~/z"])
def test_join_split_exists_scheme_equal_beams(tree, path):
    assert FileSystems.split(path) == Beam.split(path)
    assert FileSystems.join(path, "q", "r.txt") == Beam.join(path, "q", "r.txt")
    assert FileSystems.get_scheme(path) is Beam.get_scheme(path) is None
    for name in ["a.txt", "sub", "empty", "missing", "sub/deep/d.txt"]:
        local = os.path.join(str(tree), name)
        assert FileSystems.exists(local) == Beam.exists(local)
    for url in ["gs://b/x", " s3://b/x", "file:///x", "c+d.e://x"]:
        assert FileSystems.get_scheme(url) == Beam.get_scheme(url)


def test_compression_types_are_beams():
    for name in ["AUTO", "UNCOMPRESSED", "GZIP", "DEFLATE", "BZIP2", "ZSTD", "LZMA"]:
        assert getattr(CompressionTypes, name) == getattr(BeamCompressionTypes, name)
    for path in ["a.gz", "A.GZ", "a.bz2", "a.deflate", "a.zst", "a.ZSTD", "a.xz", "a.lzma",
                 "a.tfrecord", "a.gzip", "a", "gz"]:  # fmt: skip
        assert CompressionTypes.detect_compression_type(
            path
        ) == BeamCompressionTypes.detect_compression_type(path)


def test_open_reads_as_beam_does(tree):
    plain = tree / "a.txt"
    packed = tree / "p.GZ"
    packed.write_bytes(gzip.compress(b"one\ntwo\n"))
    with FileSystems.open(str(plain)) as ours, Beam.open(str(plain)) as beams:
        assert ours.read() == beams.read() == b"a"
    with FileSystems.open(str(packed)) as ours, Beam.open(str(packed)) as beams:
        assert ours.read() == beams.read() == b"one\ntwo\n"  # decompressed by the suffix
    raw = CompressionTypes.UNCOMPRESSED
    with FileSystems.open(str(packed), compression_type=raw) as ours:
        assert ours.read() == packed.read_bytes()
    gz = CompressionTypes.GZIP
    (tree / "g.bin").write_bytes(gzip.compress(b"z"))
    with FileSystems.open(str(tree / "g.bin"), compression_type=gz) as ours:
        assert ours.read() == b"z"
    with pytest.raises(FileNotFoundError), FileSystems.open(str(tree / "missing")):
        pass
    with pytest.raises(TypeError), FileSystems.open(str(plain), compression_type="snappy"):
        pass


@pytest.mark.parametrize("name", ["new/dir/out.bin", "out.gz", "deep/out.bz2", "z.zst"])
def test_create_writes_what_beams_writes(tmp_path, name):
    ours, beams = tmp_path / "ours" / name, tmp_path / "beam" / name
    for system, path in ((FileSystems, ours), (Beam, beams)):
        with system.create(str(path)) as f:  # the parent directories are made
            f.write(b"payload " * 100)
        with system.open(str(path)) as f:
            assert f.read() == b"payload " * 100
    assert ours.stat().st_size == beams.stat().st_size
    with FileSystems.open(str(ours)) as a, Beam.open(str(beams)) as b:
        assert a.read() == b.read()
    if name.endswith(".bin"):
        assert ours.read_bytes() == b"payload " * 100  # stored as it is


def test_rename_and_its_error_as_beams(tree):
    src = [str(tree / "a.txt"), str(tree / "b.csv")]
    dst = [str(tree / "a2.txt"), str(tree / "empty" / "b2.csv")]
    FileSystems.rename(src, dst)
    assert [os.path.exists(p) for p in src + dst] == [False, False, True, True]
    FileSystems.rename([], [])
    with pytest.raises(BeamIOError) as beams:
        Beam.rename(src[:1], dst[:1])
    with pytest.raises(FileSystemError) as ours:
        FileSystems.rename(src[:1], dst[:1])
    assert isinstance(ours.value, OSError)
    assert list(ours.value.exception_details) == list(beams.value.exception_details)
    assert str(ours.value).split(" with ")[0] == str(beams.value).split(" with ")[0]


def test_delete_files_directories_patterns_as_beams(tmp_path):
    ours, beams = make_tree(tmp_path / "ours"), make_tree(tmp_path / "beam")
    for target in ["a.txt", "sub", "x*.txt", "empty"]:
        FileSystems.delete([str(ours / target)])
        Beam.delete([str(beams / target)])
        assert sorted(str(p.relative_to(ours)) for p in ours.rglob("*")) == sorted(
            str(p.relative_to(beams)) for p in beams.rglob("*")
        ), target
    assert not (ours / "sub").exists() and (ours / "other" / "e.txt").exists()
    FileSystems.delete([])
    for missing in ["gone.txt", "gone/*"]:
        with pytest.raises(BeamIOError) as beams_error:
            Beam.delete([str(beams / missing)])
        with pytest.raises(FileSystemError) as ours_error:
            FileSystems.delete([str(ours / missing)])
        assert isinstance(ours_error.value, OSError)
        assert list(ours_error.value.exception_details) == [str(ours / missing)]
        assert str(ours_error.value).replace(str(ours), "") == str(beams_error.value).replace(
            str(beams), ""
        )
    with pytest.raises(OSError, match="instead of list"):
        FileSystems.delete(str(ours / "b.csv"))


def test_mkdirs_as_beams(tmp_path):
    FileSystems.mkdirs(str(tmp_path / "m" / "n"))
    assert (tmp_path / "m" / "n").is_dir()
    with pytest.raises(OSError) as beams:
        Beam.mkdirs(str(tmp_path / "m" / "n"))
    with pytest.raises(OSError) as ours:
        FileSystems.mkdirs(str(tmp_path / "m" / "n"))
    assert type(ours.value) is type(beams.value) and str(ours.value) == str(beams.value)


class _Recorder:
    """Stands in for Beam's FileSystems: records each call and answers with a marker."""

    def __init__(self) -> None:
        self.calls: list[tuple] = []

    def __getattr__(self, name: str):
        def call(*args):
            self.calls.append((name, *args))
            return f"beam.{name}"

        return call


def test_a_path_with_a_scheme_goes_to_beam(monkeypatch, tmp_path):
    beam = _Recorder()
    monkeypatch.setattr(fs, "_beam", lambda: beam)
    url = "gs://bucket/dir/f.txt"
    auto, raw = CompressionTypes.AUTO, CompressionTypes.UNCOMPRESSED
    answers = [
        FileSystems.join("gs://bucket", "dir", "f.txt"),
        FileSystems.split(url),
        FileSystems.exists(url),
        FileSystems.open(url),
        FileSystems.create(url, "text/plain", raw),
        FileSystems.match([url, "gs://bucket/*"]),
        FileSystems.mkdirs("gs://bucket/d"),
        fs.open_read(url),
    ]
    FileSystems.rename([url], ["gs://bucket/g.txt"])
    FileSystems.delete([url])
    assert answers == [
        "beam.join", "beam.split", "beam.exists", "beam.open", "beam.create", "beam.match",
        "beam.mkdirs", "beam.open",
    ]  # fmt: skip
    assert beam.calls == [
        ("join", "gs://bucket", "dir", "f.txt"),
        ("split", url),
        ("exists", url),
        ("open", url, "application/octet-stream", auto),
        ("create", url, "text/plain", raw),
        ("match", [url, "gs://bucket/*"], None),
        ("mkdirs", "gs://bucket/d"),
        ("open", url, "application/octet-stream", raw),
        ("rename", [url], ["gs://bucket/g.txt"]),
        ("delete", [url]),
    ]
    # a local file read or written compressed goes to Beam too; a plain one does not
    beam.calls.clear()
    packed, deflated, plain = (str(tmp_path / n) for n in ("x.gz", "y.txt", "z.txt"))
    Path(packed).write_bytes(gzip.compress(b"x"))
    assert FileSystems.open(packed) == "beam.open"
    assert FileSystems.create(deflated, compression_type=CompressionTypes.DEFLATE) == "beam.create"
    with FileSystems.create(plain) as f:
        f.write(b"z")
    with FileSystems.open(packed, compression_type=raw) as f:
        assert f.read() == Path(packed).read_bytes()
    assert beam.calls == [
        ("open", packed, "application/octet-stream", auto),
        ("create", deflated, "application/octet-stream", CompressionTypes.DEFLATE),
    ]


def test_an_azfs_path_without_the_azure_client_says_what_to_install(monkeypatch):
    """Without azure-storage-blob (the azure extra), a command on an azfs:// path stops with one
    line naming the extra."""
    from conftest import run_cli_captured

    for name in ("azure.storage.blob", "azure.core.exceptions"):
        monkeypatch.setitem(sys.modules, name, None)  # import fails, as when not installed
    result = run_cli_captured(
        ["plan", "--input", "azfs://account/container/in/*.parquet",
         "--output", "azfs://account/container/out"]
    )  # fmt: skip
    assert result.code == 2
    (line,) = [line for line in result.err.splitlines() if line.startswith("tfrecord-etl: error")]
    assert "azfs:// paths need the Azure client: pip install 'tfrecord-etl[azure]'" in line
    assert "Traceback" not in result.err


def test_beams_s3_calls_share_one_client_per_setting(monkeypatch):
    """Beam's S3 filesystem builds a boto3 client per call (0.25 s each); shared here per
    setting (transforms/fs_s3.py): the same options and environment give the same client,
    another endpoint or other credentials another one. No request is made."""
    from apache_beam.io.aws.clients.s3.boto3_client import Client
    from apache_beam.options.pipeline_options import PipelineOptions

    from transforms.fs_s3 import share_s3_clients

    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "a")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "b")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    share_s3_clients()
    one = PipelineOptions(["--s3_endpoint_url=http://127.0.0.1:1"])
    first = Client(options=one).client
    assert Client(options=PipelineOptions(["--s3_endpoint_url=http://127.0.0.1:1"])).client is first
    assert (
        Client(options=PipelineOptions(["--s3_endpoint_url=http://127.0.0.1:2"])).client
        is not first
    )
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "c")  # other credentials from the environment
    other = Client(options=one).client
    assert other is not first and other._request_signer._credentials.access_key == "c"
    assert first._request_signer._credentials.access_key == "a"
    assert first.meta.endpoint_url == "http://127.0.0.1:1"
