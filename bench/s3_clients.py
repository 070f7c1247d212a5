"""Beam's S3 filesystem with one boto3 client per setting (transforms/fs_s3.py, the default)
against a new client for every call (`S3_CLIENTS=per-call`, Beam's own behaviour), in one run.

An S3 emulator (moto's server, tests/s3_emulator.py) on 127.0.0.1; the bundled sample Parquet
(2,000 rows) uploaded; `python -m pipeline convert` from s3:// to s3:// (two splits, as the S3
tests run it) as a whole process, the two settings alternating, `--rounds`
each; printed: every run's wall time, the least of each, and their ratio. The emulator answers
from memory on this machine: a real store's latency adds the same to both settings.

    python bench/s3_clients.py
    python bench/s3_clients.py --rounds 3
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "bench"), str(ROOT / "tests"), str(ROOT)]

from measure import load_avg, run_process  # noqa: E402
from s3_emulator import S3Emulator  # noqa: E402

BUCKET = "bench"
SAMPLE = ROOT / "sample" / "trips.parquet"
SETTINGS = {"shared": {}, "per-call": {"S3_CLIENTS": "per-call"}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    with S3Emulator((BUCKET,)) as emulator, tempfile.TemporaryDirectory() as work:
        env = emulator.environment()
        config = Path(work) / "splits.yaml"
        config.write_text("splits: {train: 8, eval: 2}\n", encoding="utf-8")
        emulator.client().put_object(
            Bucket=BUCKET, Key="in/sample.parquet", Body=SAMPLE.read_bytes()
        )
        source = f"s3://{BUCKET}/in/sample.parquet"
        print(f"bench/s3_clients.py: sample (2,000 rows) s3 -> s3 on moto; load {load_avg()}")
        best: dict[str, float] = {}
        for round_ in range(args.rounds):
            for name, extra in SETTINGS.items():
                out = f"s3://{BUCKET}/out-{name}"
                cmd = [sys.executable, "-m", "pipeline", "convert", "--input", source,
                       "--output", out, "--overwrite", "--config", str(config)]  # fmt: skip
                run = run_process(cmd, Path(work) / f"{name}-{round_}.log", {**env, **extra})
                if run["rc"] != 0:
                    sys.exit(f"{name}: convert exited {run['rc']}")
                print(f"  {name:9s} round {round_ + 1}: {run['wall_s']:6.2f} s wall")
                best[name] = min(best.get(name, run["wall_s"]), run["wall_s"])
        ratio = best["per-call"] / best["shared"]
        print(f"least wall: shared {best['shared']:.2f} s, per-call {best['per-call']:.2f} s; "
              f"per-call / shared {ratio:.2f}x")  # fmt: skip


if __name__ == "__main__":
    main()
