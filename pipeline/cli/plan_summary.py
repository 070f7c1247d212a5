"""`tfrecord-etl plan`: what a run would read and write, from the job's plan alone.

`plan_job` (pipeline/job/plan.py) reads the footers (or a CSV file's first bytes) and a first
batch, and writes nothing; `summarize_plan` turns its result into the figures a person checks
before a long run: the files, row groups, rows and bytes to read; per split the rows, shards
and bytes to expect; the work items and read tasks the runner spreads over its workers.

Exact: files, bytes on disk, Parquet row groups and rows (from the footers), work items,
tasks, and the shards of a `num_shards` run. Estimated: CSV rows (from the bytes per row of
the first file's first MiBs), the rows of Parquet files whose footers the plan does not read
(very many files: from the first file), the rows per split (from the split weights, before any
`filter` step), the output bytes (from the first batch encoded and compressed, plus the sizes
of its first files when a `files:` column reads files in) and the shards of a rolling write
(from those bytes and the target size).
"""

from __future__ import annotations

import math
from typing import Any

from pipeline.job.plan import JobPlan
from transforms.files.options import FileColumn
from transforms.read.parquet_reader import parquet_footer
from transforms.write.sizing import csv_bytes_per_row

__all__ = ["format_plan", "summarize_plan"]


def _rows(plan: JobPlan) -> tuple[int, bool]:
    """(rows read, exact?)."""
    work = plan.work
    if all(w.num_rows is not None for w in work):  # Parquet row groups: from the footers
        return sum(w.num_rows or 0 for w in work), True
    first = work[0]
    if plan.fmt == "parquet":  # whole files: the first file's rows per byte on disk
        per_byte = parquet_footer(first.path).num_rows / max(first.source_bytes, 1)
        return round(plan.input_bytes * per_byte), False
    per_row = csv_bytes_per_row(first.path, plan.config.csv.header)
    return round(plan.input_bytes / per_row), False


def _rolling_shards(plan: JobPlan, fraction: float) -> int:
    """Files a rolling write makes of a split: each task rolls to a new file at the target
    size and appends a last file under half of it to the one before
    (transforms/write/rolling/task_files.py)."""
    ratio, target = plan.shards.bytes_per_input_byte, plan.shards.target_bytes
    total = 0
    for task in plan.shards.tasks:
        expected = sum(w.source_bytes for w in task.items) * ratio * fraction
        total += max(1, math.floor(expected / target + 0.5))
    return total


def _shards(plan: JobPlan, name: str, fraction: float) -> int | None:
    """The shards of split `name`: exact for `num_shards`, None when Beam's sink decides."""
    config = plan.config
    if config.num_shards > 0:
        return config.num_shards
    if name in config.shuffle:
        return plan.shards.num_shards[name]
    if config.sink == "tfrecordio":
        return None
    return _rolling_shards(plan, fraction)


def summarize_plan(plan: JobPlan) -> dict[str, Any]:
    """The plan's figures as a JSON-able dict (see the module's docstring for which are exact)."""
    config = plan.config
    rows, exact = _rows(plan)
    weights = sum(w for _, w in config.splits)
    estimated = plan.shards.estimated_bytes
    splits = {}
    for name, weight in config.splits:
        fraction = weight / weights
        splits[name] = {
            "rows": rows if len(config.splits) == 1 and exact else round(rows * fraction),
            "shards": _shards(plan, name, fraction),
            "bytes": round(estimated * fraction),
        }
    grouped = config.num_shards > 0 or bool(config.shuffle)
    passes = 1
    if plan.preprocess is not None and plan.artifacts is None:
        passes += plan.preprocess.num_passes
    files = {}
    if plan.files is not None:  # the file columns read after preprocessing
        files["files"] = [
            {
                "column": c.column,
                "output": c.output,
                "kind": c.options.kind,
                "stored": _stored(c.options),
                "max_file_bytes": c.options.max_file_bytes,
            }
            for c in plan.files.columns
        ]
    return {
        "read": {
            "format": plan.fmt,
            "files": len(plan.paths),
            "row_groups": sum(w.row_groups for w in plan.work if w.row_group is not None)
            if plan.fmt == "parquet"
            else None,
            "rows": rows,
            "rows_exact": exact,
            "bytes": plan.input_bytes,
            "passes": passes,
        },
        "write": {
            "output": config.output,
            "compression": config.compression,
            "sink": config.sink,
            "write": "grouped" if grouped else "rolling",
            "target_shard_bytes": plan.shards.target_bytes,
            "features": len(plan.specs),
            "bytes": estimated,
            "splits": splits,
        },
        "work": {"work_items": len(plan.work), "read_tasks": len(plan.shards.tasks)},
        **files,
        **_schema(plan),
    }


