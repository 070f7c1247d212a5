"""Planning time for very many small Parquet files, on the storage emulator and locally: the plan
that reads the first footer only (one work item per file) against the plan that reads every
footer, in one run, on the same files.

    python bench/plan_files_gcs.py                    # 10,000 files of 100 rows; footers of 1,000
    python bench/plan_files_gcs.py --files 2000 --footer-files 500 --repeat 1

Setup (once per run, a few minutes): `--files` Parquet files of the bench's basic table are
written locally (kept in `--workdir` for the next run), then uploaded into the storage emulator
(tests/gcs_emulator.py, 127.0.0.1) with google-cloud-storage's transfer manager, one request a
file, `UPLOADS` at a time; the first `--footer-files` of them also under a folder of their own.
Then, in this process (imports and the encoder's compile done first, on one file), `plan_job`
is timed, best of `--repeat`, and each stage of the best plan (listing, footers, schema check,
work items, first batch, size estimate, shard plan):

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
import contextlib
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

BUCKET = "bench"
UPLOADS = 4  # uploads in flight (the emulator serves one request at a time, and queues 5)


def _upload(files: list[Path], prefix: str) -> None:
    """Each file to gs://BUCKET/`prefix`/NAME: one multipart request each, `UPLOADS` at a time
    (google-cloud-storage's transfer manager, threads)."""
    from google.cloud.storage import Client, transfer_manager

    bucket = Client().bucket(BUCKET)
    pairs = [(str(path), bucket.blob(f"{prefix}/{path.name}")) for path in files]
    transfer_manager.upload_many(
        pairs,
        worker_type=transfer_manager.THREAD,
        max_workers=UPLOADS,
        raise_exception=True,
    )


# What plan_job calls, by stage (names as pipeline/job/plan.py imports them)
STAGES = {
    "match_input_files": "listing",
    "parquet_footer": "footers",
    "parquet_footers": "footers",
    "input_schema": "schema check",
    "plan_work": "work items",
    "plan_whole_files": "work items",
    "_first_batch": "first batch",
    "output_bytes_per_input_byte": "size estimate",
    "plan_shards": "shard plan",
}
STAGE_NAMES = list(dict.fromkeys(STAGES.values()))


@contextlib.contextmanager
def _stages() -> Iterator[dict[str, float]]:
    """Seconds spent in each stage of the plans run inside (plan_job's calls, timed)."""
    import pipeline.job.plan as plan_module

    spent = dict.fromkeys(STAGE_NAMES, 0.0)
    saved = {name: getattr(plan_module, name) for name in STAGES}

    def timed(name: str, fn: Callable) -> Callable:
        def call(*args: object, **kwargs: object) -> object:
            start = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                spent[STAGES[name]] += time.perf_counter() - start

        return call

    for name, fn in saved.items():
        setattr(plan_module, name, timed(name, fn))
    try:
        yield spent
    finally:
        for name, fn in saved.items():
            setattr(plan_module, name, fn)


def _time_plan(
    pattern: str, repeat: int, local: int, remote: int
) -> tuple[float, object, dict[str, float]]:
    """The best time of `repeat` plans of `pattern` with the given thresholds, the plan, and
    the seconds of each stage of that best plan."""
    import pipeline.job.plan as plan_module
    from pipeline.job.config import load_config

    saved = plan_module.LAZY_FOOTERS_LOCAL, plan_module.LAZY_FOOTERS_REMOTE
    plan_module.LAZY_FOOTERS_LOCAL, plan_module.LAZY_FOOTERS_REMOTE = local, remote
    try:
        best, plan, stages = float("inf"), None, {}
        for _ in range(repeat):
            config = load_config(None, {"input": [pattern], "output": tempfile.gettempdir()})
            with _stages() as spent:
                start = time.perf_counter()
                plan = plan_module.plan_job(config)
                seconds = time.perf_counter() - start
            if seconds < best:
                best, stages = seconds, spent
        return best, plan, stages
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
    from pipeline.job.plan import LAZY_FOOTERS_LOCAL, LAZY_FOOTERS_REMOTE

    work = Path(args.workdir or tempfile.mkdtemp(prefix="plan_files_gcs_"))
    data = work / "files"
    if not (data / f"part-{args.files - 1:05d}.parquet").exists():
        print(f"writing {args.files} files of {args.rows_per_file} rows ...", file=sys.stderr)
        make_files(data, args.files, args.rows_per_file)
    files = sorted(data.glob("part-*.parquet"))
    if len(files) != args.files:  # the local cases plan every file of the folder
        raise SystemExit(f"{data} holds {len(files)} files, not --files {args.files}")
    lazy, every = (1, 1), (10**9, 10**9)  # thresholds: first footer only, every footer
    rows = []

    def case(where: str, pattern: str, n: int, how: str, thresholds: tuple[int, int]) -> float:
        seconds, plan, stages = _time_plan(pattern, args.repeat, *thresholds)
        rows.append((where, n, how, seconds, len(plan.work), len(plan.shards.tasks), stages))
        print(f"  {where} {n} files, {how}: {seconds:.2f} s", file=sys.stderr, flush=True)
        return seconds

    upload = gcs_all = gcs_every = gcs_lazy = 0.0
    if not args.local_only:
        with GcsEmulator((BUCKET,)) as emulator, emulator.environ():
            start = time.perf_counter()
            _upload(files, "all")
            _upload(files[: args.footer_files], "some")
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
    for where, n, how, seconds, items, tasks, _ in rows:
        print(f"| {where} | {n:,} | {how} | {seconds:.2f} | {1000 * seconds / n:.2f} | "
              f"{items:,} | {tasks:,} |")  # fmt: skip
    print("\nthe same plans stage by stage (seconds; other: the rest of plan_job):\n")
    print("| where | files | plan | " + " | ".join(STAGE_NAMES) + " | other |")
    print("| --- | ---: | --- |" + " ---: |" * (len(STAGE_NAMES) + 1))
    for where, n, how, seconds, _, _, stages in rows:
        other = seconds - sum(stages.values())
        cells = " | ".join(f"{stages[name]:.3f}" for name in STAGE_NAMES)
        print(f"| {where} | {n:,} | {how} | {cells} | {other:.3f} |")
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
