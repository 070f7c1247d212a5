"""Start-up of the command line: each command as a whole process on the bundled sample, median
wall time, CPU time and peak RSS of several runs, against the targets of docs/cli.md.

    python bench/startup.py                       # this tree, 5 runs of each command
    python bench/startup.py --before main         # and the tree of a commit, in the same run
    python bench/startup.py --runs 3 --commands help,inspect

Each run is a fresh `python -m pipeline ...` whose import path is one tree; its wall time is
the whole process's, its CPU time (user + system) and peak RSS the kernel's for that child
(wait4): on a loaded machine the wall time grows with the load, the CPU time much less. The
commands:
`help` (`--help`), `convert` (the sample to a new output, `--overwrite`), `plan` (the same
flags; skipped in a tree without it), `inspect` and `verify` of the converted output. Before
the timed runs each tree converts the sample once (the output that `inspect` and `verify` read)
and runs each command once untimed (the compiled kernels' caches of a freshly unpacked tree).
With `--before`, the runs of the
two trees alternate, so that load on the machine falls on both alike: compare the ratios of
one run.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from measure import byte_compiled

ROOT = Path(__file__).resolve().parent.parent
SAMPLE = "sample/trips.parquet"

# command -> (wall seconds, peak RSS MB or None): the targets (docs/cli.md)
TARGETS: dict[str, tuple[float, float | None]] = {
    "help": (0.3, None),
    "inspect": (1.0, 150.0),
    "verify": (2.0, None),
    "convert": (2.5, None),
    "plan": (2.5, None),
}


def _args(command: str, work: Path) -> list[str]:
    output = str(work / "out")
    job = ["--input", SAMPLE, "--output", str(work / "again"), "--overwrite"]
    return {
        "help": ["--help"],
        "convert": ["convert", *job],
        "plan": ["plan", *job],
        "inspect": ["inspect", output],
        "verify": ["verify", output],
    }[command]


def run(tree: Path, args: list[str], check: bool = True) -> tuple[float, float, float, int]:
    """(wall seconds, peak RSS MB, CPU seconds, exit code) of `python -m pipeline ARGS` in
    `tree`."""
    env = dict(os.environ, PYTHONPATH=str(tree))
    with tempfile.TemporaryFile() as err:
        start = time.perf_counter()
        proc = subprocess.Popen(
            [sys.executable, "-m", "pipeline", *args],
            cwd=tree,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=err,
        )
        _, status, usage = os.wait4(proc.pid, 0)
        seconds = time.perf_counter() - start
        code = os.waitstatus_to_exitcode(status)
        proc.returncode = code
        err.seek(0)
        text = err.read().decode(errors="replace")
    if check and code != 0:
        raise SystemExit(f"{' '.join(args)} in {tree} exited {code}:\n{text[-3000:]}")
    return seconds, usage.ru_maxrss / 1024, usage.ru_utime + usage.ru_stime, code


def unpack(commit: str, into: Path) -> Path:
    """The tree of `commit`, unpacked with git archive."""
    into.mkdir(parents=True)
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", commit], check=True, capture_output=True
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    return into


def _has_plan(tree: Path) -> bool:
    return run(tree, ["plan", "--help"], check=False)[3] == 0


def measure(trees: dict[str, Path], work: Path, commands: list[str], runs: int) -> dict:
    """{tree name: {command: [(seconds, rss MB, cpu seconds), ...]}}; the runs of the trees
    alternate. A first, untimed round warms each tree (its compiled kernels' caches, the page
    cache)."""
    results: dict[str, dict[str, list[tuple[float, float, float]]]] = {n: {} for n in trees}
    dirs = {}
    for name, tree in trees.items():
        byte_compiled(tree)  # as pip leaves an installed package
        dirs[name] = work / name
        dirs[name].mkdir()
        print(f"# {name}: converting the sample once ({tree})", file=sys.stderr, flush=True)
        run(tree, ["convert", "--input", SAMPLE, "--output", str(dirs[name] / "out")])
    skip = {name: not _has_plan(tree) for name, tree in trees.items()}
    for i in range(runs + 1):
        print(f"# round {i} of {runs} (0: warm-up)", file=sys.stderr, flush=True)
        for command in commands:
            for name, tree in trees.items():
                if command == "plan" and skip[name]:
                    continue
                seconds, rss, cpu, _ = run(tree, _args(command, dirs[name]))
                if i > 0:
                    results[name].setdefault(command, []).append((seconds, rss, cpu))
    return results


def report(results: dict, commands: list[str]) -> str:
    """A markdown table: per command its target, and per tree the medians of wall time, CPU
    time (user + system) and peak RSS; with two trees the ratio of their wall times."""
    names = list(results)
    head = ["command", "target"]
    for name in names:
        head += [f"{name}: wall s", "cpu s", "RSS MB"]
    if len(names) == 2:
        head.append(f"wall {names[0]} / {names[1]}")
    lines = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    for command in commands:
        seconds, mb = TARGETS[command]
        target = f"<= {seconds} s" + (f", <= {mb:.0f} MB" if mb else "")
        row = [command, target]
        medians = []
        for name in names:
            got = results[name].get(command)
            if not got:
                row += ["-", "-", "-"]
                medians.append(None)
                continue
            wall, rss, cpu = (statistics.median(g[k] for g in got) for k in range(3))
            medians.append(wall)
            over = "" if wall <= seconds and (mb is None or rss <= mb) else " (over)"
            row += [f"{wall:.2f}{over}", f"{cpu:.2f}", f"{rss:.0f}"]
        if len(names) == 2:
            a, b = medians
            row.append(f"{a / b:.1f}x" if a and b else "-")
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5, help="runs of each command (median)")
    parser.add_argument("--before", help="also measure the tree of this commit (git archive)")
    parser.add_argument(
        "--commands",
        default="help,inspect,verify,convert,plan",
        help="comma-separated, of: " + ",".join(TARGETS),
    )
    parser.add_argument("--keep", action="store_true", help="keep the work directory")
    args = parser.parse_args()
    commands = args.commands.split(",")
    unknown = sorted(set(commands) - set(TARGETS))
    if unknown:
        parser.error(f"unknown commands {unknown}")
    work = Path(tempfile.mkdtemp(prefix="startup-"))
    try:
        trees = {}
        if args.before:
            trees["before"] = unpack(args.before, work / "tree-before")
        trees["this tree" if not args.before else "after"] = ROOT
        results = measure(trees, work, commands, args.runs)
        load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
        print(f"median of {args.runs} runs; {os.cpu_count()} cores, load average {load}")
        print(report(results, commands))
    finally:
        if args.keep:
            print(f"# kept {work}", file=sys.stderr)
        else:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
