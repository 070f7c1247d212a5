"""The files stage's plain functions (transforms/files/): the `files:` section checked, references
resolved and read, images checked, resized and re-encoded, audio headers, the stage over a batch
(parts of bounded size, bad files as bad rows), the plan over a schema, the manifest's image
marking, and the Example walk the report's thumbnails use."""

from __future__ import annotations

import io
import os

import numpy as np
import pyarrow as pa
import pytest
import soundfile
import tensorflow as tf
from PIL import Image

from pipeline.job.config import ConfigError, config_from_json, config_to_json, load_config
from pipeline.report.thumbnails import feature_bytes
from transforms.batch import TableBatch
from transforms.encode.features import FeatureSpec, ImageSpec, SchemaError
from transforms.files import stage
from transforms.files.audio import audio_info
from transforms.files.fetch import (
    BadFileError,
    read_file,
    resolve,
    resolve_column,
    table_directory,
)
from transforms.files.image import process_image, resized_size
from transforms.files.options import FilesConfigError, ImageOptions, parse_files
from transforms.files.plan import file_bytes_per_row, image_spec, plan_files


def png(pixels: np.ndarray, **save) -> bytes:
    out = io.BytesIO()
    Image.fromarray(pixels).save(out, format="PNG", **save)
    return out.getvalue()


def jpeg(pixels: np.ndarray, quality: int = 90, exif: bytes | None = None) -> bytes:
    out = io.BytesIO()
    extra = {} if exif is None else {"exif": exif}
    Image.fromarray(pixels).save(out, format="JPEG", quality=quality, **extra)
    return out.getvalue()


def noise(h: int, w: int, c: int | None = 3, seed: int = 0) -> np.ndarray:
    shape = (h, w) if c is None else (h, w, c)
    return np.random.default_rng(seed).integers(0, 256, shape, dtype=np.uint8)


def tf_pixels(data: bytes, channels: int = 0) -> np.ndarray:
    return tf.io.decode_image(data, channels=channels, expand_animations=False).numpy()


# -- the config section ---------------------------------------------------------------------


def test_the_minimal_forms_parse():
    (keep,) = parse_files({"image_uri": {}}, "c.yaml")
    assert (keep.column, keep.output, keep.kind, keep.image) == (
        "image_uri",
        "image_uri",
        "bytes",
        None,
    )
    (image,) = parse_files({"uri": {"image": {"resize": 256, "format": "jpeg"}}}, "c.yaml")
    assert image.kind == "image" and image.image == ImageOptions(resize=(256,), format="jpeg")
    (bare,) = parse_files({"uri": {"image": None, "output": "img"}}, "c.yaml")  # `image:`
    assert bare.image == ImageOptions() and bare.output == "img"
    (audio,) = parse_files({"clip": {"audio": {}, "max_file_bytes": 1000}}, "c.yaml")
    assert audio.kind == "audio" and audio.max_file_bytes == 1000


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ([1], "key 'files': expected a mapping"),
        ({"u": {"imag": {}}}, "key 'files.u.imag': unknown (known: output, max_file_bytes"),
        ({"u": {"image": {}, "audio": {}}}, "key 'files.u': image and audio exclude each other"),
        ({"u": {"image": {"resize": [1, 2, 3]}}}, "'files.u.image.resize': expected a side or"),
        ({"u": {"image": {"resize": 0}}}, "'files.u.image.resize': must be between 1"),
        ({"u": {"image": {"fit": "pad"}}}, "'files.u.image.fit': applies to an exact resize"),
        ({"u": {"image": {"resize": [4, 4], "fit": "zoom"}}}, "one of crop, pad, stretch"),
        ({"u": {"image": {"format": "webp"}}}, "'files.u.image.format': one of jpeg, png"),
        ({"u": {"image": {"format": "png", "quality": 80}}}, "applies to jpeg, not png"),
        ({"u": {"image": {"channels": 2}}}, "'files.u.image.channels': one of 1, 3, 4"),
        ({"u": {"image": {"channels": 4, "format": "jpeg"}}}, "jpeg has no alpha channel"),
        ({"u": {"max_file_bytes": 0}}, "'files.u.max_file_bytes': must be between 1"),
        ({"u": {"max_file_bytes": 2**31}}, "'files.u.max_file_bytes': must be between 1"),
        ({"u": {"max_file_bytes": True}}, "expected an integer, got True"),
        ({"a": {"output": "x"}, "b": {"output": "x"}}, "'x' is the output of another files"),
    ],
)
def test_a_wrong_entry_names_the_key(raw, message):
    with pytest.raises(FilesConfigError, match=r"^c\.yaml: ") as err:
        parse_files(raw, "c.yaml")
    assert message in str(err.value)


