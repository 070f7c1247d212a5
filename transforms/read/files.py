"""Input files on any Beam filesystem: the error every reader raises, and how a file is opened."""

from __future__ import annotations

from typing import IO

from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems

__all__ = ["InputError", "is_local", "open_input"]


class InputError(ValueError):
    """An input that cannot be read: the message names the file."""



def is_local(path: str) -> bool:
    return "://" not in path


def open_input(path: str) -> IO[bytes] | str:
    """A local path as is (pyarrow memory-maps it, and decompresses .gz itself); else a stream."""
    if is_local(path):
        return path
    return FileSystems.open(path, compression_type=CompressionTypes.AUTO)
