"""The dead-letter output's Beam transforms: thin wiring over the plain functions of
`transforms.deadletter`."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import apache_beam as beam

from transforms.deadletter import ERRORS_PREFIX, ERRORS_SUFFIX, bad_row_key, error_line

__all__ = ["CountBadRows", "WriteErrors"]


class CountBadRows(beam.CombineFn):
    """Bad rows -> (count, reason of the first by source and row) for the threshold check;
    `first_bad_row` in one pass."""

    def create_accumulator(self) -> tuple[int, tuple | None]:
        return 0, None

    def add_input(self, acc: tuple[int, tuple | None], row: dict[str, Any]):  # noqa: ANN201
        key = bad_row_key(row)
        count, first = acc
        return count + 1, key if first is None or key < first else first

    def merge_accumulators(self, accs: Iterable[tuple[int, tuple | None]]):  # noqa: ANN201
        count, first = 0, None
        for c, f in accs:
            count += c
            if f is not None and (first is None or f < first):
                first = f
        return count, first

    def extract_output(self, acc: tuple[int, tuple | None]) -> tuple[int, str]:
        count, first = acc
        return count, "" if first is None else first[2]


@beam.typehints.with_input_types(dict[str, Any])
@beam.typehints.with_output_types(str)
class WriteErrors(beam.PTransform):
    """Bad-row dicts -> JSON lines files `<directory>/errors-SSSSS-of-NNNNN.jsonl` (none when
    there is no bad row); outputs their paths. `write_error_lines` writes the same in one shard."""

    def __init__(self, directory: str) -> None:
        super().__init__()
        self._directory = directory

    def expand(self, rows: beam.PCollection) -> beam.PCollection:
        return (
            rows
            | "ToJson" >> beam.Map(error_line)  # str: one JSON object
            | "Write"
            >> beam.io.WriteToText(
                f"{self._directory.rstrip('/')}/{ERRORS_PREFIX}",
                file_name_suffix=ERRORS_SUFFIX,
                skip_if_empty=True,
            )
        )
