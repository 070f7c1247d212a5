"""Input files on any Beam filesystem: the error every reader raises, how a file is opened, and
the configured types of columns (`columns.<name>.type`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import IO, Any

import pyarrow as pa

from transforms.encode.schema import SchemaError
from transforms.fs import CompressionTypes, FileSystems
from transforms.read.type_names import parse_type

__all__ = ["InputError", "configured_types", "is_local", "name_files", "open_input"]


class InputError(ValueError):
    """An input that cannot be read: the message names the file."""


def name_files(paths: Sequence[str], shown: int = 3) -> str:
    """The first `shown` of `paths` for an error line, and how many more (an input of thousands
    of files gives one line, not all their names)."""
    more = len(paths) - shown
    return ", ".join(paths[:shown]) + (f" and {more:,} more" if more > 0 else "")


def is_local(path: str) -> bool:
    return "://" not in path


def open_input(path: str) -> IO[bytes] | str:
    """A local path as is (pyarrow memory-maps it, and decompresses .gz itself); else a stream."""
    if is_local(path):
        return path
    return FileSystems.open(path, compression_type=CompressionTypes.AUTO)


def configured_types(columns: Mapping[str, Any]) -> dict[str, pa.DataType]:
    """The Arrow types set in the config's `columns:` (`type`, an Arrow type as pyarrow prints
    it: int64, string, timestamp[ms, tz=UTC], decimal128(10, 2), list<int64>, map<string,
    int64>, struct<x: int64>, ...; transforms/read/type_names.py), by column name."""
    out = {}
    for name, options in columns.items():
        alias = getattr(options, "type", None)
        if alias is None:
            continue
        try:
            out[name] = parse_type(str(alias))
        except ValueError as err:
            raise SchemaError(f"columns.{name}.type: {err}") from err
    return out
