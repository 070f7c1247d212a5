"""`tfrecord-etl verify` at scale: per-record time and peak RSS at 1M and 8M records, the code
before the batch verify against the current tree, in one run, on the same outputs.

    python bench/verify_scale.py                          # 1M and 8M, source compared at 1M
    python bench/verify_scale.py --rows 200000,1600000 --source-rows 200000

The outputs are the bench's basic table (`bench/tables.py` `make_table("basic", n)` written by
`write_parquet`), converted with `tfrecord-etl convert` (default options: gzip, 128 MiB shards).
The "before" tree is the commit `--before` (default 77e7abc, the layout commit) unpacked with
`git archive`. Each measurement is a fresh process whose import path is one tree: it imports
the verify (TensorFlow, Beam: seconds, and many more on a loaded machine, so left out of the
time) and then times `verify_output(OUTPUT[, source])`, what `tfrecord-etl verify OUTPUT
[--source]` runs; its peak RSS is the whole process's, from the kernel (wait4). A small output
is verified first in each tree (the compiled kernels' caches). The machine is shared: compare
the ratios of one run.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


_TIMED = """
import sys, time
from pipeline.verify.run import SourceRequest, verify_output
start = time.perf_counter()
report = verify_output(sys.argv[1], SourceRequest() if sys.argv[2] == "source" else None)
print(time.perf_counter() - start, len(report.findings))
"""


def _run(tree: Path, args: list[str]) -> tuple[float, int, str]:
    """(wall seconds, peak RSS bytes, stdout) of `python ARGS` in `tree`."""
    env = dict(os.environ, PYTHONPATH=str(tree), TF_CPP_MIN_LOG_LEVEL="3")
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        start = time.perf_counter()
        proc = subprocess.Popen([sys.executable, *args], cwd=tree, env=env, stdout=out, stderr=err)
        _, status, usage = os.wait4(proc.pid, 0)  # this child's own peak RSS
        seconds = time.perf_counter() - start
        proc.returncode = code = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        text, errors = out.read().decode(), err.read().decode(errors="replace")
    if code != 0:
        raise SystemExit(f"{' '.join(args)} in {tree} exited {code}:\n{errors[-3000:]}")
    return seconds, usage.ru_maxrss * 1024, text


def _verify(tree: Path, output: Path, mode: str) -> tuple[float, int]:
    """(seconds of verify_output alone, peak RSS bytes of the process)."""
    _, rss, out = _run(tree, ["-c", _TIMED, str(output), mode])
    seconds, findings = out.split()[-2:]
    if int(findings):
        raise SystemExit(f"{output}: verify found {findings} fault(s) in {tree}")
    return float(seconds), rss


def _output(work: Path, rows: int) -> Path:
    """The converted output of `rows` rows of the basic table (made once)."""
    out = work / f"out-{rows}"
    if (out / "manifest.json").exists():
        return out
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    from bench.tables import write_parquet

    source = work / f"basic-{rows}.parquet"
    if not source.exists():
        print(f"writing {rows:,} rows ...", file=sys.stderr, flush=True)
        write_parquet("basic", rows, source, 131_072)
    print(f"converting {rows:,} rows ...", file=sys.stderr, flush=True)
    _run(ROOT, ["-m", "pipeline", "convert", "--input", str(source), "--output", str(out)])
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", default="1000000,8000000", help="record counts (small, large)")
    ap.add_argument("--source-rows", default="1000000", help="counts also timed with --source")
    ap.add_argument("--before", default="77e7abc", help="the commit to compare against")
    ap.add_argument("--workdir", default=None)
    args = ap.parse_args()
    counts = [int(c) for c in args.rows.split(",")]
    with_source = {int(c) for c in args.source_rows.split(",") if c}
    work = Path(args.workdir or tempfile.mkdtemp(prefix="verify_scale_"))
    work.mkdir(parents=True, exist_ok=True)
    old = work / "before"
    if not old.exists():
        old.mkdir()
        archive = subprocess.run(
            ["git", "-C", str(ROOT), "archive", args.before], capture_output=True, check=True
        )
        subprocess.run(["tar", "-x", "-C", str(old)], input=archive.stdout, check=True)
    outputs = {n: _output(work, n) for n in [20_000, *counts]}
    for tree in (old, ROOT):  # warm: the compiled kernels' caches
        _verify(tree, outputs[20_000], "records")
        _verify(tree, outputs[20_000], "source")
    print("| records | verify | before s | before us/rec | before RSS MiB | after s | "
          "after us/rec | after RSS MiB | speed-up |")  # fmt: skip
    print("| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    rss: dict[tuple[str, str], dict[int, int]] = {}
    for n in counts:
        for mode in ("records", "--source"):
            if mode == "--source" and n not in with_source:
                continue
            b_s, b_rss = _verify(old, outputs[n], "source" if mode == "--source" else "records")
            a_s, a_rss = _verify(ROOT, outputs[n], "source" if mode == "--source" else "records")
            rss.setdefault(("before", mode), {})[n] = b_rss
            rss.setdefault(("after", mode), {})[n] = a_rss
            print(
                f"| {n:,} | {mode} | {b_s:.1f} | {1e6 * b_s / n:.2f} | {b_rss / 2**20:.0f} | "
                f"{a_s:.1f} | {1e6 * a_s / n:.2f} | {a_rss / 2**20:.0f} | {b_s / a_s:.2f}x |",
                flush=True,
            )
    if len(counts) > 1:
        lo, hi = counts[0], counts[-1]
        print(f"\npeak RSS at {hi:,} / at {lo:,} records:\n")
        for (tree, mode), by_n in sorted(rss.items()):
            if lo in by_n and hi in by_n:
                print(f"- {tree}, {mode}: {by_n[hi] / by_n[lo]:.2f}x")
    print(f"\noutputs and the before tree: {work}", file=sys.stderr)


if __name__ == "__main__":
    main()
