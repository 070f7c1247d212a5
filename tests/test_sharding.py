"""Shard sizing (target MiB, even sizes without a shuffle), exact num_shards, the seeded global
shuffle: plain functions first, then whole runs that read every record back."""

from __future__ import annotations

import collections
import itertools
import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import pytest
import tensorflow as tf
from conftest import read_manifest, run_cli_captured

from transforms.encode.records import EncodedBatch, concat_batches, encode_table, gather_records
from transforms.encode.schema import plan_features
from transforms.read.work import WorkItem
from transforms.write.grouped.records import shard_ids, shuffle_keys
from transforms.write.sizing import csv_bytes_per_row, plan_shards, plan_tasks

SPLITS = "splits: {train: 80, eval: 10, test: 10}\n"


# ----------------------------------------------------------------------------- plain functions


def test_plan_tasks_makes_contiguous_tasks_of_about_equal_size():
    sizes = [5, 1, 1, 1, 9, 2, 2, 2, 2, 1]
    groups = plan_tasks(sizes, 4)  # 26 bytes: 6 tasks of 4 or more
    assert [i for g in groups for i in g] == list(range(10))  # contiguous, in order
    held = [sum(sizes[i] for i in g) for g in groups]
    assert groups == [[0], [1, 2, 3], [4], [5, 6], [7, 8, 9]]  # task 4 of 6: inside item 4
    assert held == [5, 3, 9, 4, 5]
    assert plan_tasks([1, 1, 1], 100) == [[0, 1, 2]]
    assert plan_tasks([], 10) == []
    assert plan_tasks([10] * 8, 20) == [[0, 1], [2, 3], [4, 5], [6, 7]]
    assert plan_tasks([10] * 9, 20) == [[0, 1], [2, 3], [4, 5, 6], [7, 8]]


def test_plan_shards_sizes_files_and_tasks():
    mib = 1 << 20
    work = [WorkItem(f"f{i}", 0, 0, 1000, 10 * mib) for i in range(40)]  # 40 x 10 MiB in
    one = plan_shards(work, 1.0, [("train", 1)], shard_mb=20)  # two files' worth per task
    assert one.target_bytes == 20 * mib and [len(t.items) for t in one.tasks] == [4] * 10
    three = plan_shards(work, 1.0, [("train", 80), ("eval", 10), ("test", 10)], shard_mb=10)
    # eval's 10% of a task would be one file at 100 MiB tasks (4 tasks): 8 tasks are kept
    assert [len(t.items) for t in three.tasks] == [5] * 8
    assert three.estimated_bytes == 400 * mib
    big = plan_shards(work * 10, 1.0, [("train", 80), ("eval", 10), ("test", 10)], shard_mb=10)
    assert [len(t.items) for t in big.tasks] == [10] * 40  # 100 MiB tasks: 1 eval file each
    small = plan_shards(work[:20], 1.0, [("train", 1)], shard_mb=128)  # 200 MiB in all
    assert small.target_bytes == 32 * mib  # a quarter of the target: 3 tasks run in parallel
    assert [len(t.items) for t in small.tasks] == [7, 6, 7]
    grouped = plan_shards(work, 0.5, [("train", 80), ("eval", 20)], shard_mb=10, grouped=True)
    assert len(grouped.tasks) == 40  # one per item: the write groups by shard anyway
    assert grouped.num_shards == {"train": 16, "eval": 4}
    fixed = plan_shards(work, 0.5, [("a", 1), ("b", 1)], shard_mb=10, num_shards=3, grouped=True)
    assert fixed.num_shards == {"a": 3, "b": 3}


def test_csv_bytes_per_row_counts_compressed_bytes(tmp_path):
    lines = "".join(f"{i},{'x' * (i % 50)}\n" for i in range(20000))
    plain = tmp_path / "t.csv"
    plain.write_text("id,s\n" + lines)
    assert csv_bytes_per_row(str(plain), True) == pytest.approx(plain.stat().st_size / 20000)
    packed = tmp_path / "t.csv.gz"
    pacsv.write_csv(pacsv.read_csv(plain), pa.CompressedOutputStream(str(packed), "gzip"))
    per_row = csv_bytes_per_row(str(packed), True)
    assert per_row == pytest.approx(packed.stat().st_size / 20000, rel=0.01)


