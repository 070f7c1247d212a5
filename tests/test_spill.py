"""The spilling grouped write: records cross the GroupByKey as references to spill files, a shard
is sorted a group of buckets at a time, and the shards hold the same bytes as sorting each whole
shard by key (stable, pieces in origin order) and cutting it into blocks."""

from __future__ import annotations

import itertools
import pickle
import zlib
from pathlib import Path

import apache_beam as beam
import numpy as np
import pyarrow as pa
import pytest
from apache_beam.options.pipeline_options import PipelineOptions

from transforms.encode.records import EncodedBatch, concat_batches, encode_table, gather_records
from transforms.encode.schema import plan_features
from transforms.write.beam import WriteShards
from transforms.write.compression import file_suffix, gzip_compressor
from transforms.write.grouped import beam as grouped_beam
from transforms.write.grouped import pieces, spill
from transforms.write.grouped import records as grouped
from transforms.write.grouped.beam import ToShardsFn
from transforms.write.grouped.records import (
    BlockRuns,
    bucket_ids,
    framed_offsets,
    shard_ids,
    shuffle_keys,
)
from transforms.write.grouped.spill import bucket_groups, buckets_per_shard


def _framed(
    n: int, seed: int = 0, source: str = "t", first: int = 0, width: int = 1
) -> EncodedBatch:
    rng = np.random.default_rng(seed)
    table = pa.table(
        {
            "id": pa.array(np.arange(first, first + n)),
            "x": pa.array(rng.random(n)),
            "s": pa.array(["v" * int(k) for k in rng.integers(0, 40 * width, n)]),
        }
    )
    return encode_table(table, plan_features(table.schema), source, first, framed=True)[0]


def _old_blocks(buffer: np.ndarray, offsets: np.ndarray, block: int) -> list[bytes]:
    """The blocks the grouped write cut a whole shard into (the reference)."""
    total = int(offsets[-1])
    cuts = np.searchsorted(offsets, np.arange(block, total, block), side="left")
    bounds = [0, *sorted(set(cuts.tolist()) - {0, len(offsets) - 1}), len(offsets) - 1]
    return [bytes(buffer[offsets[a] : offsets[b]]) for a, b in itertools.pairwise(bounds)]


class _Blocks:
    """A BlockFile stand-in that keeps each block."""

    def __init__(self) -> None:
        self.blocks: list[bytes] = []
        self.rows = 0

    def write(self, buffer: np.ndarray, rows: int) -> None:
        self.blocks.append(bytes(buffer))
        self.rows += rows


@pytest.mark.parametrize("block", [1, 997, 4096, 10**9])
def test_block_runs_cut_as_the_whole_run_would_be_cut(block):
    batch = concat_batches([_framed(300, seed=k, first=300 * k) for k in range(4)])
    expected = _old_blocks(batch.buffer, batch.offsets, block)
    for chunks in ([1200], [1, 299, 5, 895], [7] * 171 + [3]):
        sink = _Blocks()
        runs = BlockRuns(sink, block)  # type: ignore[arg-type]
        start = 0
        for size in chunks:
            part = batch.offsets[start : start + size + 1]
            runs.add(batch.buffer[: part[-1]], part)  # offsets need not start at 0
            start += size
        runs.end_run()
        assert sink.blocks == expected and sink.rows == 1200


def test_framed_offsets_find_every_frame_and_refuse_a_cut_one():
    batch = _framed(50)
    assert framed_offsets(batch.buffer).tolist() == batch.offsets.tolist()
    assert framed_offsets(np.empty(0, np.uint8)).tolist() == [0]
    with pytest.raises(ValueError, match="whole TFRecord frames"):
        framed_offsets(batch.buffer[:-3])
    # told how many records there are: one walk, the same offsets, a wrong count refused
    assert framed_offsets(batch.buffer, 50).tolist() == batch.offsets.tolist()
    assert framed_offsets(np.empty(0, np.uint8), 0).tolist() == [0]
    for wrong in (0, 49, 51):
        with pytest.raises(ValueError, match=f"hold {wrong} whole TFRecord frames"):
            framed_offsets(batch.buffer, wrong)
    with pytest.raises(ValueError, match="hold 50 whole TFRecord frames"):
        framed_offsets(batch.buffer[:-3], 50)


