"""An image file checked and, when asked, resized and re-encoded (Pillow): plain functions of
its bytes.

Every image is decoded in full, so a truncated or corrupt file is found here (a `BadFileError`,
which the files stage makes a bad row), never by a reader later. What is stored is what the
readers decode (`tf.io.decode_image`, TFDS's `Image`): JPEG or PNG.

- Kept (no `resize`, no `format`): the file's own bytes, when it is a JPEG or a PNG whose
  pixels TensorFlow decodes (JPEG: grayscale or RGB; PNG: any 8-bit mode, and 16-bit
  grayscale). Its height, width and channels are those `tf.io.decode_image` gives (a palette
  PNG is RGB, or RGBA with a transparent colour), or `channels` when set (the readers convert).
- Re-encoded: decoded (a JPEG at a reduced scale straight away when it is to shrink: Pillow's
  `draft`), turned upright by its EXIF orientation, converted to `channels` (or to L, LA, RGB
  or RGBA from its mode; JPEG has no alpha), resized, and saved as `format` (default: the
  file's format when JPEG or PNG, else PNG) at `quality` (JPEG).
"""

from __future__ import annotations

import dataclasses
import io

import numpy as np
from PIL import Image, ImageOps, UnidentifiedImageError

from transforms.files.fetch import BadFileError
from transforms.files.options import ImageOptions

__all__ = ["BadFileError", "ImageResult", "process_image", "resized_size", "thumbnail"]

_ORIENTATION = 0x0112  # the EXIF tag
_SWAPS_AXES = (5, 6, 7, 8)  # orientations that turn the image by 90 degrees
_MODES = {1: "L", 2: "LA", 3: "RGB", 4: "RGBA"}
_RESAMPLE = Image.Resampling.BICUBIC


@dataclasses.dataclass(frozen=True)
class ImageResult:
    """The bytes to store and the shape the readers decode them to."""

    data: bytes
    height: int
    width: int
    channels: int


def _open(data: bytes, max_pixels: int) -> Image.Image:
    try:
        image = Image.open(io.BytesIO(data))
    except UnidentifiedImageError:
        raise BadFileError("not an image Pillow can read") from None
    except (OSError, ValueError, SyntaxError) as err:
        raise BadFileError(f"not an image Pillow can read ({err})") from None
    width, height = image.size
    if width * height > max_pixels:
        raise BadFileError(
            f"{width}x{height} pixels, more than image.max_pixels {max_pixels:,} (every pixel "
            "is decoded)"
        )
    return image


def _load(image: Image.Image) -> None:
    """Decode every pixel: a truncated or corrupt file fails here."""
    try:
        image.load()
    except Image.DecompressionBombError as err:
        raise BadFileError(f"too many pixels ({err})") from None
    except (OSError, ValueError, SyntaxError, EOFError) as err:
        kind = f"{image.format} image" if image.format else "image"
        raise BadFileError(f"corrupt {kind} ({err})") from None


def _decoded_channels(image: Image.Image) -> int:
    """The channels `tf.io.decode_image` gives for a kept JPEG or PNG (BadFileError when it does
    not decode its pixels as Pillow does)."""
    mode, fmt = image.mode, image.format
    if fmt == "JPEG" and mode in ("L", "RGB"):
        return 1 if mode == "L" else 3
    if fmt == "PNG":
        if mode == "P":
            return 4 if "transparency" in image.info else 3  # libpng: palette -> RGB(A)
        if mode in ("1", "L") or mode.startswith("I;16"):
            return 1  # 16-bit: TensorFlow's uint8 decode keeps the high byte
        if mode in ("LA", "RGB", "RGBA"):
            return {"LA": 2, "RGB": 3, "RGBA": 4}[mode]
    raise BadFileError(
        f"a {mode} {fmt} image, which the readers do not decode as stored; set image.format "
        "(png or jpeg) to re-encode it"
    )


def resized_size(width: int, height: int, options: ImageOptions) -> tuple[int, int]:
    """(width, height) of the result of a resize of a `width` x `height` image."""
    resize = options.resize
    if resize is None:
        return width, height
    if len(resize) == 2:
        return resize[1], resize[0]
    side, short = resize[0], min(width, height)
    if width <= height:
        return side, max(1, round(height * side / short))
    return max(1, round(width * side / short)), side


