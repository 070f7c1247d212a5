"""A Dask worker preload (`dask worker --preload dask_fault`) for tests/test_dask.py: the first
shard write on any worker raises once, after its block reached the temp file.

The file named by TFRECORD_ETL_TEST_FAULT_MARKER decides: while it reads "armed", the next
`BlockFile.write` claims it (an atomic rename, so one write on one worker fires), writes
"fired" in its place, and raises. No product code changes: the class is wrapped in the worker.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from transforms.write.files import BlockFile

__all__ = ["FAULT_MESSAGE", "MARKER_ENV", "dask_setup"]

MARKER_ENV = "TFRECORD_ETL_TEST_FAULT_MARKER"
FAULT_MESSAGE = "injected write fault"

_write = BlockFile.write


def _claim(marker: Path) -> bool:
    """True for the one caller that takes the armed marker."""
    try:
        if marker.read_text(encoding="utf-8") != "armed":
            return False
        os.rename(marker, marker.with_name(marker.name + ".claimed"))
    except OSError:  # gone, or another write took it first
        return False
    marker.write_text("fired", encoding="utf-8")
    return True


def _faulty_write(self: BlockFile, *args: Any, **kwargs: Any) -> None:
    _write(self, *args, **kwargs)
    marker = os.environ.get(MARKER_ENV)
    if marker and _claim(Path(marker)):
        raise RuntimeError(f"{FAULT_MESSAGE} ({self.path})")


def dask_setup(worker: Any) -> None:
    """Called by the worker at start: wrap the writer."""
    BlockFile.write = _faulty_write
