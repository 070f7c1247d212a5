"""Where a split's shards go and how they are named, per output layout.

- "flat" (the default): `<output>/<split>-SSSSS-of-NNNNN<suffix>`, the suffix by compression
  (`.tfrecord.gz`, `.tfrecord.deflate`, `.tfrecord`).
- "tfds": the flat names, uncompressed (`.tfrecord`); TFDS finds them through the
  `filepathTemplate` its `dataset_info.json` records (pipeline/output/layouts/tfds.py).
- "tfx": `<output>/Split-<split>/data_tfrecord-SSSSS-of-NNNNN.gz`, the names TFX's ExampleGen
  writes (gzip only).

Plain functions of names: the writer (transforms/write/beam.py) takes the prefix and suffix,
and the manifest lists the files it wrote, which is all a reader needs.
"""

from __future__ import annotations

from transforms.fs import FileSystems
from transforms.names import DEFAULT_LAYOUT, LAYOUTS
from transforms.write.compression import file_suffix

__all__ = [
    "DEFAULT_LAYOUT",
    "LAYOUTS",
    "TFX_SHARD_NAME",
    "TFX_SPLIT_DIR",
    "layout_compressions",
    "shard_patterns",
    "shard_prefix",
    "shard_suffix",
]

TFX_SPLIT_DIR = "Split-{split}"  # the directory of a split in a TFX Examples artifact
TFX_SHARD_NAME = "data_tfrecord"  # the shard prefix ExampleGen writes
_TFX_SUFFIX = {"gzip": ".gz"}


def layout_compressions(layout: str) -> tuple[str, ...] | None:
    """The compressions `layout` can hold; None: any."""
    return {"tfds": ("none",), "tfx": tuple(_TFX_SUFFIX)}.get(layout)


def shard_prefix(output: str, split: str, layout: str) -> str:
    """The path a split's shard names start with (shard index and suffix follow)."""
    if layout == "tfx":
        return FileSystems.join(output, TFX_SPLIT_DIR.format(split=split), TFX_SHARD_NAME)
    return FileSystems.join(output, split)


def shard_suffix(compression: str, layout: str) -> str:
    """What a shard name ends with after `-SSSSS-of-NNNNN`."""
    if layout == "tfx":
        return _TFX_SUFFIX[compression]
    return file_suffix(compression)


def shard_patterns(output: str, split: str) -> list[str]:
    """Globs of the shards of `split` in any layout and any shard count (for leftovers)."""
    return [
        FileSystems.join(output, f"{split}-?????-of-?????*"),
        FileSystems.join(
            output, TFX_SPLIT_DIR.format(split=split), f"{TFX_SHARD_NAME}-?????-of-?????*"
        ),
    ]
