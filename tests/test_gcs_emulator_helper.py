"""The storage emulator helper's own changes to gcp-storage-emulator (tests/gcs_emulator.py).

In memory, no snapshot of every object's metadata is serialized after each write (it made an
upload cost time in proportion to the objects held); a file-backed store, which reads that
snapshot at its next start, still writes it. Both are checked on the emulator's `Storage` in
this process, with the helper's change undone after each test.
"""

from __future__ import annotations

import pytest
from gcp_storage_emulator.storage import Storage
from gcs_emulator import _no_metadata_snapshots

BUCKET = {"name": "b", "kind": "storage#bucket"}


@pytest.fixture
def no_snapshots(monkeypatch):
    monkeypatch.setattr(Storage, "_write_config_to_file", Storage._write_config_to_file)
    _no_metadata_snapshots()


def _fill(storage: Storage, names: list[str]) -> None:
    storage.create_bucket("b", dict(BUCKET))
    for name in names:
        storage.create_file("b", name, name.encode(), {"name": name, "size": str(len(name))})


def test_in_memory_writes_no_metadata_snapshot(no_snapshots, tmp_path):
    storage = Storage(use_memory_fs=True, data_dir=str(tmp_path))
    _fill(storage, ["x/1", "x/2", "y/3"])
    storage.delete_file("b", "x/2")
    assert not storage._store.exists_file(".meta")
    objects, _ = storage.get_file_list("b", prefix="x/")
    assert [o["name"] for o in objects] == ["x/1"]
    assert storage.get_file("b", "y/3") == b"y/3"


def test_a_file_backed_store_still_writes_it_and_reads_it_back(no_snapshots, tmp_path):
    _fill(Storage(use_memory_fs=False, data_dir=str(tmp_path)), ["x/1", "x/2"])
    again = Storage(use_memory_fs=False, data_dir=str(tmp_path))  # the next start
    objects, _ = again.get_file_list("b")
    assert [o["name"] for o in objects] == ["x/1", "x/2"]
    assert again.get_file("b", "x/2") == b"x/2"
