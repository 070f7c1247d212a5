"""The launcher's lines on stderr: text, one JSON object per line (`--log-format json`), or none
but errors and the summary (`--quiet`).

stdout keeps what it always held, the human summary and the JSON summary line last. stderr carries
what happens meanwhile: notes, progress (pipeline/cli/progress.py), a Dataflow job's id and states
(pipeline/engines/beam/follow.py). With `--log-format json` every stderr line is a JSON object with
`time` (UTC, ISO 8601), `level` and `event`: the launcher's own events carry their fields, Python
logging records (Beam's included) are `"event": "log"`, and any other line written to stderr (an
error message) is `"event": "message"` with the line as `message`.
"""

from __future__ import annotations

import contextlib
import datetime
import io
import json
import logging
import sys
from collections.abc import Iterator
from typing import Any, TextIO

__all__ = ["JobLog", "JsonFormatter", "JsonLines", "job_log", "json_object"]


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).isoformat(timespec="milliseconds")


def json_object(level: str, event: str, **fields: Any) -> str:
    """One JSON log line (no newline inside, none at the end)."""
    record = {"time": _now(), "level": level, "event": event, **fields}
    return json.dumps(record, separators=(",", ":"), default=str)


class JsonLines(io.TextIOBase):
    """A text stream that writes each line to `target` as a JSON object: a line that is one
    already passes as it is; another becomes `{"event": "message", "message": line}`, at level
    error or warning when it says so (`tfrecord-etl: error: ...`)."""

    def __init__(self, target: TextIO) -> None:
        super().__init__()
        self._target = target
        self._pending = ""

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        self._pending += text
        *lines, self._pending = self._pending.split("\n")
        for line in lines:
            self._target.write(self._line(line) + "\n")
        return len(text)

    @staticmethod
    def _line(line: str) -> str:
        if line.startswith("{"):
            try:
                if isinstance(json.loads(line), dict):
                    return line
            except ValueError:
                pass
        head = line[:40]
        level = "error" if "error:" in head else "warning" if "warning:" in head else "info"
        return json_object(level, "message", message=line)

    def flush(self) -> None:
        if self._pending:
            self.write("\n")
        self._target.flush()


class JsonFormatter(logging.Formatter):
    """A logging record as one JSON line: `"event": "log"`, the logger's name, the message."""

    def format(self, record: logging.LogRecord) -> str:
        fields: dict[str, Any] = {"logger": record.name, "message": record.getMessage()}
        if record.exc_info:
            fields["exception"] = self.formatException(record.exc_info)
        return json_object(record.levelname.lower(), "log", **fields)


class JobLog:
    """Where the launcher's events go: `event(name, text, **fields)` prints `tfrecord-etl:
    text` (text) or a JSON object with the fields (json); nothing when quiet."""

    def __init__(self, fmt: str = "text", quiet: bool = False) -> None:
        if fmt not in ("text", "json"):
            raise ValueError(f"log format {fmt!r} is not one of ['text', 'json']")
        self.json = fmt == "json"
        self.quiet = quiet

    @property
    def stream(self) -> TextIO:
        return sys.stderr  # looked up at each write: whatever stderr is then

    def event(self, event: str, text: str, level: str = "info", **fields: Any) -> None:
        if self.quiet:
            return
        line = json_object(level, event, **fields) if self.json else f"tfrecord-etl: {text}"
        print(line, file=self.stream, flush=True)


@contextlib.contextmanager
def job_log(fmt: str | None, quiet: bool | None) -> Iterator[JobLog]:
    """The run's JobLog; meanwhile, with json, stderr and the root logger's handlers write JSON
    lines, and with quiet, logging shows errors only."""
    log = JobLog(fmt or "text", bool(quiet))
    root = logging.getLogger()
    level = root.level
    formatters = [(h, h.formatter) for h in root.handlers]
    with contextlib.ExitStack() as stack:
        if log.quiet:
            root.setLevel(logging.ERROR)
        if log.json:
            for handler, _ in formatters:
                handler.setFormatter(JsonFormatter())
            lines = JsonLines(sys.stderr)
            stack.enter_context(contextlib.redirect_stderr(lines))
            stack.callback(lines.flush)
        try:
            yield log
        finally:
            root.setLevel(level)
            for handler, formatter in formatters:
                handler.setFormatter(formatter)
