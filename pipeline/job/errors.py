"""What a mistake in the job's definition raises: `ConfigError` (a config value missing, unknown
or of the wrong type; its message names the file and key), and `closest`, the option a mistyped
name most likely meant. Light on purpose: the command line imports it before anything else."""

from __future__ import annotations

import difflib
from collections.abc import Iterable

__all__ = ["ConfigError", "closest"]


class ConfigError(ValueError):
    """A config value that is missing, unknown or of the wrong type; names the file and key."""


def closest(word: str, choices: Iterable[str]) -> str | None:
    """The choice a mistyped `word` most likely meant, or None when none is close."""
    close = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.7)
    return close[0] if close else None
