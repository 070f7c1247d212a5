"""The grouped write (`--shuffle`, `--num-shards N`): rows/s and peak RSS, today's write against
the spilling one, in one run on one generated table.

The baseline is this tree with `transforms/write/grouped.py` and `transforms/write/beam.py` as
they were at `--old-commit` (the write that groups whole records by shard), so the two differ in
the grouped write alone. Each configuration runs at two sizes: steady rows/s is the row
difference over the wall-time difference (the fixed cost taken out), and the peak RSS of the
job's process tree (sampled every 0.2 s) at each size says whether memory grows with the input.

    python bench/shuffle.py                                   # 1M and 8M rows, old and new
    python bench/shuffle.py --small-rows 200000 --large-rows 1000000 --writes new
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from measure import REPO, load_avg, run_process, steady
from tables import write_parquet

OLD_COMMIT = "77e7abc"
OLD_FILES = ("transforms/write/grouped.py", "transforms/write/beam.py")
# Today's builder passes the planned output size to the sink (the spilling write sizes its
# buckets from it); the old sink has no use for it, so its tree takes and drops it.
OLD_SINK_ADAPTER = """

_OldWriteShards = WriteShards


class WriteShards(_OldWriteShards):  # noqa: F811
    def __init__(self, *args, estimated_bytes=0, **kwargs):
        super().__init__(*args, **kwargs)
"""
CONFIGS = {"shuffle": ["--shuffle"], "num-shards-8": ["--num-shards", "8"]}


def old_tree(commit: str, into: Path) -> Path:
    """This tree's code with the grouped write of `commit`."""
    tree = into / "old-tree"
    shutil.rmtree(tree, ignore_errors=True)
    for package in ("pipeline", "transforms"):
        skip = shutil.ignore_patterns("__pycache__")
        shutil.copytree(REPO / package, tree / package, ignore=skip)
    shutil.rmtree(tree / "transforms" / "write" / "grouped")  # today's package of that module
    for name in OLD_FILES:
        text = subprocess.run(
            ["git", "-C", str(REPO), "show", f"{commit}:{name}"],
            check=True, capture_output=True, text=True,
        ).stdout  # fmt: skip
        if name.endswith("write/beam.py"):
            text += OLD_SINK_ADAPTER
        (tree / name).write_text(text, encoding="utf-8")
    return tree


def run_job(tree: Path, input_path: Path, out: Path, flags: Sequence[str], log: Path) -> dict:
    """One `convert` run of the code in `tree` (-P: the working directory is not on the path)."""
    os.environ["PYTHONPATH"] = str(tree)
    cmd = [sys.executable, "-P", "-m", "pipeline", "convert", "--input", str(input_path),
           "--output", str(out), "--overwrite", *flags]  # fmt: skip
    shutil.rmtree(out, ignore_errors=True)
    result = run_process(cmd, log)
    result["load"] = load_avg()
    if result["rc"] == 0:
        manifest = json.loads((out / "manifest.json").read_text(encoding="utf-8"))
        result["shards"] = len(manifest["splits"]["train"]["files"])
        result["out_rows"] = manifest["rows"]
    shutil.rmtree(out, ignore_errors=True)
    return result


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--small-rows", type=int, default=1_000_000)
    parser.add_argument("--large-rows", type=int, default=8_000_000)
    parser.add_argument(
        "--old-large-rows",
        type=int,
        default=0,
        help="large size for the old write (default: --large-rows)",
    )
    parser.add_argument("--row-group-rows", type=int, default=131_072)
    parser.add_argument("--configs", default=",".join(CONFIGS))
    parser.add_argument("--old-commit", default=OLD_COMMIT)
    parser.add_argument("--writes", default="old,new", help="old, new or both")
    parser.add_argument("--workdir", type=Path)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    work = args.workdir or Path(tempfile.mkdtemp(prefix="bench-shuffle-"))
    work.mkdir(parents=True, exist_ok=True)
    saved_path = os.environ.get("PYTHONPATH")
    old_large = args.old_large_rows or args.large_rows
    sizes = sorted({args.small_rows, args.large_rows, old_large})
    inputs = {}
    for n in sizes:
        inputs[n] = work / f"basic-{n}.parquet"
        if not inputs[n].exists():
            print(f"writing {n:,} rows of the basic table ...", flush=True)
            write_parquet("basic", n, inputs[n], args.row_group_rows)
    writes = args.writes.split(",")
    trees = {"old": old_tree(args.old_commit, work)} if "old" in writes else {}
    if "new" in writes:
        trees["new"] = REPO
    results: dict[str, Any] = {}
    try:
        for config in args.configs.split(","):
            for name, tree in trees.items():
                large = old_large if name == "old" else args.large_rows
                runs = {}
                for n in (args.small_rows, large):
                    log = work / "logs" / f"{config}-{name}-{n}.log"
                    r = run_job(tree, inputs[n], work / "out", CONFIGS[config], log)
                    runs[n] = r
                    print(
                        f"{config:13s} {name:3s} {n:>10,} rows: {r['wall_s']:7.1f} s, "
                        f"{n / r['wall_s']:>9,.0f} rows/s, peak tree RSS "
                        f"{r['tree_rss_mb']:7.0f} MB (largest process {r['max_rss_mb']:.0f} MB), "
                        f"{r.get('shards', '?')} shards, load {r['load']}",
                        flush=True,
                    )
                small, big = runs[args.small_rows], runs[large]
                results[f"{config}/{name}"] = {
                    "runs": {str(n): r for n, r in runs.items()},
                    "steady_rows_s": steady(small, big, args.small_rows, large),
                    "rss_growth": big["tree_rss_mb"] / max(small["tree_rss_mb"], 1e-9),
                }
    finally:
        if saved_path is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = saved_path
    print()
    print("| config | write | steady rows/s | peak RSS small -> large (MB) | RSS growth |")
    print("| --- | --- | ---: | --- | ---: |")
    for key, entry in results.items():
        config, name = key.split("/")
        rate = entry["steady_rows_s"]
        rss = [r["tree_rss_mb"] for r in entry["runs"].values()]
        if not rate:
            print(f"| {config} | {name} | failed | | |")
            continue
        print(
            f"| {config} | {name} | {rate:,.0f} | {rss[0]:.0f} -> {rss[1]:.0f} | "
            f"{entry['rss_growth']:.2f}x |"
        )
    for config in args.configs.split(","):
        old, new = results.get(f"{config}/old"), results.get(f"{config}/new")
        if old and new and old["steady_rows_s"] and new["steady_rows_s"]:
            old_rss = max(r["tree_rss_mb"] for r in old["runs"].values())
            new_rss = max(r["tree_rss_mb"] for r in new["runs"].values())
            speed = new["steady_rows_s"] / old["steady_rows_s"]
            print(f"{config}: new/old steady rows/s {speed:.2f}x, old/new peak RSS "
                  f"{old_rss / new_rss:.2f}x")  # fmt: skip
    print(f"(2 shared cores: compare ratios within this run; inputs and logs in {work})")
    if args.json:
        args.json.write_text(json.dumps(results, indent=1), encoding="utf-8")
    return results


if __name__ == "__main__":
    main()