def test_the_section_round_trips_through_the_manifest_config(tmp_path):
    config = tmp_path / "c.yaml"
    config.write_text(
        "files:\n"
        "  a: {}\n"
        "  b: {output: img, image: {resize: [32, 48], fit: pad, channels: 3}}\n"
        "  c: {image: {resize: 64, format: png}, max_file_bytes: 5000}\n"
        "  d: {audio: {}}\n",
        encoding="utf-8",
    )
    loaded = load_config(str(config), {"input": ["t.csv"], "output": "out"})
    again = config_from_json(config_to_json(loaded), "manifest.json: key 'config'")
    assert again.files == loaded.files and len(loaded.files) == 4
    assert (
        config_to_json(load_config(None, {"input": ["t.csv"], "output": "o"})).get("files") is None
    )


def test_files_and_sequence_exclude_each_other(tmp_path):
    config = tmp_path / "c.yaml"
    config.write_text("files: {u: {}}\nsequence: {group_by: [k], order_by: t}\n", encoding="utf-8")
    with pytest.raises(ConfigError, match="files: a sequence: job does not read files"):
        load_config(str(config), {"input": ["t.csv"], "output": "out"})


# -- references and reading -----------------------------------------------------------------


def test_references_resolve_against_the_table(tmp_path):
    assert table_directory("data/t.csv") == "data"
    assert table_directory("gs://b/d/t.csv") == "gs://b/d"
    assert resolve("img/1.png", "data") == os.path.join("data", "img/1.png")
    assert resolve("/abs/1.png", "data") == "/abs/1.png"
    assert resolve("gs://x/1.png", "data") == "gs://x/1.png"
    assert resolve("img/1.png", "gs://b/d") == "gs://b/d/img/1.png"
    assert resolve("../1.png", "gs://b/d") == "gs://b/1.png"
    with pytest.raises(BadFileError, match="leads out of gs://b"):
        resolve("../../1.png", "gs://b/d")
    with pytest.raises(BadFileError, match="an empty path"):
        resolve("", "data")


@pytest.mark.parametrize("directory", ["", "data", "/", "/abs/dir/", "gs://b/d"])
def test_a_column_resolves_as_each_reference_does(directory):
    refs = ["a.png", "img/b.jpg", "/abs/c.png", "s3://x/d.png", "../e.png", "", None, "é ü.png"]
    got = resolve_column(pa.array(refs).dictionary_encode(), directory)
    for ref, path in zip(refs, got, strict=True):
        if ref is None:
            assert path is None
        elif ref == "":
            assert path == ""
        else:
            assert path == resolve(ref, directory)


def test_reading_a_file_and_its_faults(tmp_path):
    (tmp_path / "f.bin").write_bytes(b"x" * 100)
    assert read_file(str(tmp_path / "f.bin"), 100) == b"x" * 100
    (tmp_path / "empty").write_bytes(b"")
    assert read_file(str(tmp_path / "empty"), 1) == b""
    faults = {
        str(tmp_path / "missing"): "file not found",
        str(tmp_path): "a directory",
        str(tmp_path / "f.bin") + "#": "file not found",
    }
    os.mkfifo(tmp_path / "fifo")  # never opened for writing: a blocking read would hang
    faults[str(tmp_path / "fifo")] = "not a regular file"
    for path, reason in faults.items():
        with pytest.raises(BadFileError, match=f"^{reason}$"):
            read_file(path, 1000)
    with pytest.raises(BadFileError, match=r"^a file of 100 bytes, larger than max_file_bytes 99$"):
        read_file(str(tmp_path / "f.bin"), 99)


@pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="no /proc")
def test_a_file_whose_size_says_nothing_is_read_to_its_end():
    data = read_file("/proc/self/status", 1 << 20)  # stat gives 0 bytes; reading gives more
    assert data.startswith(b"Name:") and data.endswith(b"\n")


def test_an_unreadable_file_is_its_fault(tmp_path):
    path = tmp_path / "secret"
    path.write_bytes(b"x")
    path.chmod(0)
    try:
        if os.access(path, os.R_OK):  # root reads it anyway
            pytest.skip("this user reads any file")
        with pytest.raises(BadFileError, match="cannot open the file"):
            read_file(str(path), 10)
    finally:
        path.chmod(0o600)


# -- images ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("make", "channels"),
    [
        (lambda a: png(a), 3),
        (lambda a: png(a[..., 0]), 1),
        (lambda a: png(np.dstack([a, a[..., :1]])), 4),
        (lambda a: png(np.dstack([a[..., 0], a[..., 1]])), 2),
        (lambda a: _png_of(Image.fromarray(a).convert("P")), 3),
        (lambda a: _png_of(Image.fromarray(a).convert("P"), transparency=0), 4),
        (lambda a: _png_of(Image.fromarray(a[..., 0]).convert("1")), 1),
        (lambda a: jpeg(a), 3),
        (lambda a: jpeg(a[..., 0]), 1),
    ],
)
def test_a_kept_image_is_its_bytes_with_the_shape_tensorflow_decodes(make, channels):
    data = make(noise(9, 13))
    result = process_image(data, ImageOptions())
    assert result.data is data  # the file's own bytes
    assert (
        (result.height, result.width, result.channels) == tf_pixels(data).shape == (9, 13, channels)
    )


def _png_of(image: Image.Image, **save) -> bytes:
    out = io.BytesIO()
    image.save(out, format="PNG", **save)
    return out.getvalue()


def test_kept_with_channels_the_readers_convert():
    data = png(noise(5, 6, 4))
    result = process_image(data, ImageOptions(channels=3))
    assert result.data is data and result.channels == 3 == tf_pixels(data, 3).shape[-1]


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (b"not an image at all", "^not an image Pillow can read$"),
        (png(noise(40, 40))[:300], "^corrupt PNG image \\(image file is truncated"),
        (jpeg(noise(40, 40))[:1500], "^corrupt JPEG image \\(image file is truncated"),
        (jpeg(noise(40, 40))[:400], "^not an image Pillow can read \\(Truncated File Read\\)$"),
        (_png_of(Image.fromarray(noise(4, 4)).convert("CMYK").convert("RGB")), None),
    ],
)
def test_a_file_that_is_not_a_whole_image_is_a_fault(data, reason):
    if reason is None:  # a well-formed control
        assert process_image(data, ImageOptions()).height == 4
        return
    with pytest.raises(BadFileError, match=reason):
        process_image(data, ImageOptions())


def test_formats_the_readers_do_not_decode_as_stored_need_a_re_encode():
    out = io.BytesIO()
    Image.fromarray(noise(6, 7)).save(out, format="BMP")
    with pytest.raises(BadFileError, match="a RGB BMP image, which the readers do not decode"):
        process_image(out.getvalue(), ImageOptions())
    result = process_image(out.getvalue(), ImageOptions(format="png"))
    assert np.array_equal(tf_pixels(result.data), noise(6, 7))  # PNG: lossless
    cmyk = io.BytesIO()
    Image.fromarray(noise(6, 7)).convert("CMYK").save(cmyk, format="JPEG")
    with pytest.raises(BadFileError, match="a CMYK JPEG image"):
        process_image(cmyk.getvalue(), ImageOptions())
    assert process_image(cmyk.getvalue(), ImageOptions(format="jpeg")).channels == 3


def test_max_pixels_is_checked_before_decoding():
    with pytest.raises(BadFileError, match=r"^20x10 pixels, more than image\.max_pixels 199"):
        process_image(png(noise(10, 20)), ImageOptions(max_pixels=199))


