"""The config's `files:` section: which columns hold file references, and what each file becomes.

```yaml
files:
  image_uri: {}                      # the file's bytes in place of the path
  photo:
    output: image                    # a new feature (default: the column itself)
    max_file_bytes: 10485760         # a larger file is a bad row
    image: {resize: 256, format: jpeg, quality: 90, channels: 3}
  clip:
    audio: {}                        # bytes, checked, with sample rate, channels and duration
```

Checked here without a schema (names, types, ranges, exclusive options); the columns are
checked against the schema by `plan_files` (transforms/files/plan.py). Errors name the config
file and the key.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

__all__ = [
    "DEFAULT_MAX_FILE_BYTES",
    "FITS",
    "FORMATS",
    "MAX_FILE_BYTES_LIMIT",
    "AudioOptions",
    "FileColumn",
    "FilesConfigError",
    "ImageOptions",
    "files_to_json",
    "parse_files",
]

DEFAULT_MAX_FILE_BYTES = 64 * 2**20  # a larger file is a bad row
MAX_FILE_BYTES_LIMIT = 2**30  # one value of a record stays far below protobuf's 2 GiB
DEFAULT_MAX_PIXELS = 89_478_485  # Pillow's own decompression-bomb limit (Image.MAX_IMAGE_PIXELS)
FORMATS = ("jpeg", "png")  # what images are stored as: what tf.io.decode_image and TFDS read
FITS = ("crop", "pad", "stretch")
CHANNELS = (1, 3, 4)


class FilesConfigError(ValueError):
    """A `files:` entry that is not valid (names the config file and the key)."""


@dataclasses.dataclass(frozen=True)
class ImageOptions:
    """Decode and check an image; keep its bytes, or resize and re-encode it.

    `resize`: None (keep the size), (side,) (the shorter side becomes `side`, the aspect kept),
    or (height, width) (exactly, with `fit`: crop the overflow, pad with black, or stretch).
    `format`: None keeps the file's bytes (a JPEG or PNG file) unless `resize` or `channels`
    makes new pixels, which are then encoded as the file's format (PNG for other formats).
    `channels`: None (as stored) or 1, 3, 4: what the readers decode the image to.
    """

    resize: tuple[int, ...] | None = None
    fit: str = "crop"
    format: str | None = None
    quality: int = 90
    channels: int | None = None
    max_pixels: int = DEFAULT_MAX_PIXELS

    @property
    def reencodes(self) -> bool:
        """Whether the stored bytes are new (resized or converted) rather than the file's."""
        return self.format is not None or self.resize is not None

    def to_json(self) -> dict[str, Any]:
        """The options as the config writes them (those that apply, defaults included)."""
        out: dict[str, Any] = {}
        if self.resize is not None:
            out["resize"] = self.resize[0] if len(self.resize) == 1 else list(self.resize)
            if len(self.resize) == 2:
                out["fit"] = self.fit
        if self.format is not None:
            out["format"] = self.format
        if self.format != "png":
            out["quality"] = self.quality
        if self.channels is not None:
            out["channels"] = self.channels
        out["max_pixels"] = self.max_pixels
        return out


@dataclasses.dataclass(frozen=True)
class AudioOptions:
    """Check an audio file's header (soundfile) and keep its bytes, with its sample rate,
    channels and duration as features."""

    def to_json(self) -> dict[str, Any]:
        return {}


@dataclasses.dataclass(frozen=True)
class FileColumn:
    """One `files:` entry: the column of paths, the feature its files become, and how."""

    column: str
    output: str
    max_file_bytes: int = DEFAULT_MAX_FILE_BYTES
    image: ImageOptions | None = None
    audio: AudioOptions | None = None

    @property
    def kind(self) -> str:
        """ "image", "audio" or "bytes"."""
        return "image" if self.image else "audio" if self.audio else "bytes"

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"output": self.output, "max_file_bytes": self.max_file_bytes}
        if self.image is not None:
            out["image"] = self.image.to_json()
        if self.audio is not None:
            out["audio"] = self.audio.to_json()
        return out


_COLUMN_KEYS = ("output", "max_file_bytes", "image", "audio")
_IMAGE_KEYS = tuple(f.name for f in dataclasses.fields(ImageOptions))


