"""Scheduled runs' path templates: `{date}` in an input or output path becomes the run date as
YYYY-MM-DD; `{date:FORMAT}` formats it with strftime (`{date:%Y/%m/%d}`). The JSON summary a
scheduler reads is the command line's (pipeline/cli/summary.py).
"""

from __future__ import annotations

import dataclasses
import datetime
import re
from typing import TYPE_CHECKING

from pipeline.job.errors import ConfigError

if TYPE_CHECKING:
    from pipeline.job.config import JobConfig

__all__ = ["apply_date", "has_date_template", "parse_date", "render_date"]

_TEMPLATE = re.compile(r"\{date(?::([^{}]*))?\}")


def parse_date(text: str) -> datetime.date:
    """The run date given as --date (ISO: 2026-12-01)."""
    try:
        return datetime.date.fromisoformat(text)
    except ValueError as err:
        raise ConfigError(f"--date {text!r}: expected a date as YYYY-MM-DD") from err


def has_date_template(path: str) -> bool:
    return _TEMPLATE.search(path) is not None


def render_date(path: str, date: datetime.date) -> str:
    """`path` with each `{date}` / `{date:FORMAT}` replaced; other braces are left alone."""
    return _TEMPLATE.sub(lambda m: date.strftime(m.group(1) or "%Y-%m-%d"), path)


def apply_date(config: JobConfig, date: datetime.date | None) -> JobConfig:
    """The config with the run date filled into its input and output paths.

    A template without a date, or a date no path uses, is an error: either would make every
    scheduled run read or write the same place.
    """
    paths = [*config.inputs, config.output]
    templated = [p for p in paths if has_date_template(p)]
    if date is None:
        if templated:
            raise ConfigError(f"{templated[0]}: the path has {{date}}; pass --date YYYY-MM-DD")
        return config
    if not templated:
        raise ConfigError("--date is given but no --input or --output path has {date}")
    return dataclasses.replace(
        config,
        inputs=tuple(render_date(p, date) for p in config.inputs),
        output=render_date(config.output, date),
    )