@pytest.mark.parametrize(
    ("resize", "fit", "size"),
    [
        ((8,), "crop", (16, 8)),  # the shorter side: the height, 20 of 40 x 20
        ((20,), "crop", (40, 20)),
        ((12, 9), "crop", (9, 12)),
        ((12, 9), "pad", (9, 12)),
        ((12, 9), "stretch", (9, 12)),
    ],
)
def test_resize_sizes(resize, fit, size):
    assert resized_size(40, 20, ImageOptions(resize=resize, fit=fit)) == size  # (width, height)
    result = process_image(png(noise(20, 40)), ImageOptions(resize=resize, fit=fit))
    assert (result.width, result.height) == size == tf_pixels(result.data).shape[1::-1]


def test_a_re_encoded_image_is_within_the_jpeg_round_trip():
    y, x = np.mgrid[0:32, 0:48]
    pixels = np.dstack([x * 5, y * 7, (x + y) * 3]).astype(np.uint8)  # smooth: what JPEG keeps
    options = ImageOptions(resize=(16, 24), fit="stretch", format="jpeg", quality=95)
    result = process_image(png(pixels), options)
    expected = np.asarray(Image.fromarray(pixels).resize((24, 16), Image.Resampling.BICUBIC))
    got = tf_pixels(result.data)
    assert got.shape == (16, 24, 3) and result.data[:2] == b"\xff\xd8"
    assert np.abs(got.astype(int) - expected.astype(int)).mean() < 4


def test_pad_fills_with_black_and_crop_keeps_the_middle():
    pixels = np.full((10, 20, 3), 200, np.uint8)
    padded = tf_pixels(process_image(png(pixels), ImageOptions((20, 20), "pad")).data)
    assert padded.shape == (20, 20, 3) and padded[0].max() == 0 and padded[10].min() == 200
    pixels[:, :5] = 0  # dark edge columns a center crop cuts away
    pixels[:, 15:] = 0
    cropped = tf_pixels(process_image(png(pixels), ImageOptions((10, 10), "crop")).data)
    assert cropped.shape == (10, 10, 3) and cropped.min() == 200


def test_the_exif_orientation_is_applied_when_re_encoding():
    exif = Image.Exif()
    exif[0x0112] = 6  # turned 90 degrees clockwise on display
    data = jpeg(noise(10, 30), exif=exif.tobytes())
    kept = process_image(data, ImageOptions())
    assert (kept.height, kept.width) == (10, 30)  # as stored: what tf.io.decode_image gives
    upright = process_image(data, ImageOptions(format="png"))
    assert (upright.height, upright.width) == (30, 10)
    shrunk = process_image(data, ImageOptions(resize=(5,)))  # a drafted JPEG, then turned
    assert (shrunk.height, shrunk.width) == (15, 5)


def test_channels_conversions_when_re_encoding():
    rgba = png(noise(6, 6, 4))
    assert process_image(rgba, ImageOptions(format="jpeg")).channels == 3  # jpeg: no alpha
    assert process_image(rgba, ImageOptions(format="png")).channels == 4
    gray = process_image(rgba, ImageOptions(format="png", channels=1))
    assert gray.channels == 1 == tf_pixels(gray.data).shape[-1]
    deep = np.arange(36, dtype=np.uint16).reshape(6, 6) * 1000
    result = process_image(png(deep), ImageOptions(format="png"))
    assert np.array_equal(tf_pixels(result.data)[..., 0], (deep >> 8).astype(np.uint8))
    assert np.array_equal(tf_pixels(png(deep))[..., 0], (deep >> 8).astype(np.uint8))  # kept


# -- audio ----------------------------------------------------------------------------------


def _audio(fmt: str, frames: int, rate: int, channels: int) -> bytes:
    out = io.BytesIO()
    soundfile.write(out, np.zeros((frames, channels)), rate, format=fmt)
    return out.getvalue()


def test_audio_headers():
    wav = audio_info(_audio("WAV", 8000, 16000, 2))
    assert (wav.sample_rate, wav.channels, wav.duration) == (16000, 2, 0.5)
    flac = audio_info(_audio("FLAC", 4410, 44100, 1))
    assert (flac.sample_rate, flac.channels, flac.duration) == (44100, 1, 0.1)
    with pytest.raises(BadFileError, match=r"^not an audio file libsndfile can read \(Format"):
        audio_info(b"RIFX nothing")
    with pytest.raises(BadFileError, match="No 'data' chunk"):
        audio_info(_audio("WAV", 100, 8000, 1)[:30])


