"""Sections run as job subprocesses: end to end (e2e), local workers (workers), RSS (rss)."""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from baselines import tfx_bsl_available
from measure import SCRIPT, convert_cmd, fixed_cost, measure, steady
from tables import write_parquet

PROJECT_GZIP = "project gzip (defaults)"
PROJECT_NONE = "project none"


def _cli(input_glob: str, out: Path, extra: Sequence[str]) -> list[str]:
    return convert_cmd(input_glob, out, *extra)


def _tfx_style(
    python: str,
    input_glob: str,
    out: Path,
    compression: str,
    encoder: str,
    extra: Sequence[str] = (),
) -> list[str]:
    return [
        python,
        str(SCRIPT),
        "_worker",
        "tfx-style",
        "--input",
        input_glob,
        "--output",
        str(out),
        "--compression",
        compression,
        "--encoder",
        encoder,
        *extra,
    ]


def e2e_configs(args: argparse.Namespace) -> list[dict[str, Any]]:
    """(name, kind, command builder) for each end-to-end configuration."""
    bsl_here = tfx_bsl_available() is None
    configs = [
        {
            "name": PROJECT_GZIP,
            "kind": "project",
            "compression": "gzip",
            "cmd": lambda i, o: _cli(i, o, ["--compression", "gzip"]),
        },
        {
            "name": "project gzip zlib 6",
            "kind": "project",
            "compression": "gzip",
            "cmd": lambda i, o: _cli(
                i,
                o,
                ["--compression", "gzip", "--gzip-backend", "zlib", "--compression-level", "6"],
            ),
        },
        {
            "name": PROJECT_NONE,
            "kind": "project",
            "compression": "none",
            "cmd": lambda i, o: _cli(i, o, ["--compression", "none"]),
        },
        {
            "name": "project gzip, --num-shards 8",
            "kind": "project",
            "compression": "gzip",
            "cmd": lambda i, o: _cli(i, o, ["--compression", "gzip", "--num-shards", "8"]),
        },
        {
            "name": "project gzip, --shuffle",
            "kind": "project",
            "compression": "gzip",
            "cmd": lambda i, o: _cli(i, o, ["--compression", "gzip", "--shuffle"]),
        },
        {
            "name": "project gzip, sink tfrecordio",
            "kind": "project",
            "compression": "gzip",
            "cmd": lambda i, o: _cli(i, o, ["--compression", "gzip", "--sink", "tfrecordio"]),
        },
        {
            "name": "TFX-style per-row gzip",
            "kind": "tfx-pyproto",
            "compression": "gzip",
            "cmd": lambda i, o: _tfx_style(sys.executable, i, o, "gzip", "pyproto"),
        },
        {
            "name": "TFX-style per-row none",
            "kind": "tfx-pyproto",
            "compression": "none",
            "cmd": lambda i, o: _tfx_style(sys.executable, i, o, "none", "pyproto"),
        },
    ]
    bsl_python = sys.executable if bsl_here else args.tfx_python
    if bsl_python:
        for comp in ("gzip", "none"):
            configs.append(
                {
                    "name": f"TFX-style tfx_bsl {comp}",
                    "kind": "tfx-bsl",
                    "compression": comp,
                    "cmd": lambda i, o, c=comp: _tfx_style(bsl_python, i, o, c, "tfx_bsl"),
                }
            )
    if args.quick:
        keep = {PROJECT_GZIP, "TFX-style per-row gzip"}
        configs = [c for c in configs if c["name"] in keep]
    if "e2e" not in args.section_list:  # the reader alone: only the outputs it reads
        configs = [c for c in configs if c["name"] in (PROJECT_GZIP, PROJECT_NONE)]
    return configs


def section_e2e(
    files: dict[str, Any], args: argparse.Namespace, work: Path
) -> list[dict[str, Any]]:
    results = []
    sizes = (
        [("large", args.rows)] if args.quick else [("small", args.small_rows), ("large", args.rows)]
    )
    for cfg in e2e_configs(args):
        entry: dict[str, Any] = {
            "name": cfg["name"],
            "kind": cfg["kind"],
            "compression": cfg["compression"],
        }
        for label, rows in sizes:
            slug = "".join(ch if ch.isalnum() else "_" for ch in cfg["name"])
            out = work / "out" / f"{slug}-{label}"
            r = measure(
                cfg["cmd"](str(files[label]), out),
                out,
                work / "logs" / f"{out.name}.log",
                rows,
                args.e2e_repeat,
                args.repeat_below,
            )
            entry[label] = r
            print(
                f"  {cfg['name']} {rows:,} rows: {r['wall_s']:.1f} s wall (runs {r['walls']}), "
                f"{r['max_rss_mb']:.0f} MB peak RSS, {r['bytes'] / 1e6:.1f} MB out "
                f"(load {r['load']})"
            )
            if cfg["name"] in (PROJECT_GZIP, PROJECT_NONE) and label == "large":
                entry["output_dir"] = str(out)
            elif not args.keep:
                shutil.rmtree(out, ignore_errors=True)
        if "small" in entry:
            entry["steady_rows_s"] = steady(
                entry["small"], entry["large"], args.small_rows, args.rows
            )
            entry["fixed_s"] = fixed_cost(entry["large"], args.rows, entry["steady_rows_s"])
        results.append(entry)
    return results


