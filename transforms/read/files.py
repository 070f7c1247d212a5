"""Input files on any Beam filesystem: the error every reader raises, how a file is opened, and
the configured types of columns (`columns.<name>.type`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import IO, Any

import pyarrow as pa

from transforms.encode.schema import SchemaError
from transforms.fs import CompressionTypes, FileSystems

__all__ = ["InputError", "configured_types", "is_local", "open_input"]


class InputError(ValueError):
    """An input that cannot be read: the message names the file."""


def is_local(path: str) -> bool:
    return "://" not in path


def open_input(path: str) -> IO[bytes] | str:
    """A local path as is (pyarrow memory-maps it, and decompresses .gz itself); else a stream."""
    if is_local(path):
        return path
    return FileSystems.open(path, compression_type=CompressionTypes.AUTO)


def configured_types(columns: Mapping[str, Any]) -> dict[str, pa.DataType]:
    """The Arrow types set in the config's `columns:` (`type`, an Arrow type name such as
    int64, float32, string, date32), by column name."""
    out = {}
    for name, options in columns.items():
        alias = getattr(options, "type", None)
        if alias is None:
            continue
        try:
            out[name] = pa.type_for_alias(str(alias))
        except (ValueError, KeyError) as err:
            raise SchemaError(f"columns.{name}.type: unknown type {alias!r}") from err
    return out
