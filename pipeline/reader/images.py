"""Image features decoded in a restored batch (`load_dataset(..., decode_images=True)`).

A feature the manifest marks as an image (a `files:` image column: its `image` entry, the
formats and the [height, width, channels] the images decode to) holds one encoded JPEG or PNG
per row. Here each row's bytes go through `tf.io.decode_image` (channels as the manifest says,
first frame only) into uint8 pixels:

- every image of one size (an exact `resize`, and `channels`): a dense `[batch, H, W, C]`;
- else a `tf.RaggedTensor` `[batch, None, None, C]` (`[batch, None, None, None]` when the
  channels differ too);
- a null row (no file reference) decodes to an image of no pixels (dense: zeros, with the
  feature's `__present` mask saying which rows were null).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import tensorflow as tf

from pipeline.output.manifest import StoredFeature

__all__ = ["decode_images", "image_features"]


def image_features(features: Sequence[StoredFeature]) -> list[StoredFeature]:
    """The features that hold encoded images."""
    return [f for f in features if f.spec.image is not None]


def _decoder(channels: int, shape: tuple[int, int, int]) -> Any:
    fixed = all(d >= 0 for d in shape)

    def decode(data: tf.Tensor) -> tf.Tensor:
        def pixels() -> tf.Tensor:
            image = tf.io.decode_image(data, channels=channels, expand_animations=False)
            if fixed:
                image = tf.ensure_shape(image, shape)
            return image

        empty = [*shape[:2], channels] if fixed else [0, 0, channels]
        return tf.cond(tf.strings.length(data) > 0, pixels, lambda: tf.zeros(empty, tf.uint8))

    return decode


def _decode(values: tf.Tensor, shape: tuple[int, int, int]) -> Any:
    """[batch] encoded images -> their pixels (dense or ragged, see the module docstring)."""
    channels = max(shape[2], 0)  # 0: as each image is stored
    decode = _decoder(channels, shape)
    if all(d >= 0 for d in shape):
        return tf.map_fn(decode, values, fn_output_signature=tf.TensorSpec(shape, tf.uint8))
    if channels:
        spec = tf.RaggedTensorSpec([None, None, channels], tf.uint8, ragged_rank=1)
        return tf.map_fn(
            lambda d: tf.RaggedTensor.from_tensor(decode(d), ragged_rank=1),
            values,
            fn_output_signature=spec,
        )
    spec = tf.RaggedTensorSpec([None, None, None], tf.uint8, ragged_rank=2)

    def ragged(data: tf.Tensor) -> tf.RaggedTensor:
        image = decode(data)
        image.set_shape([None, None, None])
        return tf.RaggedTensor.from_tensor(image, ragged_rank=2)

    return tf.map_fn(ragged, values, fn_output_signature=spec)


def decode_images(restored: Mapping[str, Any], features: Sequence[StoredFeature]) -> dict[str, Any]:
    """`restored` (a batch from `restore`) with each image feature's bytes decoded to pixels."""
    out = dict(restored)
    for f in image_features(features):
        if f.name in out:
            out[f.name] = _decode(out[f.name], f.spec.image.shape)
    return out