def _framed(n: int, seed: int = 0, source: str = "t", first: int = 0) -> EncodedBatch:
    rng = np.random.default_rng(seed)
    table = pa.table({"id": pa.array(np.arange(first, first + n)), "x": pa.array(rng.random(n))})
    return encode_table(table, plan_features(table.schema), source, first, framed=True)[0]


def _ids(buffer: np.ndarray, offsets: np.ndarray) -> list[int]:
    out = []
    for a, b in itertools.pairwise(offsets):
        record = bytes(buffer[a + 12 : b - 4])
        out.append(tf.train.Example.FromString(record).features.feature["id"].int64_list.value[0])
    return out


def test_shard_ids_deal_round_robin_or_by_shuffle_key():
    batch = _framed(1000)
    counts = collections.Counter(shard_ids(batch, 7, None).tolist())
    assert sorted(counts) == list(range(7)) and max(counts.values()) - min(counts.values()) <= 1
    keyed = shard_ids(batch, 4, seed=3)
    keys = shuffle_keys(batch, 3)
    assert (keyed == ((keys >> np.uint64(62)).astype(np.int64))).all()  # top bits pick the range
    assert not (shuffle_keys(batch, 4) == keys).all()


def test_gather_records_reorders_whole_records():
    a, b = _framed(50, first=0), _framed(70, seed=1, source="u", first=50)
    joined = concat_batches([a, b])
    buffer, offsets = joined.buffer, joined.offsets
    assert _ids(buffer, offsets) == list(range(120))
    order = np.random.default_rng(0).permutation(120)
    out, out_off = gather_records(buffer, offsets, order.astype(np.int64))
    assert _ids(out, out_off) == order.tolist()


def test_gather_records_copies_every_byte_of_records_of_any_length():
    """A memcpy per record: empty records, records shorter than a word, long ones, repeats."""
    rng = np.random.default_rng(7)
    lengths = np.array([0, 1, 7, 8, 9, 0, 15, 300, 6_500, 3, 64, 0], np.int64)
    offsets = np.concatenate([[0], np.cumsum(lengths)])
    buffer = rng.integers(0, 256, int(offsets[-1]), dtype=np.uint8)
    order = np.array([11, 7, 0, 2, 8, 8, 1, 5, 3, 10, 4, 6, 9], np.int64)
    out, out_off = gather_records(buffer, offsets, order)
    want = [buffer[offsets[r] : offsets[r + 1]].tobytes() for r in order]
    assert out.tobytes() == b"".join(want)
    assert [out[out_off[i] : out_off[i + 1]].tobytes() for i in range(len(order))] == want
    with pytest.raises(IndexError):
        gather_records(buffer, offsets, np.array([12], np.int64))


# ----------------------------------------------------------------------------- whole runs


@pytest.fixture(scope="module")
def skewed(tmp_path_factory) -> Path:
    """Six Parquet files of very different sizes and row widths, small row groups."""
    root = tmp_path_factory.mktemp("skewed")
    rng = np.random.default_rng(0)
    start = 0
    for f, n in enumerate([1500, 4000, 1000, 2500, 6500, 500]):
        table = pa.table(
            {
                "id": pa.array(np.arange(start, start + n)),
                "x": pa.array(rng.random(n).astype(np.float32)),
                "s": pa.array(["abc" * (1 + (i % 7) * (f + 1)) for i in range(n)]),
                "v": pa.array(
                    list(rng.random((n, 8)).astype(np.float32)), pa.list_(pa.float32(), 8)
                ),
            }
        )
        pq.write_table(table, root / f"part{f}.parquet", row_group_size=800)
        start += n
    return root


def convert(out: Path, inputs: Path, *args, config: str = "") -> dict:
    argv = ["convert", "--input", str(inputs / "*.parquet"), "--output", out, *args]
    if config:
        (out.parent / f"{out.name}.yaml").write_text(config)
        argv += ["--config", out.parent / f"{out.name}.yaml"]
    result = run_cli_captured(argv)
    assert result.code == 0, result.err
    return read_manifest(out)


def file_ids(files: list[Path], compression_type: str) -> list[int]:
    """The `id` of every record of `files`, in order, read by TensorFlow (parsed in batches:
    one `tf.train.Example` at a time took about 16 s for 120,500 records)."""
    spec = {"id": tf.io.FixedLenFeature([], tf.int64)}
    records = tf.data.TFRecordDataset([str(f) for f in files], compression_type).batch(8192)
    return [i for batch in records for i in tf.io.parse_example(batch, spec)["id"].numpy().tolist()]