def _int(where: str, value: Any, low: int, high: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise FilesConfigError(f"{where}: expected an integer, got {value!r}")
    if value < low or (high is not None and value > high):
        top = f" and {high:,}" if high is not None else ""
        raise FilesConfigError(f"{where}: must be between {low:,}{top}, got {value!r}")
    return value


def _mapping(where: str, value: Any) -> Mapping[str, Any]:
    value = {} if value is None else value  # `image:` with nothing after it: the defaults
    if not isinstance(value, Mapping):
        raise FilesConfigError(f"{where}: expected a mapping of options")
    return value


def _unknown(where: str, raw: Mapping[str, Any], known: tuple[str, ...]) -> None:
    unknown = sorted(str(k) for k in set(raw) - set(known))
    if unknown:
        raise FilesConfigError(f"{where}.{unknown[0]}': unknown (known: {', '.join(known)})")


def _resize(where: str, value: Any) -> tuple[int, ...] | None:
    if value is None:
        return None
    if isinstance(value, list):
        if len(value) != 2:
            raise FilesConfigError(f"{where}: expected a side or [height, width], got {value!r}")
        return tuple(_int(where, v, 1, 65_535) for v in value)
    return (_int(where, value, 1, 65_535),)


def _image(where: str, raw: Any) -> ImageOptions:
    raw = _mapping(f"{where}'", raw)
    _unknown(where, raw, _IMAGE_KEYS)
    values: dict[str, Any] = {}
    if raw.get("resize") is not None:
        values["resize"] = _resize(f"{where}.resize'", raw["resize"])
    if raw.get("fit") is not None:
        if raw["fit"] not in FITS:
            raise FilesConfigError(f"{where}.fit': one of {', '.join(FITS)}, got {raw['fit']!r}")
        if values.get("resize") is None or len(values["resize"]) != 2:
            raise FilesConfigError(f"{where}.fit': applies to an exact resize: [height, width]")
        values["fit"] = raw["fit"]
    if raw.get("format") is not None:
        if raw["format"] not in FORMATS:
            got = raw["format"]
            raise FilesConfigError(f"{where}.format': one of {', '.join(FORMATS)}, got {got!r}")
        values["format"] = raw["format"]
    if raw.get("quality") is not None:
        values["quality"] = _int(f"{where}.quality'", raw["quality"], 1, 100)
        if values.get("format") == "png":
            raise FilesConfigError(f"{where}.quality': applies to jpeg, not png")
    if raw.get("channels") is not None:
        channels = raw["channels"]
        if isinstance(channels, bool) or channels not in CHANNELS:
            raise FilesConfigError(f"{where}.channels': one of 1, 3, 4, got {channels!r}")
        if channels == 4 and values.get("format") == "jpeg":
            raise FilesConfigError(f"{where}.channels': jpeg has no alpha channel (use png)")
        values["channels"] = channels
    if raw.get("max_pixels") is not None:
        values["max_pixels"] = _int(f"{where}.max_pixels'", raw["max_pixels"], 1)
    return ImageOptions(**values)


def _column(source: str, name: Any, raw: Any) -> FileColumn:
    where = f"{source}: key 'files.{name}"
    if not isinstance(name, str) or not name:
        raise FilesConfigError(f"{where}': a column name is text")
    raw = _mapping(f"{where}'", raw)
    _unknown(where, raw, _COLUMN_KEYS)
    output = raw.get("output") or name
    if not isinstance(output, str):
        raise FilesConfigError(f"{where}.output': expected a feature name, got {output!r}")
    limit = raw.get("max_file_bytes")
    limit = DEFAULT_MAX_FILE_BYTES if limit is None else limit
    limit = _int(f"{where}.max_file_bytes'", limit, 1, MAX_FILE_BYTES_LIMIT)
    if "image" in raw and "audio" in raw:
        raise FilesConfigError(f"{where}': image and audio exclude each other")
    image = _image(f"{where}.image", raw["image"]) if "image" in raw else None
    audio = None
    if "audio" in raw:
        _unknown(f"{where}.audio", _mapping(f"{where}.audio'", raw["audio"]), ())
        audio = AudioOptions()
    return FileColumn(name, output, limit, image, audio)


def parse_files(raw: Any, source: str) -> tuple[FileColumn, ...]:
    """The config's `files:` mapping (column -> options), checked without a schema."""
    if not isinstance(raw, Mapping):
        raise FilesConfigError(f"{source}: key 'files': expected a mapping of column -> options")
    columns = tuple(_column(source, name, options) for name, options in raw.items())
    outputs = [c.output for c in columns]
    for c in columns:
        if outputs.count(c.output) > 1:
            raise FilesConfigError(
                f"{source}: key 'files.{c.column}.output': {c.output!r} is the output of "
                "another files entry too"
            )
    return columns


def files_to_json(columns: tuple[FileColumn, ...]) -> dict[str, Any]:
    """The section as the config file writes it (every option, the defaults too)."""
    return {c.column: c.to_json() for c in columns}
