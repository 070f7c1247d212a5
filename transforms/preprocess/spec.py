"""What a configured step is before it meets a schema: its name, parameters and origin."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

__all__ = ["Param", "StepConfig", "StepError"]


class StepError(ValueError):
    """A step that cannot be built: the message names the config file and the key."""


@dataclasses.dataclass(frozen=True)
class Param:
    """One parameter of a step: accepted Python (YAML) types, whether required, default."""

    types: tuple[type, ...]
    required: bool = False
    default: Any = None


@dataclasses.dataclass(frozen=True)
class StepConfig:
    """One entry of the config's `transforms:` list, parameters checked, defaults filled."""

    index: int
    kind: str
    params: Mapping[str, Any]
    configured: Mapping[str, Any]  # the parameters exactly as written (for the manifest)
    source: str  # the config file (for error messages)

    def key(self, param: str | None = None) -> str:
        base = f"transforms[{self.index}].{self.kind}"
        return base if param is None else f"{base}.{param}"

    def error(self, param: str | None, message: str) -> StepError:
        return StepError(f"{self.source}: key '{self.key(param)}': {message}")

    def __getitem__(self, name: str) -> Any:
        return self.params[name]
