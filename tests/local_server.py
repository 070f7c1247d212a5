"""A server process on 127.0.0.1 that a test starts and always stops: the storage emulators'
(tests/gcs_emulator.py, tests/s3_emulator.py, tests/azure_emulator.py) common part.

The server runs in its own process group, so a test that fails still stops it (and all of its
children), in its own temp folder (its working directory), and its output goes to a log there,
quoted when it exits early.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

__all__ = ["LocalServer", "free_port"]


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on (now)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class LocalServer:
    """One server process on 127.0.0.1:`port`; a context manager. A subclass says how to start
    it (`command`), when it answers (`ready`), what to do once it does (`prepared`) and what a
    client process needs to reach it (`environment`)."""

    name = "server"

    def __init__(self) -> None:
        self.workdir = Path(tempfile.mkdtemp(prefix=f"{self.name.lower().replace(' ', '-')}-"))
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = self.workdir / "server.log"
        self._process: subprocess.Popen | None = None

    def command(self) -> list[str]:
        raise NotImplementedError

    def ready(self) -> bool:
        raise NotImplementedError

    def prepared(self) -> None:
        """Called once the server answers (e.g. to create buckets)."""

    def environment(self) -> dict[str, str]:
        return {}

    def __enter__(self) -> LocalServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
        shutil.rmtree(self.workdir, ignore_errors=True)

    def start(self, timeout: float = 60.0) -> None:
        with open(self.log, "wb") as log:
            self._process = subprocess.Popen(
                self.command(),
                cwd=self.workdir,  # whatever the server writes beside it stays in its folder
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its own process group: stop() ends all of it
            )
        deadline = time.monotonic() + timeout
        while not self.ready():
            if self._process.poll() is not None:
                raise RuntimeError(
                    f"the {self.name} exited with {self._process.returncode}: "
                    f"{self.log.read_text(errors='replace')[-2000:]}"
                )
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"the {self.name} did not answer on {self.url} in {timeout} s")
            time.sleep(0.05)
        try:
            self.prepared()
        except BaseException:  # a server that could not be prepared is not left running
            self.stop()
            raise

    def stop(self) -> None:
        process, self._process = self._process, None
        if process is None or process.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait()

    @contextlib.contextmanager
    def environ(self) -> Iterator[None]:
        """This process's environment set to reach the server, restored on exit."""
        saved = {key: os.environ.get(key) for key in self.environment()}
        os.environ.update(self.environment())
        try:
            yield
        finally:
            for key, value in saved.items():
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value