def test_buckets_lie_in_the_shard_of_their_key_and_follow_key_order():
    batch = _framed(5000)
    keys = shuffle_keys(batch, 11)
    for shards, k in [(1, 64), (3, 64), (7, 5), (16, 1000)]:
        ids = bucket_ids(keys, shards, k)
        assert (ids // k == shard_ids(batch, shards, 11)).all()
        order = np.argsort(keys)
        assert (np.diff(ids[order]) >= 0).all()  # key order never goes back a bucket
        assert ids.min() >= 0 and ids.max() < shards * k


def test_bucket_groups_and_buckets_per_shard():
    sizes = np.array([5, 0, 5, 11, 2, 2, 0, 9, 0])
    assert bucket_groups(sizes, 10) == [(0, 3), (3, 4), (4, 7), (7, 9)]
    assert bucket_groups(np.zeros(4, np.int64), 10) == []
    assert buckets_per_shard(0, 4) == spill.DEFAULT_BUCKETS
    gib = 1 << 30  # stored bytes; four times that framed
    assert buckets_per_shard(10 * gib, 1) == 40 * gib // spill.BUCKET_BYTES
    assert buckets_per_shard(10**15, 1) == spill.MAX_BUCKETS


def _run_to_shards(batches: list[EncodedBatch], tmp: Path, **kw) -> list[tuple[int, object]]:
    fn = ToShardsFn(temp_dir=str(tmp), split="s", **kw)
    fn.setup()
    fn.start_bundle()
    for batch in batches:
        fn.process(batch)
    return [w.value for w in fn.finish_bundle()]


def test_only_small_references_cross_the_group_by_key(tmp_path):
    """What ToShards emits does not grow with the batch: the records stay in spill files."""
    small, large = _framed(200, seed=1), _framed(20_000, seed=2, width=4)
    for kw in ({"num_shards": 3, "seed": 5}, {"num_shards": 3, "seed": None}):
        sizes = []
        for batch in (small, large):
            refs = _run_to_shards([batch], tmp_path, **kw)
            assert sorted(shard for shard, _ in refs) == [0, 1, 2]
            sizes.append(max(len(pickle.dumps(ref)) for _, ref in refs))
        assert sizes[1] <= sizes[0] + 64 and sizes[1] < 16 * spill.DEFAULT_BUCKETS, sizes
        assert large.buffer.nbytes > 500 * sizes[1]


def _reference_shards(batches, shards, seed, key_fn=shuffle_keys) -> list[np.ndarray]:
    """Each shard as the write made it before spilling: the pieces in origin order, joined,
    sorted by key (stable)."""
    ordered = sorted(batches, key=lambda b: (b.source, b.first_row, b.task))
    merged = concat_batches(ordered)
    keys = key_fn(merged, seed)
    ids = bucket_ids(keys, shards, 1)
    out = []
    for s in range(shards):
        idx = np.flatnonzero(ids == s)
        order = idx[np.argsort(keys[idx], kind="stable")]
        out.append(gather_records(merged.buffer, merged.offsets, order.astype(np.int64)))
    return out


def _expected_file(buffer: np.ndarray, offsets: np.ndarray, compression: str) -> bytes:
    blocks = _old_blocks(buffer, offsets, grouped.BLOCK_BYTES)
    if compression == "gzip":
        compress = gzip_compressor(None, "isal")
        return b"".join(compress(memoryview(b)) for b in blocks)
    if compression == "zlib":
        deflate = zlib.compressobj(6)
        data = b"".join(deflate.compress(b) + deflate.flush(zlib.Z_SYNC_FLUSH) for b in blocks)
        return data + deflate.flush()
    return b"".join(blocks)


def _write(batches, prefix: str, temp_dir: str | None = None, **kw) -> None:
    with beam.Pipeline(options=PipelineOptions(["--runner=FnApiRunner"])) as p:
        _ = p | beam.Create(batches) | WriteShards(prefix, temp_dir=temp_dir, **kw)


@pytest.mark.parametrize("compression", ["gzip", "zlib"])
def test_shuffle_in_bucket_groups_gives_the_bytes_of_a_whole_shard_sort(
    tmp_path, monkeypatch, compression
):
    """Groups of a few buckets (a 64 KiB sort limit, 8 KiB blocks) write the same files as
    one sort of each whole shard; leftover spill files of a failed attempt are deleted."""
    monkeypatch.setattr(spill, "SORT_BYTES", 64 << 10)
    monkeypatch.setattr(grouped, "BLOCK_BYTES", 8 << 10)
    batches = [_framed(700 + 50 * k, seed=k, source=f"f{k % 3}", first=k) for k in range(8)]
    shards = 3
    temp = tmp_path / "temp"
    temp.mkdir()
    (temp / "train-spill-0123").write_bytes(b"an attempt that failed")
    _write(batches, str(tmp_path / "s"), str(temp), num_shards=shards, shuffle_seed=4,
           compression=compression)  # fmt: skip
    expected = _reference_shards(batches, shards, 4)
    suffix = file_suffix(compression)
    for s, (buffer, offsets) in enumerate(expected):
        got = (tmp_path / f"s-{s:05d}-of-{shards:05d}{suffix}").read_bytes()
        assert got == _expected_file(buffer, offsets, compression)
        assert buffer.nbytes > 2 * (64 << 10)  # sorted in three groups or more
    assert list(temp.iterdir()) == []  # spill files, used and failed, gone


def test_equal_keys_keep_the_origin_order(tmp_path, monkeypatch):
    """A coarse key (many ties): records of equal key stay in the order of their batch's origin
    and their place in it, whatever order the batches arrive in."""

    def coarse(batch: EncodedBatch, seed: int) -> np.ndarray:
        return (shuffle_keys(batch, seed) >> np.uint64(61)) << np.uint64(61)

    monkeypatch.setattr(pieces, "shuffle_keys", coarse)
    monkeypatch.setattr(spill, "SORT_BYTES", 16 << 10)
    batches = [_framed(300, seed=k, source=f"f{(5 * k) % 7}", first=k) for k in range(7)]
    _write(batches, str(tmp_path / "s"), num_shards=2, shuffle_seed=1, compression="none")
    for s, (buffer, _) in enumerate(_reference_shards(batches, 2, 1, coarse)):
        assert (tmp_path / f"s-{s:05d}-of-00002.tfrecord").read_bytes() == bytes(buffer)


def test_num_shards_without_seed_writes_pieces_in_origin_order(tmp_path, monkeypatch):
    monkeypatch.setattr(grouped, "BLOCK_BYTES", 4 << 10)
    batches = [_framed(400, seed=k, source=f"f{(3 * k) % 5}", first=k) for k in range(5)]
    _write(batches, str(tmp_path / "s"), num_shards=2, compression="zlib")
    ordered = sorted(batches, key=lambda b: (b.source, b.first_row, b.task))
    for s in range(2):
        pieces = []
        for b in ordered:
            idx = np.flatnonzero(shard_ids(b, 2, None) == s)
            pieces.append(gather_records(b.buffer, b.offsets, idx.astype(np.int64)))
        joined = concat_batches([EncodedBatch(buf, off, True) for buf, off in pieces])
        got = (tmp_path / f"s-{s:05d}-of-00002{file_suffix('zlib')}").read_bytes()
        assert got == _expected_file(joined.buffer, joined.offsets, "zlib")


def test_a_missing_spill_file_is_named(tmp_path):
    refs = _run_to_shards([_framed(100)], tmp_path, num_shards=1, seed=2)
    (path,) = {ref.path for _, ref in refs}
    Path(path).unlink()
    fn = grouped_beam.WriteShardFn("s", str(tmp_path), "none", None, "isal", 2)
    fn.setup()
    with pytest.raises(FileNotFoundError, match="spill file of the grouped write is missing"):
        list(fn.process((0, [ref for _, ref in refs])))


@pytest.mark.parametrize(
    ("compression", "member_bytes", "block", "sort", "limit"),
    [
        ("gzip", None, 8 << 10, 16 << 10, 24 << 10),
        ("gzip", None, 8 << 10, 4 << 10, 1),  # a slice per group, groups smaller than a block
        ("gzip", 1 << 10, 8 << 10, 16 << 10, 40 << 10),  # an indexed output's small members
        ("gzip", None, 64 << 10, 16 << 10, 20 << 10),  # blocks that cross several slices
        ("none", None, 8 << 10, 16 << 10, 24 << 10),
        ("gzip", None, 8 << 10, 16 << 10, 1 << 30),  # one slice: the whole shard
    ],
)
def test_a_shard_written_in_slices_is_the_shard_written_whole(
    tmp_path, monkeypatch, compression, member_bytes, block, sort, limit
):
    """plan_slices + write_slice (each slice on its own, in any order) + assemble_shard give
    the bytes write_shard gives, and tell every record once."""
    from transforms.write.files import block_compressor
    from transforms.write.grouped import slices as sliced

    monkeypatch.setattr(grouped, "BLOCK_BYTES", block)
    monkeypatch.setattr(spill, "SORT_BYTES", sort)
    batches = [_framed(500 + 40 * k, seed=k, source=f"f{k % 3}", first=k) for k in range(9)]
    spiller = pieces.ShardSpiller(3, 11, str(tmp_path), "s", compression, buckets=40)
    refs = [ref for batch in batches for ref in spiller.spill(batch)]
    spiller.close()
    compress = block_compressor(compression, None, "isal", member_bytes)
    for shard in range(3):
        mine = [ref for s, ref in refs if s == shard]
        whole = pieces.write_shard(shard, mine, "s", str(tmp_path), compression, compress, 11)
        plan = sliced.plan_slices("s", shard, mine[::-1], limit)  # any order of the refs
        assert [s.index for s in plan] == list(range(len(plan)))
        if limit == 1:
            assert len(plan) > 10
        told: list[tuple[int, int]] = []
        tell = told.append
        outs = {s.index: sliced.write_slice(s, str(tmp_path), compression, compress,
                                            lambda r, b, tell=tell: tell((r, b)))
                for s in reversed(plan)}  # fmt: skip
        part = sliced.assemble_shard("s", shard, [outs[i] for i in range(len(plan))],
                                     str(tmp_path), compression, compress,
                                     lambda r, b, tell=tell: tell((r, b)))  # fmt: skip
        got = Path(part.temp_path).read_bytes()
        assert got == Path(whole.temp_path).read_bytes()
        assert (part.rows, part.bytes) == (whole.rows, whole.bytes) and whole.rows > 0
        assert sum(r for r, _ in told) == whole.rows and sum(b for _, b in told) == whole.bytes


def test_a_shard_with_no_record_has_no_slice():
    from transforms.write.grouped import slices as sliced

    assert sliced.plan_slices("s", 0, []) == []
    assert not sliced.can_slice("zlib") and sliced.can_slice("gzip") and sliced.can_slice("none")