def _draft_size(width: int, height: int, options: ImageOptions) -> tuple[int, int]:
    """The smallest decoded size the resize can start from without losing detail."""
    out_w, out_h = resized_size(width, height, options)
    if options.resize is None or len(options.resize) == 1 or options.fit == "stretch":
        return out_w, out_h
    scale = out_w / width, out_h / height
    s = max(scale) if options.fit == "crop" else min(scale)  # crop covers; pad fits inside
    return max(1, round(width * s)), max(1, round(height * s))


def _target_mode(image: Image.Image, options: ImageOptions, fmt: str) -> str:
    if options.channels is not None:
        return _MODES[options.channels]
    alpha = image.mode in ("LA", "RGBA", "PA") or (
        image.mode == "P" and "transparency" in image.info
    )
    gray = image.mode in ("1", "L", "LA", "I", "F") or image.mode.startswith("I;16")
    if fmt == "jpeg":
        alpha = False
    return ("LA" if alpha else "L") if gray else ("RGBA" if alpha else "RGB")


def _convert(image: Image.Image, mode: str) -> Image.Image:
    if image.mode == "F":
        raise BadFileError("a floating-point image (mode F); store it as an array instead")
    if image.mode == "I" or image.mode.startswith("I;16"):  # 16 bits: keep the high byte
        high = np.asarray(image).astype(np.uint32) >> 8
        image = Image.fromarray(np.minimum(high, 255).astype(np.uint8), "L")
    if image.mode != mode:
        image = image.convert(mode)
    return image


def _resize(image: Image.Image, options: ImageOptions) -> Image.Image:
    resize = options.resize
    if resize is None:
        return image
    size = resized_size(image.width, image.height, options)
    if len(resize) == 1 or options.fit == "stretch":
        return image if image.size == size else image.resize(size, _RESAMPLE)
    if options.fit == "crop":
        return ImageOps.fit(image, size, _RESAMPLE)
    return ImageOps.pad(image, size, _RESAMPLE, color=0)


def _encode(image: Image.Image, fmt: str, quality: int) -> bytes:
    out = io.BytesIO()
    if fmt == "jpeg":
        image.save(out, format="JPEG", quality=quality)
    else:
        image.save(out, format="PNG")
    return out.getvalue()


def process_image(data: bytes, options: ImageOptions) -> ImageResult:
    """The image in `data` checked (and resized, converted, re-encoded as `options` say);
    BadFileError when it is not an image the readers can have."""
    image = _open(data, options.max_pixels)
    if not options.reencodes and options.channels is None:
        channels = _decoded_channels(image)
        _load(image)
        return ImageResult(data, image.height, image.width, channels)
    if not options.reencodes:  # kept, decoded by the readers to `channels`
        _decoded_channels(image)
        _load(image)
        return ImageResult(data, image.height, image.width, options.channels)
    source_format = (image.format or "").lower()
    fmt = options.format or (source_format if source_format in ("jpeg", "png") else "png")
    try:
        orientation = int(image.getexif().get(_ORIENTATION, 1))
    except (OSError, ValueError, SyntaxError):
        orientation = 1  # unreadable EXIF: the pixels as stored
    if options.resize is not None and image.format == "JPEG":
        w, h = image.size
        if orientation in _SWAPS_AXES:
            dw, dh = _draft_size(h, w, options)
            image.draft(None, (dh, dw))
        else:
            image.draft(None, _draft_size(w, h, options))
    _load(image)
    if orientation != 1:
        image = ImageOps.exif_transpose(image)
    image = _resize(_convert(image, _target_mode(image, options, fmt)), options)
    encoded = _encode(image, fmt, options.quality)
    return ImageResult(encoded, image.height, image.width, len(image.getbands()))


def thumbnail(data: bytes, side: int) -> tuple[bytes, int, int]:
    """A PNG of at most `side` x `side` pixels of the image in `data`, and the image's width
    and height (the report's thumbnails); BadFileError when it does not decode."""
    image = _open(data, Image.MAX_IMAGE_PIXELS or 2**31)
    _load(image)
    width, height = image.size
    small = image.convert("RGBA" if "A" in image.getbands() else "RGB")
    small.thumbnail((side, side), _RESAMPLE)
    out = io.BytesIO()
    small.save(out, format="PNG")
    return out.getvalue(), width, height
