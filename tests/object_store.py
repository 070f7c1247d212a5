"""What the object-store tests (tests/test_gcs.py, tests/test_s3.py) share: the bucket, moving
files in, reading an output back through Beam's filesystems, the local run to compare with and
its fixtures (`splits`, `local_sample`: tests/conftest.py loads this module as a plugin, so
pytest finds them by name)."""

from __future__ import annotations

import collections
import json
import sys
import uuid
from typing import Protocol

import pytest
from conftest import SAMPLE_PARQUET, run_cli_captured

from transforms.fs import FileSystems
from transforms.write.tfrecord import read_records

BUCKET = "bucket"
ROWS = 30_000
BAD_CSV = "id,amount,name\n1,1.5,a\n2,7.5\n3,0,c\n4,2.5\n5,3.5,e\n"  # 2 short rows


class Emulator(Protocol):
    def objects(self, bucket: str, prefix: str) -> list[str]: ...


def upload(local, url: str) -> str:
    """Copy the local file `local` to `url` (an object); `url` back."""
    with open(local, "rb") as f, FileSystems.create(url) as g:
        g.write(f.read())
    return url


def manifest_of(output: str) -> dict:
    with FileSystems.open(f"{output}/manifest.json") as f:
        return json.loads(f.read().decode("utf-8"))


def records(output: str) -> collections.Counter:
    """Every record of every split the manifest lists, read through Beam's filesystem, as a
    multiset of bytes."""
    manifest = manifest_of(output)
    files = [f"{output.rstrip('/')}/{f}" for s in manifest["splits"].values() for f in s["files"]]
    return collections.Counter(r for f in files for r in read_records(f, sys.maxsize))


def objects(emulator: Emulator, output: str) -> set[str]:
    """Every object under the output (`scheme://bucket/prefix`), relative to it."""
    prefix = output.split("://", 1)[1].removeprefix(f"{BUCKET}/").rstrip("/") + "/"
    return {name.removeprefix(prefix) for name in emulator.objects(BUCKET, prefix)}


def listed(output: str) -> set[str]:
    """What the manifest says the output holds (with the manifest itself)."""
    manifest = manifest_of(output)
    shards = {f for s in manifest["splits"].values() for f in s["files"]}
    errors = {f"_errors/{f.rsplit('/', 1)[-1]}" for f in manifest["bad_rows"]["files"]}
    metadata = [*manifest.get("statistics", {}).values(), manifest["schema"]]
    transform = manifest.get("transform", {}).get("files", [])
    return {"manifest.json", *shards, *errors, *transform, *metadata}


def convert(*args) -> None:
    result = run_cli_captured(["convert", *map(str, args)])
    assert result.code == 0, result.err


def local_run(tmp_path, source, *args) -> str:
    """The same job into a new local directory: the clean run to compare with."""
    out = tmp_path / f"local-{uuid.uuid4().hex[:8]}"
    convert("--input", source, "--output", out, *args)
    return str(out)


@pytest.fixture(scope="module")
def splits(tmp_path_factory) -> list[str]:
    """Two splits, train and eval (a config key: there is no flag for it)."""
    config = tmp_path_factory.mktemp("config") / "splits.yaml"
    config.write_text("splits: {train: 8, eval: 2}\n", encoding="utf-8")
    return ["--config", str(config)]


@pytest.fixture(scope="module")
def local_sample(tmp_path_factory, splits) -> str:
    """The sample Parquet converted into a local directory: the clean run to compare with."""
    return local_run(tmp_path_factory.mktemp("local"), SAMPLE_PARQUET, *splits)