_SPIN = (
    "import os, time, zlib\n"
    "data = os.urandom(1 << 22)\n"
    "t = time.perf_counter()\n"
    "for _ in range({n}):\n"
    "    zlib.compress(data, 1)\n"
    "print(time.perf_counter() - t)\n"
)


def parallel_ceiling(n: int = 40) -> dict[str, float]:
    """What two CPU-bound processes get done together on this machine, against one alone:
    the same zlib loop once alone, then twice at the same time. Shared cores, hyperthreads
    and clock limits all show here; 2.0x is two full cores."""
    cmd = [sys.executable, "-c", _SPIN.format(n=n)]
    alone = float(subprocess.run(cmd, capture_output=True, text=True, check=True).stdout)
    procs = [subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True) for _ in range(2)]
    together = max(float(proc.communicate()[0]) for proc in procs)
    return {"alone_s": alone, "together_s": together, "ratio": 2 * alone / together}


def section_workers(args: argparse.Namespace, work: Path, files: dict[str, Any]) -> dict[str, Any]:
    ceiling = parallel_ceiling()
    print(
        f"  machine: one zlib loop {ceiling['alone_s']:.1f} s alone, two at once "
        f"{ceiling['together_s']:.1f} s: {ceiling['ratio']:.2f}x one process's work"
    )
    results = []
    two = ["--direct_num_workers=2", "--direct_running_mode=multi_processing"]
    sizes = (("small", args.workers_small_rows), ("large", args.workers_rows))
    for name, extra in (("1 worker", []), ("2 workers", two)):
        entry: dict[str, Any] = {"name": f"project gzip, 4 files, {name}"}
        for label, rows in sizes:
            out = work / "out" / f"workers-{len(extra)}-{label}"
            r = measure(
                _cli(files[f"parts_{label}"], out, ["--compression", "gzip", *extra]),
                out,
                work / "logs" / f"{out.name}.log",
                rows,
                args.e2e_repeat,
                args.repeat_below,
            )
            entry[label] = r
            print(
                f"  {entry['name']} {rows:,} rows: {r['wall_s']:.1f} s wall (runs {r['walls']}), "
                f"{r['cpu_s']:.1f} CPU-s, tree RSS {r['tree_rss_mb']:.0f} MB (load {r['load']})"
            )
            shutil.rmtree(out, ignore_errors=True)
        entry["steady_rows_s"] = steady(entry["small"], entry["large"], *(n for _, n in sizes))
        entry["fixed_s"] = fixed_cost(entry["large"], sizes[1][1], entry["steady_rows_s"])
        results.append(entry)
    return {"jobs": results, "ceiling": ceiling}


def section_rss(
    args: argparse.Namespace, work: Path, e2e: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    base = next((e for e in e2e if e["name"] == PROJECT_GZIP), None)
    path = work / f"{args.table}-{args.rss_rows}.parquet"
    print(f"  writing {args.rss_rows:,} rows to Parquet ...")
    write_parquet(args.table, args.rss_rows, path, args.row_group_rows)
    out = work / "out" / "rss-large"
    r = measure(
        _cli(str(path), out, ["--compression", "gzip"]),
        out,
        work / "logs" / "rss.log",
        args.rss_rows,
        1,
        0,
    )
    print(
        f"  project gzip {args.rss_rows:,} rows: {r['wall_s']:.1f} s wall, "
        f"{r['max_rss_mb']:.0f} MB peak RSS (load {r['load']})"
    )
    shutil.rmtree(out, ignore_errors=True)
    path.unlink()
    keys = ("wall_s", "cpu_s", "max_rss_mb", "tree_rss_mb")
    rows = []
    if base is not None:
        rows.append({"rows": args.rows, **{k: base["large"][k] for k in keys}})
    rows.append({"rows": args.rss_rows, **{k: r[k] for k in keys}})
    if len(rows) == 2:
        rows[1]["steady_rows_s"] = steady(rows[0], rows[1], args.rows, args.rss_rows)
    return rows
