"""Measuring: in-process timings, the RSS of a process tree, job runs as subprocesses."""

from __future__ import annotations

import compileall
import functools
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
SCRIPT = Path(__file__).resolve().with_name("throughput.py")  # also the workers' entry point


@functools.cache
def byte_compiled(tree: Path = REPO) -> Path:
    """`tree` with its packages' bytecode written (`__pycache__`, ignored by git), as `pip
    install` leaves an installed package: where the environment sets PYTHONDONTWRITEBYTECODE,
    every run of `python -m pipeline` from a source tree would otherwise compile its ~150
    modules again (about 0.1 s of a run's serial start-up, measured on a 2-core machine), a
    cost no installed command pays."""
    for package in ("pipeline", "transforms"):
        if (tree / package).is_dir():
            compileall.compile_dir(tree / package, quiet=1)
    return tree


def timed(fn: Callable[[], Any], repeat: int = 1) -> dict[str, float]:
    """Best (least wall time) of `repeat` calls: wall and process CPU seconds."""
    best: dict[str, float] | None = None
    for _ in range(max(1, repeat)):
        w0, c0 = time.perf_counter(), time.process_time()
        fn()
        wall, cpu = time.perf_counter() - w0, time.process_time() - c0
        if best is None or wall < best["wall_s"]:
            best = {"wall_s": wall, "cpu_s": cpu}
    assert best is not None
    return best


def _children(pids: set[int]) -> set[int]:
    """`pids` and all their descendants (from /proc)."""
    parent: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        ppid = int(stat[stat.rindex(b")") + 2 :].split()[1])
        parent[int(entry)] = ppid
    out = set(pids)
    grew = True
    while grew:
        grew = False
        for pid, ppid in parent.items():
            if ppid in out and pid not in out:
                out.add(pid)
                grew = True
    return out


def _rss_bytes(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/statm", "rb") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, IndexError, ValueError):
        return 0


def _pss_bytes(pid: int) -> int:
    """The process's proportional set size: a page shared by k processes counts 1/k each."""
    try:
        with open(f"/proc/{pid}/smaps_rollup", "rb") as f:
            for line in f:
                if line.startswith(b"Pss:"):
                    return int(line.split()[1]) * 1024
    except (OSError, IndexError, ValueError):
        pass
    return 0


class TreeRss(threading.Thread):
    """Samples the summed RSS and PSS of a process and its descendants; keeps the peaks."""

    def __init__(self, pid: int, interval: float = 0.2) -> None:
        super().__init__(daemon=True)
        self.pid, self.interval, self.peak, self.peak_pss = pid, interval, 0, 0
        self._stop_event = threading.Event()

    def run(self) -> None:
        while not self._stop_event.is_set():
            pids = _children({self.pid})
            self.peak = max(self.peak, sum(_rss_bytes(p) for p in pids))
            self.peak_pss = max(self.peak_pss, sum(_pss_bytes(p) for p in pids))
            self._stop_event.wait(self.interval)

    def stop(self) -> None:
        self._stop_event.set()
        self.join()


# Linux keeps ru_maxrss across fork and exec, so a child started from this (large) process
# would report at least this process's RSS. A small launcher process starts the command and
# reports the command's own rusage (RUSAGE_CHILDREN of the launcher) on its last output line.
_LAUNCHER = """
import json, os, resource, subprocess, sys, time
start = time.monotonic()
rc = subprocess.call(sys.argv[1:])
wall = time.monotonic() - start
u = resource.getrusage(resource.RUSAGE_CHILDREN)
print("@@rusage " + json.dumps({"rc": rc, "wall_s": wall, "cpu_s": u.ru_utime + u.ru_stime,
                               "max_rss_kb": u.ru_maxrss}), flush=True)
sys.exit(rc)
"""


def run_process(
    cmd: Sequence[str], log: Path, extra_env: dict[str, str] | None = None
) -> dict[str, Any]:
    """Run `cmd` (with `extra_env` set); its wall time, CPU time (with its children) and peak
    RSS."""
    log.parent.mkdir(parents=True, exist_ok=True)
    byte_compiled()
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": os.environ.get("TF_CPP_MIN_LOG_LEVEL", "1")}
    env.update(extra_env or {})
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-c", _LAUNCHER, *cmd],
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=REPO,
            env=env,
        )
        sampler = TreeRss(proc.pid)
        sampler.start()
        proc.wait()
        sampler.stop()
    text = log.read_text(errors="replace")
    line = next((x for x in reversed(text.splitlines()) if x.startswith("@@rusage ")), None)
    usage = (
        json.loads(line.split(" ", 1)[1])
        if line
        else {"rc": proc.returncode, "wall_s": 0.0, "cpu_s": 0.0, "max_rss_kb": 0}
    )
    result = {
        "wall_s": usage["wall_s"],
        "cpu_s": usage["cpu_s"],
        "max_rss_mb": usage["max_rss_kb"] / 1024,  # the largest single process in the tree
        "tree_rss_mb": sampler.peak / 2**20,  # summed over the process tree, sampled every 0.2 s
        "tree_pss_mb": sampler.peak_pss / 2**20,  # the same, shared pages split between them
        "rc": usage["rc"],
    }
    if result["rc"] != 0:
        tail = text[-3000:]
        result["error"] = tail
        print(f"  !! {' '.join(cmd[:6])} ... exited {result['rc']}; log {log}:\n{tail}")
    return result


