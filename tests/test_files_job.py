"""A dataset of files end to end: a CSV of image references with labels, the images made here
with Pillow (PNG and JPEG, gray, RGB and RGBA, of many sizes), some corrupt, some missing, some
larger than `max_file_bytes`, some references null; the job on both engines, read back.

- kept bytes (`image: {}`): each good row's record holds the file's exact bytes, its height,
  width and channels; `load_dataset(decode_images=True)` gives the source pixels (PNG: equal to
  the array the file was made from; JPEG: the file's own decode) as a ragged batch; every bad
  row is in `_errors/` with its reason; in-process and Beam write the same records; `verify
  --source` passes; the report shows each split's first images as thumbnails.
- resized (`resize: [16, 16], format: jpeg, channels: 3`): a dense uint8 [batch, 16, 16, 3],
  the JPEG round trip of Pillow's resize of the source (a JPEG source that shrinks is decoded
  at a reduced scale first: within JPEG_DRAFT of it); TFDS's `builder_from_directory`
  decodes the same images.
- Beam on gs:// (the GCS emulator on 127.0.0.1): the CSV and its images uploaded, relative
  references resolved on gs://, the records equal to a local run's.
- audio and plain documents: sample rate, channels and duration; bytes kept as they are.
"""

from __future__ import annotations

import base64
import collections
import io
import json
import os
import re
from pathlib import Path

import numpy as np
import pytest
import soundfile
import tensorflow as tf
import tensorflow_datasets as tfds
from conftest import read_manifest, run_cli_captured
from PIL import Image

from pipeline.reader import load_dataset

GOOD = 240
MAX_FILE_BYTES = 30_000
KEEP = {"image": {"image": {}, "max_file_bytes": MAX_FILE_BYTES}}
RESIZED = {
    "image": {
        "image": {"resize": [16, 16], "fit": "stretch", "format": "jpeg", "quality": 95,
                  "channels": 3},
        "max_file_bytes": MAX_FILE_BYTES,
    }
}  # fmt: skip
JPEG_DRAFT = 6.0  # mean absolute difference per channel value (of 255), a drafted JPEG


def _smooth(seed: int, height: int, width: int, channels: int) -> np.ndarray:
    """Pixels JPEG keeps well: a 3x3 random image blown up (what photos are like)."""
    small = np.random.default_rng(seed).integers(0, 256, (3, 3, 4), dtype=np.uint8)
    big = np.asarray(Image.fromarray(small, "RGBA").resize((width, height), Image.BILINEAR))
    return big[..., :channels] if channels > 1 else big[..., 0]


def _save(pixels: np.ndarray, fmt: str, quality: int = 92) -> bytes:
    out = io.BytesIO()
    Image.fromarray(pixels).save(out, format=fmt, **({"quality": quality} if fmt == "JPEG" else {}))
    return out.getvalue()