def split_ids(out: Path, manifest: dict, split: str) -> list[int]:
    files = [out / f for f in manifest["splits"][split]["files"]]
    return file_ids(files, manifest["tf_compression_type"])


def assert_even(out: Path, manifest: dict) -> None:
    for name, split in manifest["splits"].items():
        sizes = [(out / s["file"]).stat().st_size for s in split["shards"]]
        assert [s["bytes"] for s in split["shards"]] == sizes
        assert max(sizes) <= 3 * min(sizes), (name, sizes)


@pytest.mark.parametrize(
    "args",
    [
        ["--shard-mb", "0.04"],
        ["--shard-mb", "0.1", "--compression", "none"],
        ["--shard-mb", "0.03", "--batch-rows", "300", "--compression", "zlib"],
    ],
)
def test_sized_shards_are_even_and_hold_every_row(tmp_path, skewed, args):
    out = tmp_path / "out"
    manifest = convert(out, skewed, *args)
    split = manifest["splits"]["train"]
    assert len(split["files"]) >= 4
    assert_even(out, manifest)
    assert sum(s["rows"] for s in split["shards"]) == split["rows"] == 16000
    assert sorted(split_ids(out, manifest, "train")) == list(range(16000))
    total = sum(s["bytes"] for s in split["shards"])
    target = float(args[1]) * 2**20
    assert len(split["files"]) == pytest.approx(total / target, rel=0.5)
    assert not [p for p in out.iterdir() if p.name.startswith("beam-temp")]


def test_sized_shards_with_splits_are_even_per_split(tmp_path, skewed):
    out = tmp_path / "out"
    manifest = convert(out, skewed, "--shard-mb", "0.015", config=SPLITS)
    assert_even(out, manifest)
    assert sum(len(manifest["splits"][s]["files"]) for s in ("eval", "test")) >= 4
    ids = [i for s in ("train", "eval", "test") for i in split_ids(out, manifest, s)]
    assert sorted(ids) == list(range(16000))


def test_num_shards_gives_exactly_that_many_even_files_the_same_every_run(tmp_path, skewed):
    first = convert(tmp_path / "a", skewed, "--num-shards", "5")
    third = convert(tmp_path / "c", skewed, "--num-shards", "5")
    assert first["splits"]["train"]["files"] == [
        f"train-{i:05d}-of-00005.tfrecord.gz" for i in range(5)
    ]
    rows = [s["rows"] for s in first["splits"]["train"]["shards"]]
    assert max(rows) - min(rows) <= 20  # dealt round-robin from every batch
    for name in first["splits"]["train"]["files"]:  # deterministic file contents
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "c" / name).read_bytes()
    assert sorted(split_ids(tmp_path / "a", first, "train")) == list(range(16000))
    assert third["sharding"]["num_shards"] == 5


def test_more_shards_than_records_writes_empty_readable_shards(tmp_path):
    path = tmp_path / "in"
    path.mkdir()
    pq.write_table(pa.table({"id": [1, 2, 3]}), path / "t.parquet")
    manifest = convert(tmp_path / "out", path, "--num-shards", "8", "--compression", "zlib")
    assert len(manifest["splits"]["train"]["files"]) == 8
    assert sorted(split_ids(tmp_path / "out", manifest, "train")) == [1, 2, 3]


def test_seeded_shuffle_is_global_repeatable_and_loses_nothing(tmp_path, skewed):
    a = convert(tmp_path / "a", skewed, "--shard-mb", "0.1", "--shuffle", "--shuffle-seed", "7")
    b = convert(tmp_path / "b", skewed, "--shuffle", "--shuffle-seed", "7", "--num-shards", "3",
                "--batch-rows", "999")  # fmt: skip
    assert a["sharding"]["shuffle"] == {"splits": ["train"], "seed": 7}
    ids_a = split_ids(tmp_path / "a", a, "train")
    assert sorted(ids_a) == list(range(16000))
    assert len(a["splits"]["train"]["files"]) >= 3
    # The order depends on the records and the seed alone, not on batching or shard count.
    assert ids_a == split_ids(tmp_path / "b", b, "train")
    # Global: the first shard holds rows from all over the input, in no order.
    first = file_ids([tmp_path / "a" / a["splits"]["train"]["files"][0]], "GZIP")
    assert min(first) < 500 and max(first) > 15500
    assert abs(np.corrcoef(np.arange(len(ids_a)), np.array(ids_a))[0, 1]) < 0.05
    assert_even(tmp_path / "a", a)