def output_bytes(directory: Path) -> int:
    return sum(
        p.stat().st_size for p in directory.rglob("*") if p.is_file() and p.name != "manifest.json"
    )


def best(fn: Callable[[], object], repeat: int) -> float:
    """The least wall time of `repeat` calls of `fn` in this process (seconds)."""
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


def convert_cmd(source: str | Path, out: Path, *flags: str) -> list[str]:
    """`python -m pipeline convert --input SOURCE --output OUT --overwrite FLAGS...`."""
    return [sys.executable, "-m", "pipeline", "convert", "--input", str(source), "--output",
            str(out), "--overwrite", *flags]  # fmt: skip


def load_avg() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def steady(
    small: dict[str, Any], large: dict[str, Any], n_small: int, n_large: int
) -> float | None:
    """Rows per second once running: the row difference over the wall-time difference."""
    dt = large["wall_s"] - small["wall_s"]
    if large.get("rc") or small.get("rc") or dt <= 0:
        return None
    return (n_large - n_small) / dt


def fixed_cost(run: dict[str, Any], rows: int, steady_rows_s: float | None) -> float | None:
    """Seconds not explained by the steady rate: startup, planning, pipeline setup, shutdown."""
    return None if not steady_rows_s else run["wall_s"] - rows / steady_rows_s


def measure(
    cmd: Sequence[str], out: Path, log: Path, rows: int, repeat: int, repeat_below_s: float
) -> dict[str, Any]:
    """Run a job up to `repeat` times (only while a run is shorter than `repeat_below_s`);
    the run with the least wall time is kept, with every wall time in `walls`."""
    best: dict[str, Any] | None = None
    walls = []
    for i in range(max(1, repeat)):
        shutil.rmtree(out, ignore_errors=True)
        r = run_process(cmd, log.with_name(f"{log.stem}-{i}.log"))
        r["bytes"] = output_bytes(out) if out.exists() else 0
        r["load"] = load_avg()
        walls.append(round(r["wall_s"], 2))
        if best is None or (r["rc"] == 0 and r["wall_s"] < best["wall_s"]) or best["rc"]:
            best = r
        if r["rc"] or r["wall_s"] >= repeat_below_s:
            break
    assert best is not None
    best["walls"] = walls
    best["rows"] = rows
    best["rows_s"] = rows / best["wall_s"]
    return best