class Dataset:
    """The images on disk and the CSV that refers to them; what each row must give."""

    def __init__(self, root: Path) -> None:
        self.root = root
        (root / "images" / "a").mkdir(parents=True)
        (root / "images" / "b").mkdir()
        self.pixels: dict[int, np.ndarray] = {}  # id -> the array a good file was made from
        self.files: dict[int, bytes] = {}  # id -> a good file's bytes
        self.bad: dict[int, str] = {}  # id -> the reason its row is bad
        self.nulls: set[int] = set()
        rows: list[tuple[int, str | None]] = []
        for i in range(GOOD):
            kind = ("RGB", "RGB", "RGB", "L", "RGBA", "JPEG", "JPEG", "RGB")[i % 8]
            height, width = 8 + (i * 7) % 33, 8 + (i * 11) % 29
            channels = {"L": 1, "RGBA": 4}.get(kind, 3)
            pixels = _smooth(i, height, width, channels)
            data = _save(pixels, "JPEG" if kind == "JPEG" else "PNG")
            name = f"images/{'ab'[i % 2]}/{i}.{'jpg' if kind == 'JPEG' else 'png'}"
            (root / name).write_bytes(data)
            self.pixels[i], self.files[i] = pixels, data
            rows.append((i, str(root / name) if i % 10 == 0 else name))  # some absolute
        next_id = GOOD
        for k in range(10):
            self.bad[next_id] = "file not found"
            rows.append((next_id, f"images/a/missing-{k}.png"))
            next_id += 1
        for k in range(4):
            whole = _save(_smooth(1000 + k, 40, 40, 3), "PNG")
            (root / f"images/b/cut-{k}.png").write_bytes(whole[: len(whole) // 2])
            (root / f"images/b/junk-{k}.jpg").write_bytes(b"<svg onload=alert(1)>" * (k + 1))
            self.bad[next_id] = "corrupt PNG image"
            rows.append((next_id, f"images/b/cut-{k}.png"))
            self.bad[next_id + 1] = "not an image Pillow can read"
            rows.append((next_id + 1, f"images/b/junk-{k}.jpg"))
            next_id += 2
        for k in range(5):
            noise = np.random.default_rng(k).integers(0, 256, (120, 120, 3), dtype=np.uint8)
            (root / f"images/a/huge-{k}.png").write_bytes(_save(noise, "PNG"))
            self.bad[next_id] = f"larger than max_file_bytes {MAX_FILE_BYTES:,}"
            rows.append((next_id, f"images/a/huge-{k}.png"))
            next_id += 1
        for _ in range(3):
            self.nulls.add(next_id)
            rows.append((next_id, None))
            next_id += 1
        order = np.random.default_rng(7).permutation(len(rows))
        self.rows = [rows[j] for j in order]
        lines = ["id,image,label"] + [
            f"{i},{'' if ref is None else ref},{i % 5}" for i, ref in self.rows
        ]
        self.csv = root / "images.csv"
        self.csv.write_text("\n".join(lines) + "\n", encoding="utf-8")

    def line_of(self, i: int) -> int:
        """The CSV row (from 0, the header not counted) of id `i`."""
        return next(n for n, (j, _) in enumerate(self.rows) if j == i)


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Dataset:
    return Dataset(tmp_path_factory.mktemp("files"))


def convert(data: Dataset, out: Path, files: dict, *args: str, config: dict | None = None):
    path = out.with_suffix(".yaml")
    body = {"files": files, "max_bad_rows": 100, "splits": {"train": 4, "eval": 1}}
    path.write_text(json.dumps({**body, **(config or {})}), encoding="utf-8")  # JSON is YAML
    result = run_cli_captured(
        ["convert", "--input", str(data.csv), "--output", str(out), "--config", str(path), *args]
    )
    assert result.code == 0, result.err
    return read_manifest(out)


@pytest.fixture(scope="module")
def kept(data, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("kept") / "out"
    convert(data, out, KEEP, "--engine", "in-process", "--workers", "2")
    return out


@pytest.fixture(scope="module")
def resized(data, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("resized") / "out"
    convert(data, out, RESIZED, "--engine", "in-process", "--workers", "2")
    return out


def batches(out: Path, **kwargs) -> list[dict]:
    """Every record of every split, one dict per row, `decode_images` pixels as numpy."""
    manifest = read_manifest(out)
    rows = []
    for split in manifest["splits"]:
        for batch in load_dataset(str(out), split, batch_size=64, decode_images=True, **kwargs):
            n = int(batch["id"].shape[0])
            for k in range(n):
                rows.append({**{name: value[k] for name, value in batch.items()}, "split": split})
    return rows


def records(out: Path) -> list[bytes]:
    """Every record of every split, in the manifest's order."""
    manifest = read_manifest(out)
    files = [str(out / f) for s in manifest["splits"].values() for f in s["files"]]
    dataset = tf.data.TFRecordDataset(files, compression_type=manifest["tf_compression_type"])
    return list(dataset.as_numpy_iterator())


def test_manifest_and_bad_rows(data, kept):
    manifest = read_manifest(kept)
    good = GOOD + len(data.nulls)
    assert manifest["rows"] == good and manifest["bad_rows"]["count"] == len(data.bad)
    (image,) = [f for f in manifest["features"] if f["name"] == "image"]
    assert image["image"] == {"formats": ["jpeg", "png"], "shape": [-1, -1, -1]}
    assert (image["source_type"], image["null_count"]) == ("binary", len(data.nulls))
    errors = [json.loads(line) for f in (kept / "_errors").iterdir() for line in f.open()]
    by_id = {int(e["values"]["id"]): e for e in errors}
    assert set(by_id) == set(data.bad)
    for i, reason in data.bad.items():
        e = by_id[i]
        assert (e["stage"], e["column"], e["row"]) == ("files", "image", data.line_of(i))
        assert e["source"] == str(data.csv) and reason in e["reason"], e
        assert e["reason"].startswith(f"{data.csv}: row {data.line_of(i)}: column 'image': ")
    assert "file not found" in by_id[GOOD]["reason"]
    assert by_id[GOOD]["reason"].endswith(f"{data.root / 'images/a/missing-0.png'}: file not found")


def test_kept_images_are_the_files_and_decode_to_the_source_pixels(data, kept):
    rows = batches(kept)
    assert sorted(int(r["id"]) for r in rows) == sorted([*data.files, *data.nulls])
    raw = {}
    for record in records(kept):
        example = tf.train.Example.FromString(record)
        i = example.features.feature["id"].int64_list.value[0]
        values = example.features.feature["image"].bytes_list.value
        raw[i] = values[0] if values else None
    for row in rows:
        i = int(row["id"])
        if i in data.nulls:
            assert raw[i] is None and not bool(row["image__present"])
            assert row["image"].to_tensor().shape == (0, 0, 0)
            continue
        assert raw[i] == data.files[i]  # the file's own bytes
        pixels = row["image"].to_tensor().numpy()
        source = data.pixels[i]
        expected = source[..., None] if source.ndim == 2 else source
        if data.files[i][:2] == b"\xff\xd8":  # JPEG: the file's decode, as stored
            expected = tf.io.decode_image(data.files[i]).numpy()
        np.testing.assert_array_equal(pixels, expected, err_msg=f"id {i}")
        shape = (int(row["image_height"]), int(row["image_width"]), int(row["image_channels"]))
        assert shape == expected.shape


def test_resized_images_are_dense_and_within_the_jpeg_round_trip(data, resized):
    manifest = read_manifest(resized)
    (image,) = [f for f in manifest["features"] if f["name"] == "image"]
    assert image["image"] == {"formats": ["jpeg"], "shape": [16, 16, 3]}
    seen = set()
    for split in manifest["splits"]:
        for batch in load_dataset(str(resized), split, batch_size=50, decode_images=True):
            assert isinstance(batch["image"], tf.Tensor) and batch["image"].dtype == tf.uint8
            assert batch["image"].shape[1:] == (16, 16, 3)
            for i, pixels, present in zip(
                batch["id"].numpy(),
                batch["image"].numpy(),
                batch["image__present"].numpy(),
                strict=True,
            ):
                seen.add(int(i))
                if i in data.nulls:
                    assert not present and not pixels.any()
                    continue
                source = Image.open(io.BytesIO(data.files[i])).convert("RGB")
                small = np.asarray(source.resize((16, 16), Image.Resampling.BICUBIC))
                expected = tf.io.decode_image(_save(small, "JPEG", 95)).numpy()
                if data.files[i][:2] != b"\xff\xd8":  # the same pixels, the same encoder
                    np.testing.assert_array_equal(pixels, expected, err_msg=f"id {i}")
                    continue
                # a JPEG source is decoded at a reduced scale when it shrinks (Pillow's draft)
                diff = np.abs(pixels.astype(int) - expected.astype(int)).mean()
                assert diff < JPEG_DRAFT, (i, diff)
    assert seen == {*data.files, *data.nulls}
    assert read_manifest(resized)["bad_rows"]["count"] == len(data.bad)


def test_beam_writes_what_the_in_process_engine_writes(data, kept, tmp_path):
    out = tmp_path / "beam"
    manifest = convert(data, out, KEEP, "--engine", "beam")
    assert manifest["splits"] == read_manifest(kept)["splits"]
    assert collections.Counter(records(out)) == collections.Counter(records(kept))
    errors = sorted(line for f in (out / "_errors").iterdir() for line in f.open())
    assert errors == sorted(line for f in (kept / "_errors").iterdir() for line in f.open())


def test_plan_counts_the_files_in_its_estimate(data, kept, tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text(json.dumps({"files": KEEP}), encoding="utf-8")
    result = run_cli_captured(
        ["plan", "--input", str(data.csv), "--output", str(tmp_path / "o"), "--config",
         str(path), "--json"]
    )  # fmt: skip
    assert result.code == 0, result.err
    summary = json.loads(result.out.strip().splitlines()[-1])
    assert summary["files"] == [
        {"column": "image", "output": "image", "kind": "image", "stored": "the file's bytes",
         "max_file_bytes": MAX_FILE_BYTES}
    ]  # fmt: skip
    written = sum(
        s["bytes"] for split in read_manifest(kept)["splits"].values() for s in split["shards"]
    )
    assert written / 2 < summary["write"]["bytes"] < written * 2  # with the files sampled


def test_verify_against_the_source(kept):
    result = run_cli_captured(["verify", str(kept), "--source"])
    assert result.code == 0, result.out + result.err
    assert "result: passed (no finding)" in result.out


def test_the_numpy_reader_gives_the_files_bytes(data, kept):
    from pipeline.reader.arrays import iter_batches

    seen = {}
    for split in read_manifest(kept)["splits"]:
        for batch in iter_batches(str(kept), split, batch_size=64):
            for k, i in enumerate(batch["id"].tolist()):
                seen[i] = (
                    batch["image"][k],
                    bool(batch["image__present"][k]),
                    (int(batch["image_height"][k]), int(batch["image_width"][k])),
                )
    assert seen.keys() == {*data.files, *data.nulls}
    for i, (value, present, size) in seen.items():
        if i in data.nulls:
            assert (value, present) == (b"", False)
            continue
        assert value == data.files[i] and present  # the encoded file, as load_dataset gives it
        assert size == data.pixels[i].shape[:2]


def test_inspect_shows_images_as_format_and_size(data, kept):
    result = run_cli_captured(["inspect", str(kept), "-n", "20"])
    assert result.code == 0, result.err
    shown = json.loads(result.out)
    assert shown["manifest"]["features"]["image"]["image"]["shape"] == [-1, -1, -1]
    for record in shown["records"]:
        i = record["id"][0]
        if i in data.nulls:
            assert record.get("image", []) == []
            continue
        kind = "jpeg" if data.files[i][:2] == b"\xff\xd8" else "png"
        assert record["image"] == [{"image": kind, "bytes": len(data.files[i])}]


def test_the_schema_marks_the_images(kept):
    text = (kept / "schema.pbtxt").read_text(encoding="utf-8")
    block = re.search(r'feature \{\n  name: "image"\n(.*?)\n\}', text, re.S).group(1)
    assert "image_domain {\n  }" in block and "type: BYTES" in block


def test_the_report_shows_thumbnails(kept):
    result = run_cli_captured(["report", str(kept)])
    assert result.code == 0, result.err
    page = (kept / "report.html").read_text(encoding="utf-8")
    assert "<h2>Images</h2>" in page and "<script" not in page
    for split in ("train", "eval"):
        figures = re.findall(
            rf'<figure data-feature="image" data-split="{split}">'
            r'<img alt="image, [a-z]+ #\d" src="data:image/png;base64,([A-Za-z0-9+/=]+)">',
            page,
        )
        assert len(figures) == 6
        for png in figures:
            thumb = Image.open(io.BytesIO(base64.b64decode(png)))
            assert thumb.format == "PNG" and max(thumb.size) <= 96


def test_tfds_decodes_the_same_images(data, tmp_path):
    out = tmp_path / "tfds"
    convert(
        data, out, RESIZED, "--engine", "in-process",
        config={"layout": "tfds", "columns": {"image": {"null_policy": "fail"}}},
    )  # fmt: skip
    manifest = read_manifest(out)
    assert manifest["bad_rows"]["count"] == len(data.bad) + len(data.nulls)  # nulls: bad here
    builder = tfds.builder_from_directory(str(out))
    feature = builder.info.features["image"]
    assert isinstance(feature, tfds.features.Image) and feature.shape == (16, 16, 3)
    for split in manifest["splits"]:
        by_tfds = {int(ex["id"]): ex["image"].numpy() for ex in builder.as_dataset(split=split)}
        by_reader = {
            int(i): pixels
            for batch in load_dataset(str(out), split, batch_size=64, decode_images=True)
            for i, pixels in zip(batch["id"].numpy(), batch["image"].numpy(), strict=True)
        }
        assert by_tfds.keys() == by_reader.keys() and len(by_tfds) > 20
        for i, pixels in by_tfds.items():
            np.testing.assert_array_equal(pixels, by_reader[i])


def test_a_tfds_image_column_must_not_write_nulls(data, tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text(json.dumps({"files": RESIZED, "layout": "tfds"}), encoding="utf-8")
    result = run_cli_captured(
        [
            "convert",
            "--input",
            str(data.csv),
            "--output",
            str(tmp_path / "o"),
            "--config",
            str(path),
        ]
    )
    assert result.code == 2
    assert "set columns.image.null_policy: fail" in result.err


def _wav(frames: int, rate: int, channels: int, fmt: str) -> bytes:
    out = io.BytesIO()
    soundfile.write(out, np.zeros((frames, channels), np.float32), rate, format=fmt)
    return out.getvalue()


def test_audio_and_documents(tmp_path):
    (tmp_path / "clips").mkdir()
    lines, expected = ["id,clip,doc"], {}
    for i in range(12):
        rate, channels, frames = (8000, 16000, 22050)[i % 3], 1 + i % 2, 1000 * (i + 1)
        data = _wav(frames, rate, channels, "FLAC" if i % 4 == 0 else "WAV")
        (tmp_path / "clips" / f"{i}.audio").write_bytes(data)
        doc = f"document {i}\n".encode() * (i + 1)
        (tmp_path / f"{i}.txt").write_bytes(doc)
        expected[i] = (data, rate, channels, frames / rate, doc)
        lines.append(f"{i},clips/{i}.audio,{i}.txt")
    (tmp_path / "bad.audio").write_bytes(b"RIFF not really")
    lines.append("12,bad.audio,0.txt")
    (tmp_path / "t.csv").write_text("\n".join(lines) + "\n", encoding="utf-8")
    config = tmp_path / "c.yaml"
    config.write_text("files: {clip: {audio: {}}, doc: {}}\nmax_bad_rows: 1\n", encoding="utf-8")
    out = tmp_path / "out"
    result = run_cli_captured(
        [
            "convert",
            "--input",
            str(tmp_path / "t.csv"),
            "--output",
            str(out),
            "--config",
            str(config),
        ]
    )
    assert result.code == 0, result.err
    (error,) = [json.loads(line) for f in (out / "_errors").iterdir() for line in f.open()]
    assert error["row"] == 12 and "not an audio file libsndfile can read" in error["reason"]
    got = {}
    for batch in load_dataset(str(out), batch_size=20):
        for k, i in enumerate(batch["id"].numpy()):
            got[int(i)] = tuple(
                batch[name][k].numpy()
                for name in ("clip", "clip_sample_rate", "clip_channels", "clip_duration", "doc")
            )
    assert got.keys() == expected.keys()
    for i, (data, rate, channels, seconds, doc) in expected.items():
        clip, got_rate, got_channels, duration, got_doc = got[i]
        assert (clip, int(got_rate), int(got_channels), got_doc) == (data, rate, channels, doc)
        assert duration == pytest.approx(seconds)


# -- gs:// on the GCS emulator ------------------------------------------------------------------

GCS_ROWS = 60


@pytest.fixture(scope="module")
def gcs():
    from gcs_emulator import GcsEmulator

    with GcsEmulator(("bucket",)) as emulator, emulator.environ():
        yield emulator


def test_beam_reads_the_files_from_gs(data, gcs, tmp_path):
    from apache_beam.io.filesystems import FileSystems

    lines = data.csv.read_text(encoding="utf-8").splitlines()[: GCS_ROWS + 1]
    local = data.root / "first-rows.csv"  # beside the images: its references resolve there
    local.write_text("\n".join(lines) + "\n", encoding="utf-8")
    for line in lines[1:]:
        ref = line.split(",")[1]
        if ref and not os.path.isabs(ref) and (data.root / ref).exists():
            with FileSystems.create(f"gs://bucket/ds/{ref}") as f:  # relative: next to the CSV
                f.write((data.root / ref).read_bytes())
    with FileSystems.create("gs://bucket/ds/images.csv") as f:
        f.write(local.read_bytes())
    config = tmp_path / "c.yaml"
    config.write_text(json.dumps({"files": KEEP, "max_bad_rows": 100}), encoding="utf-8")
    output = "gs://bucket/out"
    result = run_cli_captured(
        ["convert", "--input", "gs://bucket/ds/images.csv", "--output", output,
         "--config", str(config)]
    )  # fmt: skip
    assert result.code == 0, result.err
    assert '"engine":"beam"' in result.out
    # the same CSV, local: its references are then local files
    local_out = tmp_path / "local"
    result = run_cli_captured(
        ["convert", "--input", str(local), "--output", str(local_out), "--config", str(config)]
    )
    assert result.code == 0, result.err
    from transforms.write.tfrecord import read_records

    with FileSystems.open(f"{output}/manifest.json") as f:
        manifest = json.loads(f.read())
    remote = collections.Counter(
        r for split in manifest["splits"].values() for name in split["files"]
        for r in read_records(f"{output}/{name}", 10**9)
    )  # fmt: skip
    assert remote == collections.Counter(records(local_out))
    assert sum(remote.values()) == read_manifest(local_out)["rows"] > 40
    assert manifest["bad_rows"]["count"] == read_manifest(local_out)["bad_rows"]["count"] > 0
    # a local CSV whose references are gs:// URIs: the in-process engine reads them from gs://
    uris = tmp_path / "uris.csv"
    uris.write_text(
        "\n".join(
            [lines[0]]
            + [
                ",".join([i, f"gs://bucket/ds/{ref}" if ref and not os.path.isabs(ref) else ref, y])
                for i, ref, y in (line.split(",") for line in lines[1:])
            ]
        )
        + "\n",
        encoding="utf-8",
    )
    in_process = tmp_path / "in-process"
    result = run_cli_captured(
        ["convert", "--input", str(uris), "--output", str(in_process), "--config", str(config),
         "--engine", "in-process"]
    )  # fmt: skip
    assert result.code == 0, result.err
    assert collections.Counter(records(in_process)) == remote
    errors = [json.loads(line) for f in (in_process / "_errors").iterdir() for line in f.open()]
    assert errors
    for e in errors:
        reason = data.bad[int(e["values"]["id"])]
        assert reason in e["reason"] and ": gs://bucket/ds/images/" in e["reason"]
