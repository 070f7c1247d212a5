"""A real Dask cluster on 127.0.0.1 for the tests and the bench: a `dask scheduler` and `dask
worker` processes (one thread each, no nanny, so that a killed worker stays dead), each in its
own process group, stopped (and killed if need be) on exit.

    with DaskCluster(workers=2) as cluster:
        ... --runner=DaskRunner --dask_client_address=cluster.address
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from types import TracebackType
from typing import IO

from local_server import free_port

__all__ = ["DaskCluster", "free_port"]

REPO = Path(__file__).resolve().parents[1]
STARTUP_SECONDS = 60.0


def _env(extra_path: Path | None = None) -> dict[str, str]:
    """The project (and `extra_path`, for a preload module) importable by the workers."""
    env = dict(os.environ)
    paths = [str(REPO), *([str(extra_path)] if extra_path else [])]
    if env.get("PYTHONPATH"):
        paths.append(env["PYTHONPATH"])
    env["PYTHONPATH"] = os.pathsep.join(paths)
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    return env


class DaskCluster:
    """`workers` worker processes; `preload`: a module name every worker imports at start (found
    on `preload_path`); `env`: more environment for the workers."""

    def __init__(
        self,
        workers: int = 2,
        preload: str | None = None,
        preload_path: Path | None = None,
        env: dict[str, str] | None = None,
        log_dir: Path | None = None,
    ) -> None:
        self.port = free_port()
        self.address = f"tcp://127.0.0.1:{self.port}"
        self._count = workers
        self._preload, self._preload_path = preload, preload_path
        self._extra_env = env or {}
        self.log_dir = log_dir
        self.scheduler: subprocess.Popen | None = None
        self.workers: list[subprocess.Popen] = []
        self._logs: list[IO[bytes]] = []

    def _start(self, args: list[str], name: str) -> subprocess.Popen:
        log: IO[bytes] | int = subprocess.DEVNULL
        if self.log_dir:
            log = open(self.log_dir / f"{name}.log", "wb")
            self._logs.append(log)
        return subprocess.Popen(
            [sys.executable, "-m", "distributed.cli.dask_" + args[0], *args[1:]],
            env={**_env(self._preload_path), **self._extra_env},
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group: killed as one
        )

    def add_worker(self, wait: bool = True) -> subprocess.Popen:
        """Start one more worker (one process, one thread); `wait`: until the scheduler has it."""
        args = [
            "worker",
            self.address,
            "--host",
            "127.0.0.1",
            "--nthreads",
            "1",
            "--nworkers",
            "1",
            "--no-nanny",
            "--no-dashboard",
            "--death-timeout",
            "60",
        ]
        if self._preload:
            args += ["--preload", self._preload]
        proc = self._start(args, f"worker-{len(self.workers)}")
        self.workers.append(proc)
        if wait:
            self.wait_for_workers(len([w for w in self.workers if w.poll() is None]))
        return proc

    def wait_for_workers(self, count: int) -> None:
        from distributed import Client

        with Client(self.address, timeout=STARTUP_SECONDS) as client:
            client.wait_for_workers(count, timeout=STARTUP_SECONDS)

    def kill_worker(self, proc: subprocess.Popen) -> None:
        """SIGKILL a worker process (as a machine lost would)."""
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)

    def __enter__(self) -> DaskCluster:
        try:
            self.scheduler = self._start(
                [
                    "scheduler",
                    "--host",
                    "127.0.0.1",
                    "--port",
                    str(self.port),
                    "--no-dashboard",
                ],
                "scheduler",
            )
            self._wait_for_port()
            for _ in range(self._count):
                self.add_worker()
        except BaseException:
            self.close()
            raise
        return self

    def _wait_for_port(self) -> None:
        deadline = time.monotonic() + STARTUP_SECONDS
        while time.monotonic() < deadline:
            if self.scheduler is not None and self.scheduler.poll() is not None:
                raise RuntimeError(f"dask scheduler exited with {self.scheduler.returncode}")
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", self.port)) == 0:
                    return
            time.sleep(0.2)
        raise TimeoutError(f"dask scheduler not listening on {self.address}")

    def close(self) -> None:
        """Workers killed (they hold nothing worth a graceful close), then the scheduler."""
        for proc in self.workers:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
        if self.scheduler is not None and self.scheduler.poll() is None:
            os.killpg(self.scheduler.pid, signal.SIGTERM)
        for proc in [*self.workers, *([self.scheduler] if self.scheduler else [])]:
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=15)
        for log in self._logs:
            log.close()
        self._logs = []

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
