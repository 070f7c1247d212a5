"""Finishing a split's shards: when every temp file is written, they are renamed to
`<split>-SSSSS-of-NNNNN<suffix>`; a retried finalize finds them renamed and goes on. A temp file
an attempt did not commit is never renamed, and is deleted."""

from __future__ import annotations

from collections.abc import Sequence

from transforms.fs import FileSystems
from transforms.write.compression import file_suffix
from transforms.write.files import BlockFile, ShardFile, ShardPart, shard_name

__all__ = ["finalize_shards"]


def _empty_file(split: str, path: str, compression: str) -> ShardFile:
    """A shard with no record: an empty file (gzip, none) or an empty zlib stream."""
    part = BlockFile(path, compression, None, (0, 0), split).close()
    return ShardFile(split, path, 0, part.bytes)


def _make_dir(path: str) -> None:
    """Make a local directory the renames need (object stores have no directories)."""
    if "://" not in path and not FileSystems.exists(path):
        FileSystems.mkdirs(path)


def finalize_shards(
    _: None,
    parts: Sequence[ShardPart],
    split: str,
    prefix: str,
    compression: str,
    num_shards: int,
    temp_dir: str,
    remove_temp_dir: bool = False,
    suffix: str | None = None,
) -> list[ShardFile]:
    """Rename the split's temp files into `prefix-SSSSS-of-NNNNN<suffix>` in their order and
    remove the temp directory; returns the final shards.

    `num_shards` > 0 (a grouped write): shard i keeps index i and a shard that got no record is
    written empty; otherwise every file gets the next index. A split with no row gets one empty
    shard, so every split the manifest lists can be read. Idempotent: a part already renamed
    (a retried finalize) is taken as it is. `remove_temp_dir`: the directory is this split's
    alone (else other splits may still write there; the job removes it at the end). `suffix`:
    what shard names end with (default: by compression); the directory of `prefix` is made when
    it is not there (a layout's split directory).
    """
    suffix = file_suffix(compression) if suffix is None else suffix
    _make_dir(FileSystems.split(prefix)[0])
    ordered = sorted((p for p in parts if p.split == split), key=lambda p: p.order)
    count = num_shards if num_shards > 0 else max(1, len(ordered))
    index = {p.order: (p.order[0] if num_shards > 0 else i) for i, p in enumerate(ordered)}
    sources, targets, out = [], [], []
    for part in ordered:
        final = shard_name(prefix, index[part.order], count, suffix)
        out.append(ShardFile(split, final, part.rows, part.bytes))
        if FileSystems.exists(part.temp_path):
            sources.append(part.temp_path)
            targets.append(final)
        elif not FileSystems.exists(final):
            raise FileNotFoundError(f"{part.temp_path}: a written shard part is missing")
    if sources:
        FileSystems.rename(sources, targets)
    taken = {index[p.order] for p in ordered}
    for i in range(count):
        if i not in taken:
            out.append(_empty_file(split, shard_name(prefix, i, count, suffix), compression))
    leftovers = [m.path for r in FileSystems.match([FileSystems.join(temp_dir, f"{split}-*")])
                 for m in r.metadata_list]  # fmt: skip
    if leftovers:  # temp files of attempts that did not commit
        FileSystems.delete(leftovers)
    if remove_temp_dir and FileSystems.exists(temp_dir):
        FileSystems.delete([temp_dir])
    return sorted(out, key=lambda f: f.path)