# -- the plan over a schema -----------------------------------------------------------------


def _plan(raw, schema):
    return plan_files(parse_files(raw, "c.yaml"), schema)


def test_the_schema_after_the_files_stage():
    schema = pa.schema([("uri", pa.string()), ("label", pa.int64()), ("clip", pa.string())])
    plan = _plan({"uri": {"image": {}}, "clip": {"audio": {}, "output": "sound"}}, schema)
    assert plan.output_schema == pa.schema(
        [
            ("uri", pa.binary()),
            ("label", pa.int64()),
            ("clip", pa.string()),
            ("uri_height", pa.int32()),
            ("uri_width", pa.int32()),
            ("uri_channels", pa.int32()),
            ("sound", pa.binary()),
            ("sound_sample_rate", pa.int32()),
            ("sound_channels", pa.int32()),
            ("sound_duration", pa.float64()),
        ]
    )


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ({"nope": {}}, "files.nope: column 'nope' is not in the input"),
        ({"label": {}}, "files.label: column 'label' is int64; a file reference is text"),
        ({"uri": {"output": "label"}}, "the feature 'label' it writes is a column already"),
        ({"uri": {"image": {}}, "u2": {"output": "uri_height"}}, "feature 'uri_height' it"),
    ],
)
def test_plan_errors_name_the_key(raw, message):
    schema = pa.schema([("uri", pa.string()), ("u2", pa.string()), ("label", pa.int64())])
    with pytest.raises(SchemaError) as err:
        _plan(raw, schema)
    assert message in str(err.value)


def test_the_image_marking():
    (keep,) = parse_files({"u": {"image": {}}}, "c")
    assert image_spec(keep) == ImageSpec(("jpeg", "png"), (-1, -1, -1))
    (exact,) = parse_files(
        {"u": {"image": {"resize": [8, 6], "channels": 3, "format": "png"}}}, "c"
    )
    assert image_spec(exact) == ImageSpec(("png",), (8, 6, 3))
    (plain,) = parse_files({"u": {}}, "c")
    assert image_spec(plain) is None
    spec = FeatureSpec(
        "u", ("u",), "bytes", "string", (), "values", "binary", image=image_spec(exact)
    )
    assert spec.to_json()["image"] == {"formats": ["png"], "shape": [8, 6, 3]}
    assert FeatureSpec.from_json(spec.to_json()) == spec
    assert (
        "image" not in FeatureSpec("u", ("u",), "bytes", "string", (), "values", "binary").to_json()
    )


def test_the_estimate_of_file_bytes_per_row(tmp_path):
    (tmp_path / "a").write_bytes(b"x" * 300)
    (tmp_path / "b").write_bytes(b"x" * 100)
    table = pa.table({"u": ["a", "b", None, "missing"]})
    plan = _plan({"u": {}}, table.schema)
    batch = TableBatch(table, str(tmp_path / "t.csv"), 0)
    assert file_bytes_per_row(plan, batch) == 100.0  # (300 + 100 + 0 + 0) / 4 rows


# -- the stage over a batch -----------------------------------------------------------------


def _files_dir(tmp_path, count: int) -> list[bytes]:
    files = []
    for i in range(count):
        data = png(noise(3 + i % 5, 4, seed=i))
        (tmp_path / f"{i}.png").write_bytes(data)
        files.append(data)
    return files