def test_shuffle_only_the_train_split(tmp_path, skewed):
    config = SPLITS + "split_key: id\nshuffle: [train]\nshuffle_seed: 1\n"
    manifest = convert(tmp_path / "out", skewed, "--shard-mb", "0.05", config=config)
    train = split_ids(tmp_path / "out", manifest, "train")
    evals = split_ids(tmp_path / "out", manifest, "eval")
    assert train != sorted(train) and evals == sorted(evals)
    assert manifest["sharding"]["shuffle"]["splits"] == ["train"]


def test_shuffle_with_the_tfrecordio_sink_is_refused(tmp_path, skewed):
    result = run_cli_captured(
        ["convert", "--input", str(skewed / "*.parquet"), "--output", tmp_path / "o",
         "--shuffle", "--sink", "tfrecordio"]
    )  # fmt: skip
    assert result.code == 2 and "tfrecordio sink does not shuffle" in result.err


def test_csv_files_are_sized_too(tmp_path):
    src = tmp_path / "in"
    src.mkdir()
    for f in range(3):
        n = [4000, 20000, 2000][f]
        lines = "".join(f"{i + f * 100000},{'y' * (i % 40)},{i * 0.5}\n" for i in range(n))
        (src / f"t{f}.csv").write_text("id,s,x\n" + lines)
    out = tmp_path / "out"
    result = run_cli_captured(
        ["convert", "--input", str(src / "*.csv"), "--output", out, "--shard-mb", "0.05"]
    )
    assert result.code == 0, result.err
    manifest = read_manifest(out)
    assert len(manifest["splits"]["train"]["files"]) >= 4
    assert_even(out, manifest)
    assert manifest["rows"] == 26000
    json.dumps(manifest)


def test_num_shards_with_gzip_packs_large_pieces_before_the_shuffle(tmp_path):
    """Pieces of 256 KiB or more are spilled as gzip members (a third of the bytes); smaller
    ones are spilled framed and joined: the shards hold every record in origin order."""
    import apache_beam as beam
    from apache_beam.options.pipeline_options import PipelineOptions

    from transforms.write.beam import WriteShards
    from transforms.write.grouped.beam import ToShardsFn
    from transforms.write.grouped.records import PACK_MIN_BYTES

    big = [_framed(40_000, seed=k, source=f"f{k}", first=40_000 * k) for k in range(3)]
    small = [_framed(500, seed=9, source="g", first=0)]
    (tmp_path / "spill").mkdir()
    fn = ToShardsFn(2, None, str(tmp_path / "spill"), "s", "gzip")
    fn.setup()
    fn.start_bundle()
    for batch in (big[0], small[0]):
        assert fn.process(batch) is None  # the references leave with the bundle
    refs = [w.value for w in fn.finish_bundle()]
    assert big[0].buffer.nbytes // 2 >= PACK_MIN_BYTES > small[0].buffer.nbytes
    assert [(shard, ref.packed) for shard, ref in refs] == [
        (0, True),
        (1, True),
        (0, False),
        (1, False),
    ]
    assert sum(ref.rows for _, ref in refs) == 40_500
    prefix = str(tmp_path / "s")
    with beam.Pipeline(options=PipelineOptions(["--runner=FnApiRunner"])) as p:
        _ = p | beam.Create(big + small) | WriteShards(prefix, num_shards=2, compression="gzip")
    files = sorted(tmp_path.glob("s-*"))
    assert [f.name for f in files] == [
        "s-00000-of-00002.tfrecord.gz",
        "s-00001-of-00002.tfrecord.gz",
    ]
    ids = [file_ids([f], "GZIP") for f in files]
    assert sorted(ids[0] + ids[1]) == sorted([*range(120_000), *range(500)])
    for shard in ids:  # origin order: file f0, f1, f2, then g (sorted by source name)
        assert shard == sorted(shard[: len(shard) - 250]) + shard[len(shard) - 250 :]
