"""The manifest's `sequence` section from a finished run: the planned layout and the counts."""

from __future__ import annotations

from pipeline.output.manifest import SequenceSection, StoredFeature
from transforms.encode.records import BatchStats
from transforms.sequence.layout import SequenceLayout

__all__ = ["sequence_section"]


def sequence_section(layout: SequenceLayout | None, stats: BatchStats) -> SequenceSection | None:
    """The section for `layout` (None: the records are Examples, no section)."""
    if layout is None:
        return None
    options = layout.options
    return SequenceSection(
        features=tuple(StoredFeature(s, int(stats.nulls.get(s.name, 0))) for s in layout.steps),
        steps=stats.steps,
        group_by=options.group_by,
        order_by=options.order_by,
        column=options.column,
        null_lists=0 if options.column is None else int(stats.nulls.get(options.column, 0)),
    )