def test_the_stage_reads_in_parts_and_sets_bad_rows_aside(tmp_path, monkeypatch):
    files = _files_dir(tmp_path, 40)
    refs = [f"{i}.png" for i in range(40)]
    refs[7], refs[21], refs[30] = "gone.png", None, ""
    (tmp_path / "junk.png").write_bytes(b"junk")
    refs[33] = "junk.png"
    table = pa.table({"u": refs, "k": list(range(40))})
    plan = _plan({"u": {"image": {}}}, table.schema)
    batch = TableBatch(table, str(tmp_path / "t.csv"), 100, rows=None)
    monkeypatch.setattr(stage, "CHUNK_BYTES", 500)
    parts = list(stage.read_files(plan, batch))
    assert len(parts) > 3  # cut by the bytes read
    bad = [row for _, b in parts for row in b]
    assert sorted((r["row"], r["column"], r["stage"]) for r in bad) == [
        (107, "u", "files"), (130, "u", "files"), (133, "u", "files"),
    ]  # fmt: skip
    reasons = {r["row"]: r["reason"] for r in bad}
    where = f"{tmp_path / 't.csv'}: row"
    assert reasons[107] == f"{where} 107: column 'u': {tmp_path / 'gone.png'}: file not found"
    assert reasons[130] == f"{where} 130: column 'u': an empty path"
    assert reasons[133].endswith("junk.png: not an image Pillow can read")
    assert bad[0]["values"] == {"u": "gone.png", "k": 7}
    got = pa.concat_tables([p.table for p, _ in parts if p is not None])
    rows = np.concatenate([stage.source_rows(p) for p, _ in parts if p is not None])
    assert rows.tolist() == [100 + i for i in range(40) if i not in (7, 30, 33)]
    assert got.column_names == ["u", "k", "u_height", "u_width", "u_channels"]
    for row, value, height in zip(
        rows, got["u"].to_pylist(), got["u_height"].to_pylist(), strict=True
    ):
        i = row - 100
        assert value == (None if i == 21 else files[i])
        assert height == (None if i == 21 else 3 + i % 5)


def test_the_stage_is_the_same_on_one_thread_and_many(tmp_path, monkeypatch):
    _files_dir(tmp_path, 50)
    table = pa.table({"u": [f"{i}.png" for i in range(50)]})
    plan = _plan({"u": {"image": {"resize": [4, 4], "format": "jpeg"}}}, table.schema)
    batch = TableBatch(table, str(tmp_path / "t.csv"), 0)
    many = [p.table for p, _ in stage.read_files(plan, batch)]
    monkeypatch.setattr(stage, "thread_count", lambda remote, decodes: 1)
    one = [p.table for p, _ in stage.read_files(plan, batch)]
    assert many == one and many[0].num_rows == 50


def test_a_reference_out_of_its_bucket_is_a_bad_row():
    table = pa.table({"u": ["../../x.png", None]})
    plan = _plan({"u": {}}, table.schema)
    ((part, bad),) = list(stage.read_files(plan, TableBatch(table, "gs://b/d/t.csv", 0)))
    assert part.table.num_rows == 1 and part.table["u"].to_pylist() == [None]
    (row,) = bad
    assert row["reason"] == "gs://b/d/t.csv: row 0: column 'u': ../../x.png: leads out of gs://b"


@pytest.mark.parametrize("way", ["python", "compiled"])
def test_a_fault_that_is_not_the_files_fails_the_batch(tmp_path, monkeypatch, way):
    _files_dir(tmp_path, 3)
    monkeypatch.setenv("FILE_READS", way)
    table = pa.table({"u": ["0.png", "gone.png", "2.png"]})  # the compiled loop leaves gone.png
    plan = _plan({"u": {}}, table.schema)

    def broken(path, limit):
        raise ConnectionError("the store went away")

    monkeypatch.setattr(stage, "read_local", broken)
    with pytest.raises(ConnectionError, match="the store went away"):
        list(stage.read_files(plan, TableBatch(table, str(tmp_path / "t.csv"), 0)))


# -- the report's walk of an Example --------------------------------------------------------


def test_feature_bytes_walks_an_example_as_tensorflow_writes_it():
    example = tf.train.Example(
        features=tf.train.Features(
            feature={
                "image": tf.train.Feature(bytes_list=tf.train.BytesList(value=[b"\x89PNG..."])),
                "image_height": tf.train.Feature(int64_list=tf.train.Int64List(value=[300])),
                "label": tf.train.Feature(float_list=tf.train.FloatList(value=[0.5])),
                "imag": tf.train.Feature(bytes_list=tf.train.BytesList(value=[b"other"])),
            }
        )
    ).SerializeToString()
    assert feature_bytes(example, "image") == b"\x89PNG..."
    assert feature_bytes(example, "imag") == b"other"
    assert feature_bytes(example, "missing") is None
    with pytest.raises(ValueError, match="truncated"):
        feature_bytes(example[:-3], "label")