def _stored(options: FileColumn) -> str:
    """What a file column's records hold: the file as it is, or a re-encoded image."""
    image = options.image
    if image is None or not image.reencodes:
        return "the file's bytes"
    return f"re-encoded {image.format or 'as the file (png for other formats)'}"


def _schema(plan: JobPlan) -> dict[str, Any]:
    """With `schema: unify`: the unified schema and the columns each file lacks."""
    if plan.config.schema != "unify":
        return {}
    columns = {f.name: str(f.type) for f in plan.schema}
    missing = {path: list(names) for path, names in plan.missing_columns.items()}
    return {"schema": {"mode": "unify", "columns": columns, "missing": missing}}


def _size(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:,.0f} {unit}" if unit == "B" else f"{n:,.1f} {unit}"
        n /= 1024
    return f"{n:,.1f} TiB"


def _few_items(fmt: str) -> str:
    """Why a job has fewer work items than workers, and what gives it more."""
    if fmt == "parquet":
        return (
            "a Parquet row group is one work item (write the input with smaller row groups, "
            "or as more files, to use more cores)"
        )
    if fmt == "csv":
        return (
            "a small, compressed or remote CSV file is one work item (a smaller csv.range_bytes, "
            "or the input cut into more files, uses more cores)"
        )
    if fmt == "jsonl":
        return (
            "a small, compressed or remote JSON Lines file is one work item (cut the input into "
            "more files to use more cores)"
        )
    return f"a {fmt} file is one work item (cut the input into more files to use more cores)"


def format_plan(summary: dict[str, Any]) -> str:
    """The summary as lines for a person."""
    read, write, work = summary["read"], summary["write"], summary["work"]
    about = "" if read["rows_exact"] else "about "
    groups = "" if read["row_groups"] is None else f", {read['row_groups']:,} row group(s)"
    passes = f"; {read['passes']} passes over the input" if read["passes"] > 1 else ""
    mode = "grouped write (records grouped by shard)"
    if write["write"] == "rolling":
        mode = f"rolling write (a new file past {_size(write['target_shard_bytes'])})"
    lines = [
        f"read:   {read['files']:,} {read['format']} file(s){groups}, {about}{read['rows']:,} "
        f"rows, {_size(read['bytes'])} on disk{passes}",
        f"work:   {work['work_items']:,} work item(s) in {work['read_tasks']:,} read task(s)",
        f"write:  {write['output']}: {write['features']} features, {write['compression']}, "
        f"{write['sink']} sink, {mode}",
        f"        {'split':<12} {'rows (est.)':>14} {'shards':>8} {'bytes (est.)':>14}",
    ]
    for name, split in write["splits"].items():
        shards = "runner" if split["shards"] is None else f"{split['shards']:,}"
        lines.append(
            f"        {name:<12} {split['rows']:>14,} {shards:>8} {_size(split['bytes']):>14}"
        )
    if "incremental" in summary:
        inc = summary["incremental"]
        counts = ", ".join(f"{n} {k}" for k, n in inc["inputs"].items())
        retire = f", retiring span(s) {inc['retire']}" if inc["retire"] else ""
        lines.insert(
            0,
            f"incremental: {inc['dataset']}: span {inc['span']} of the inputs ({counts}){retire}"
            f"; live spans {inc['spans']}",
        )
    for column in summary.get("files", []):
        lines.append(
            f"files:  {column['column']} -> {column['output']}: {column['kind']}, "
            f"{column['stored']}, at most {_size(column['max_file_bytes'])} a file"
        )
    if "schema" in summary:  # schema: unify
        schema = summary["schema"]
        columns = ", ".join(f"{name} {t}" for name, t in schema["columns"].items())
        lines.append(f"schema: unified from {read['files']:,} file(s): {columns}")
        for path, names in schema["missing"].items():
            lines.append(f"        {path} lacks {', '.join(names)} (null there)")
    if "engine" in summary:  # which engine convert would run it on (pipeline/engines/choose.py)
        engine = summary["engine"]
        lines.append(f"engine: {engine['name']} ({engine['why']})")
        if "workers" in engine:
            lines.append(
                f"        {engine['workers']} worker process(es) ({engine['workers_why']})"
            )
            busy = engine.get("busy_workers", engine["workers"])
            if busy < engine["workers"]:
                lines.append(
                    f"        at most {busy} of them read and convert: {_few_items(read['format'])}"
                )
    lines.append("nothing was written (tfrecord-etl convert with the same flags runs the job)")
    return "\n".join(lines)
