"""Planning time for very many small Parquet files, on the storage emulator and locally: the plan
that reads the first footer only (one work item per file) against the plan that reads every
footer, in one run, on the same files.

    python bench/plan_files_gcs.py                    # 10,000 files of 100 rows; footers of 1,000
    python bench/plan_files_gcs.py --files 2000 --footer-files 500 --repeat 1

Setup (once per run, a few minutes): `--files` Parquet files of the bench's basic table are
written locally, then uploaded into the storage emulator (tests/gcs_emulator.py, 127.0.0.1),
`UPLOADS` at a time; the first `--footer-files` of them also under a folder of their own.
Then, in this process (imports and the encoder's compile done first, on one file), `plan_job`
is timed, best of `--repeat`:

- emulator, all files, first footer only (the plan as shipped: above LAZY_FOOTERS_REMOTE);
- emulator, `--footer-files` files, every footer read (LAZY_FOOTERS_REMOTE raised) and first
  footer only: the ratio per file is measured on the smaller set, since reading 10,000 footers
  on the emulator takes minutes (its per-file cost x `--files` is printed as an estimate);
- local, all files, every footer read (as shipped below LAZY_FOOTERS_LOCAL) and first footer
  only (LAZY_FOOTERS_LOCAL lowered).

The emulator is one Python process on this machine: its latency is not a real object store's.
The machine is shared: compare the ratios of one run, not seconds across runs.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

BUCKET = "bench"
UPLOADS = 4  # uploads in flight: 16 left the emulator (one process) refusing connections


def _upload(files: list[Path], prefix: str) -> None:
    from apache_beam.io.filesystems import FileSystems

    def one(path: Path) -> None:
        with FileSystems.create(f"{prefix}/{path.name}") as f:
            f.write(path.read_bytes())

    with ThreadPoolExecutor(UPLOADS) as pool:
        list(pool.map(one, files))


def _time_plan(pattern: str, repeat: int, local: int, remote: int) -> tuple[float, object]:
    """The best time of `repeat` plans of `pattern` with the given thresholds, and the plan."""
    import pipeline.plan as plan_module
    from pipeline.config import load_config

    saved = plan_module.LAZY_FOOTERS_LOCAL, plan_module.LAZY_FOOTERS_REMOTE
    plan_module.LAZY_FOOTERS_LOCAL, plan_module.LAZY_FOOTERS_REMOTE = local, remote
    try:
        best, plan = float("inf"), None
        for _ in range(repeat):
            config = load_config(None, {"input": [pattern], "output": tempfile.gettempdir()})
            start = time.perf_counter()
            plan = plan_module.plan_job(config)
            best = min(best, time.perf_counter() - start)
        return best, plan
    finally:
        plan_module.LAZY_FOOTERS_LOCAL, plan_module.LAZY_FOOTERS_REMOTE = saved


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--files", type=int, default=10_000)
    ap.add_argument("--footer-files", type=int, default=1_000)
    ap.add_argument("--rows-per-file", type=int, default=100)
    ap.add_argument("--repeat", type=int, default=2, help="plans timed per case: best of N")
    ap.add_argument("--workdir", default=None)
    ap.add_argument("--local-only", action="store_true", help="skip the emulator (and upload)")
    args = ap.parse_args()
    from gcs_emulator import GcsEmulator

    from bench.plan_files import make_files
    from pipeline.plan import LAZY_FOOTERS_LOCAL, LAZY_FOOTERS_REMOTE

    work = Path(args.workdir or tempfile.mkdtemp(prefix="plan_files_gcs_"))
    data = work / "files"
    if not (data / f"part-{args.files - 1:05d}.parquet").exists():
        print(f"writing {args.files} files of {args.rows_per_file} rows ...", file=sys.stderr)
        make_files(data, args.files, args.rows_per_file)
    files = sorted(data.glob("part-*.parquet"))[: args.files]
    lazy, every = (1, 1), (10**9, 10**9)  # thresholds: first footer only, every footer
    rows = []

    def case(where: str, pattern: str, n: int, how: str, thresholds: tuple[int, int]) -> float:
        seconds, plan = _time_plan(pattern, args.repeat, *thresholds)
        rows.append((where, n, how, seconds, len(plan.work), len(plan.shards.tasks)))
        print(f"  {where} {n} files, {how}: {seconds:.2f} s", file=sys.stderr, flush=True)
        return seconds

    upload = gcs_all = gcs_every = gcs_lazy = 0.0
    if not args.local_only:
        with GcsEmulator((BUCKET,)) as emulator, emulator.environ():
            start = time.perf_counter()
            _upload(files, f"gs://{BUCKET}/all")
            _upload(files[: args.footer_files], f"gs://{BUCKET}/some")
            upload = time.perf_counter() - start
            print(f"uploaded in {upload:.0f} s", file=sys.stderr, flush=True)
            _time_plan(f"gs://{BUCKET}/all/{files[0].name}", 1, *every)  # imports, compile
            shipped = (LAZY_FOOTERS_LOCAL, LAZY_FOOTERS_REMOTE)
            pattern = f"gs://{BUCKET}/all/*.parquet"
            gcs_all = case("emulator", pattern, args.files, "shipped", shipped)
            some = f"gs://{BUCKET}/some/*.parquet"
            gcs_every = case("emulator", some, args.footer_files, "every footer", every)
            gcs_lazy = case("emulator", some, args.footer_files, "first footer only", lazy)
    else:
        _time_plan(str(files[0]), 1, *every)  # imports, compile
    local = str(data / "part-*.parquet")
    local_every = case("local", local, args.files, "every footer", every)
    local_lazy = case("local", local, args.files, "first footer only", lazy)

    print(f"{args.files:,} files of {args.rows_per_file} rows (bench table basic); "
          f"thresholds as shipped: {LAZY_FOOTERS_REMOTE} remote, {LAZY_FOOTERS_LOCAL:,} local"
          + ("\n" if args.local_only else f"; upload {upload:.0f} s\n"))  # fmt: skip
    print("| where | files | plan | seconds | ms/file | work items | tasks |")
    print("| --- | ---: | --- | ---: | ---: | ---: | ---: |")
    for where, n, how, seconds, items, tasks in rows:
        print(f"| {where} | {n:,} | {how} | {seconds:.2f} | {1000 * seconds / n:.2f} | "
              f"{items:,} | {tasks:,} |")  # fmt: skip
    if not args.local_only:
        per_file = gcs_every / args.footer_files
        print(f"\nemulator, {args.footer_files:,} files: every footer / first footer only = "
              f"{gcs_every / gcs_lazy:.1f}x; every footer of {args.files:,} files, estimated at "
              f"{1000 * per_file:.1f} ms a file: {per_file * args.files:.0f} s "
              f"(first footer only, measured: {gcs_all:.1f} s)")  # fmt: skip
    print(f"local, {args.files:,} files: every footer / first footer only = "
          f"{local_every / local_lazy:.2f}x")  # fmt: skip
    print(f"\nfiles: {work}", file=sys.stderr)


if __name__ == "__main__":
    main()
