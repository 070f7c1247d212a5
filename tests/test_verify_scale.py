"""`verify` at scale: the block path (frames and records checked by compiled walks, spans of
many records) against the record-by-record path it replaces, on an output of several spans with
faults in the middle: the same findings, in the same order, and the same counts."""

from __future__ import annotations

import shutil
import struct

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import tensorflow as tf
from conftest import run_cli_captured

from pipeline.output.manifest import read_manifest
from pipeline.verify import files as verify_files
from pipeline.verify.frames import frame_blocks
from pipeline.verify.records import RecordChecker
from pipeline.verify.report import Findings
from pipeline.verify.run import verify_output
from pipeline.verify.scan import feature_table, scan_records
from transforms.write import tfrecord

ROWS = 3 * verify_files._SPAN + 1000


@pytest.fixture(scope="module")
def output(tmp_path_factory):
    root = tmp_path_factory.mktemp("scale")
    ids = np.arange(ROWS)
    table = pa.table(
        {
            "id": pa.array(ids),
            "name": pa.array([f"n{i % 97}" for i in ids]),
            "x": pa.array(ids / 3.0, pa.float32()),
            "pair": pa.FixedSizeListArray.from_arrays(pa.array(np.repeat(ids, 2)), 2),
            "maybe": pa.array([None if i % 5 == 0 else i for i in ids]),
        }
    )
    pq.write_table(table, root / "in.parquet")
    out = root / "out"
    args = ["convert", "--input", root / "in.parquet", "--output", out, "--compression", "none"]
    result = run_cli_captured([*args, "--shard-mb", "64"])
    assert result.code == 0, result.err
    return out


def _frame(data: bytes) -> bytes:
    length = struct.pack("<Q", len(data))
    head = struct.pack("<I", tfrecord.masked_crc(length))
    return length + head + data + struct.pack("<I", tfrecord.masked_crc(data))


def _example(features: dict) -> bytes:
    def feature(v):
        if isinstance(v, bytes):
            return tf.train.Feature(bytes_list=tf.train.BytesList(value=[v]))
        return tf.train.Feature(int64_list=tf.train.Int64List(value=v))

    return tf.train.Example(
        features=tf.train.Features(feature={k: feature(v) for k, v in features.items()})
    ).SerializeToString()


def _corrupt(out, tmp_path):
    """A copy of `out` with, in its one shard: a bad data crc, a record with an unknown
    feature, one missing a required feature, one with a fixed-length feature of another
    length, and a record cut short at the end."""
    copy = tmp_path / "out"
    shutil.copytree(out, copy)
    (shard,) = sorted(copy.glob("train-*"))
    frames = [(index, data) for index, _, data, _ in tfrecord.read_frames(str(shard), "none")]
    raw = [_frame(data) for _, data in frames]
    flipped = bytearray(raw[40_000])
    flipped[20] ^= 0xFF
    raw[40_000] = bytes(flipped)
    base = tf.train.Example.FromString(frames[50_000][1])
    base.features.feature["unlisted"].int64_list.value.append(1)
    raw[50_000] = _frame(base.SerializeToString())
    raw[70_000] = _frame(_example({"name": b"n1", "x": []}))
    odd = tf.train.Example.FromString(frames[71_000][1])
    odd.features.feature["pair"].int64_list.value.append(3)  # 3 values, shape [2]
    raw[71_000] = _frame(odd.SerializeToString())
    shard.write_bytes(b"".join(raw) + raw[-1][:30])
    return copy, shard


def _record_by_record(monkeypatch) -> None:
    """Every span through the exact path (the parse in batches of BATCH)."""
    monkeypatch.setattr(RecordChecker, "check_block", lambda self, path, pieces: False)


def _report(out) -> tuple:
    report = verify_output(str(out))
    kept = [f.to_json() for f in report.findings.kept]
    return kept, dict(report.findings.counts), report.checked


def test_a_clean_output_of_several_spans(output, monkeypatch):
    fast = _report(output)
    assert fast == ([], {}, fast[2])
    assert fast[2]["records"]["read"] == ROWS
    _record_by_record(monkeypatch)
    assert _report(output) == fast


def test_faults_in_the_middle_of_spans_as_record_by_record(output, tmp_path, monkeypatch):
    out, shard = _corrupt(output, tmp_path)
    fast = _report(out)
    counts = fast[1]
    assert counts == {"crc": 1, "framing": 1, "parse": 2, "features": 1, "nulls": 3, "counts": 1}
    messages = [f["message"] for f in fast[0]]
    assert messages[0].startswith(f"{shard}: record 40000 (byte ")
    assert any(m.startswith(f"{shard}: record 70000: does not parse") for m in messages)
    assert any(m.startswith(f"{shard}: record 71000: does not parse") for m in messages)
    assert (
        f"feature 'unlisted' is in 1 record(s) but not in the manifest (first: {shard}: "
        "record 50000)" in messages
    )
    _record_by_record(monkeypatch)
    assert _report(out) == fast


def test_frame_blocks_as_the_frame_reader(output, tmp_path):
    _, shard = _corrupt(output, tmp_path)
    expected = list(tfrecord.read_frames(str(shard), "none"))
    intact, faults = [], []
    for block in frame_blocks(str(shard), "none"):
        faults += [(before, f.check, f.message) for before, f in block.faults]
        intact += [
            (int(i), block.data[s:e])
            for i, s, e in zip(block.indices, block.starts, block.ends, strict=True)
        ]
    assert intact == [(i, d) for i, _, d, fault in expected if fault is None]
    assert [(c, m) for _, c, m in faults] == [f for *_, f in expected if f is not None]
    assert [b for b, _, _ in faults] == [40_000, len(intact)]


def test_records_the_scan_clears_pass_the_exact_checks(output):
    """Random byte changes: a record the scan calls plain gives no finding in the exact path,
    and the features it holds are the ones protobuf sees."""
    manifest = read_manifest(str(output))
    (shard,) = sorted(output.glob("train-*"))
    records = [d for _, d in zip(range(400), tfrecord.read_records(str(shard), 400), strict=False)]
    rng = np.random.default_rng(7)
    mutated = []
    for data in records:
        data = bytearray(data)
        for _ in range(rng.integers(0, 3)):
            data[rng.integers(0, len(data))] = rng.integers(0, 256)
        if rng.random() < 0.2:
            data = data[: rng.integers(0, len(data) + 1)]
        mutated.append(bytes(data))
    table = feature_table(manifest.features)
    buf = np.frombuffer(b"".join(mutated), np.uint8)
    ends = np.cumsum([len(r) for r in mutated])
    starts = ends - [len(r) for r in mutated]
    plain, present = scan_records(
        buf, starts, ends, table.names, table.name_offsets, table.slots, table.kinds,
        table.fixed, table.rule, table.rule_k, table.bytes_rule, table.value_bytes,
    )  # fmt: skip
    assert 0 < plain.sum() < len(mutated)
    names = [f.name for f in manifest.features]
    for i in np.flatnonzero(plain):
        findings = Findings()
        checker = RecordChecker(manifest.features, findings)
        checker.check("f", [mutated[i]], [0])
        assert not findings.kept, findings.kept
        keys = set(tf.train.Example.FromString(mutated[i]).features.feature)
        assert {n for j, n in enumerate(names) if present[i, j]} == keys
