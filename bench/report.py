"""The markdown report of a run's results, and the targets they are checked against."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sections_e2e import PROJECT_GZIP, PROJECT_NONE


def _fmt(x: float | None, spec: str = ",.0f") -> str:
    return "n/a" if x is None else format(x, spec)


def _md_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def report(res: dict[str, Any]) -> str:
    meta = res["meta"]
    parts = [
        f"## Benchmark: table `{meta['table']}`, {meta['rows']:,} rows "
        f"({meta['record_bytes']:.0f} B/record serialized), {meta['date']}",
        f"Machine: {meta['cpus']} cores, {meta['machine']}; Python {meta['python']}, "
        f"Beam {meta['beam']}, pyarrow {meta['pyarrow']}; "
        f"load average at start {meta['load_start']}, at end {meta.get('load_end', '?')}.",
    ]
    if res.get("compression"):
        rows = [
            [
                f"{r['backend']} {r['level']}",
                _fmt(r.get("size_pct"), ".1f") + "%",
                _fmt(r.get("ratio"), ".2f"),
                _fmt(r.get("mb_s")),
                _fmt(r.get("gunzip_mb_s")),
            ]
            for r in res["compression"]
            if "skipped" not in r
        ]
        parts += [
            "### Per-block gzip (framed blocks, one core)",
            _md_table(
                ["backend level", "size of raw", "raw/compressed", "compress MB/s", "gunzip MB/s"],
                rows,
            ),
        ]
    if res.get("encoders"):
        enc = [r for r in res["encoders"] if "encoder" in r]
        rows = [
            [
                r["encoder"],
                f"{r['rows']:,}",
                _fmt(r["rows_s"]),
                _fmt(r["rows_cpu_s"]),
                _fmt(r["vs_per_row"], ".1f") + "x",
                r["note"],
            ]
            for r in enc
        ]
        parts += [
            "### Encoders (in-memory table -> serialized Examples, one core)",
            _md_table(["encoder", "rows", "rows/s", "rows/CPU-s", "vs per-row", "note"], rows),
        ]
        check = next((r["check"] for r in res["encoders"] if "check" in r), None)
        if check:
            parts.append(
                f"Check: {check['equal_messages']}/{check['rows']} records parse equal to "
                f"the per-row encoder's; {check['equal_bytes']}/{check['rows']} are "
                "byte-identical to SerializeToString(deterministic=True)."
            )
    if res.get("e2e"):
        e2e = res["e2e"]
        base = {
            c: next((e for e in e2e if e["kind"] == "tfx-pyproto" and e["compression"] == c), None)
            for c in ("gzip", "none")
        }
        bsl = {
            c: next((e for e in e2e if e["kind"] == "tfx-bsl" and e["compression"] == c), None)
            for c in ("gzip", "none")
        }
        rows = []
        for e in e2e:
            large = e["large"]
            small = e.get("small")
            b, s = base[e["compression"]], bsl[e["compression"]]

            def ratio(other: dict[str, Any] | None, key: str, e: dict[str, Any] = e) -> str:
                if other is None:
                    return "n/a"
                if key == "wall":
                    return _fmt(other["large"]["wall_s"] / e["large"]["wall_s"], ".2f") + "x"
                if e.get("steady_rows_s") and other.get("steady_rows_s"):
                    return _fmt(e["steady_rows_s"] / other["steady_rows_s"], ".2f") + "x"
                return "n/a"

            rows.append(
                [
                    e["name"],
                    (_fmt(small["wall_s"], ".1f") + " / " if small else "")
                    + _fmt(large["wall_s"], ".1f"),
                    _fmt(large["rows_s"]),
                    _fmt(e.get("steady_rows_s")),
                    _fmt(e.get("fixed_s"), ".1f"),
                    ratio(b, "wall"),
                    ratio(b, "steady"),
                    ratio(s, "wall"),
                    ratio(s, "steady"),
                    (_fmt(small["max_rss_mb"]) + " / " if small else "")
                    + _fmt(large["max_rss_mb"]),
                    _fmt(large["bytes"] / 1e6, ".1f"),
                ]
            )
        sizes = (
            f"{meta['small_rows']:,} / {meta['rows']:,}"
            if not meta["quick"]
            else f"{meta['rows']:,}"
        )
        parts += [
            f"### End to end, Parquet -> TFRecord (FnApiRunner, 1 worker; rows {sizes})",
            _md_table(
                [
                    "job",
                    "wall s",
                    "rows/s (whole process)",
                    "steady rows/s",
                    "fixed s",
                    "vs per-row TFX (wall)",
                    "vs per-row TFX (steady)",
                    "vs tfx_bsl TFX (wall)",
                    "vs tfx_bsl TFX (steady)",
                    "peak RSS MB",
                    "output MB",
                ],
                rows,
            ),
        ]
    if res.get("workers"):
        w = res["workers"]["jobs"]
        ceiling = res["workers"]["ceiling"]
        rows = [
            [
                e["name"],
                f"{e['small']['wall_s']:.1f} / {e['large']['wall_s']:.1f}",
                f"{e['small']['cpu_s']:.1f} / {e['large']['cpu_s']:.1f}",
                _fmt(e["large"]["rows_s"]),
                _fmt(e.get("steady_rows_s")),
                _fmt(e.get("fixed_s"), ".1f"),
                f"{e['large']['max_rss_mb']:.0f} / {e['large']['tree_rss_mb']:.0f}",
            ]
            for e in w
        ]
        if len(w) == 2 and w[0].get("steady_rows_s") and w[1].get("steady_rows_s"):
            speed = (
                f"2 vs 1 worker: {w[0]['large']['wall_s'] / w[1]['large']['wall_s']:.2f}x "
                f"(wall), {w[1]['steady_rows_s'] / w[0]['steady_rows_s']:.2f}x (steady state)"
            )
        else:
            speed = ""
        speed += (
            f"\n\nThe machine's own ceiling: two CPU-bound processes (a zlib loop) at once get "
            f"{ceiling['ratio']:.2f}x the work of one alone done ({ceiling['alone_s']:.1f} s "
            f"alone, {ceiling['together_s']:.1f} s for two together; 2.00x would be two full "
            "cores)."
        )
        parts += [
            f"### Local workers (4 input files; rows {w[0]['small']['rows']:,} / "
            f"{w[0]['large']['rows']:,})",
            _md_table(
                [
                    "job",
                    "wall s",
                    "CPU s",
                    "rows/s (whole process)",
                    "steady rows/s",
                    "fixed s",
                    "peak RSS MB (largest process / process tree)",
                ],
                rows,
            ),
            speed,
        ]
    if res.get("rss"):
        rows = [
            [
                f"{r['rows']:,}",
                f"{r['wall_s']:.1f}",
                f"{r['max_rss_mb']:.0f}",
                f"{r['tree_rss_mb']:.0f}",
                _fmt(r.get("steady_rows_s")),
            ]
            for r in res["rss"]
        ]
        parts += [
            "### Peak RSS of the job (project gzip defaults, 1 worker)",
            _md_table(
                ["rows", "wall s", "peak RSS MB", "tree RSS MB (sampled)", "steady rows/s"], rows
            ),
        ]
        if len(res["rss"]) == 2:
            parts.append(
                f"RSS ratio: {res['rss'][1]['max_rss_mb'] / res['rss'][0]['max_rss_mb']:.2f}x "
                f"for {res['rss'][1]['rows'] / res['rss'][0]['rows']:.0f}x the rows."
            )
    if res.get("reader") and "skipped" not in res["reader"][0]:
        rows = [
            [
                r["output"],
                r["way"],
                f"{r['rows']:,}",
                _fmt(r["first_batch_s"], ".2f"),
                _fmt(r["rows_s"]),
                _fmt(r["rows_s_with_first"]),
                _fmt(r["rows_cpu_s"]),
                _fmt(r["vs_tutorial"], ".1f")
                + "x"
                + (" ERROR: " + r["error"] if "error" in r else ""),
            ]
            for r in res["reader"]
        ]
        parts += [
            f"### Reader (tf.data, batch {meta['reader_batch']}; the first records of the "
            "job's 1-worker output)",
            _md_table(
                [
                    "output",
                    "way",
                    "rows",
                    "first batch s",
                    "rows/s after it",
                    "rows/s overall",
                    "rows/CPU-s",
                    "vs tutorial",
                ],
                rows,
            ),
        ]
    if res.get("targets"):
        rows = [[t["target"], t["measured"], t["status"]] for t in res["targets"]]
        parts += ["### Targets", _md_table(["target", "measured", "status"], rows)]
    return "\n\n".join(p for p in parts if p) + "\n"


def targets(res: dict[str, Any]) -> list[dict[str, str]]:
    out = []

    def add(
        target: str, value: float | None, goal: float, unit: str = "x", low: bool = False
    ) -> None:
        if value is None:
            out.append({"target": target, "measured": "n/a", "status": "not measured"})
            return
        ok = value <= goal if low else value >= goal
        shown = f"{value:,.0f} rows/s" if unit == "rows/s" else f"{value:.2f}x"
        status = (
            "met"
            if ok
            else (f"{value / goal:.0%} of target" if not low else f"{value / goal:.2f} of limit")
        )
        out.append({"target": target, "measured": shown, "status": status})

    enc = {r["encoder"]: r for r in res.get("encoders", []) if "encoder" in r}
    framed = enc.get("encode_table (framed)")
    add("encoder >= 1M rows/s per core", framed["rows_cpu_s"] if framed else None, 1e6, "rows/s")
    bsl = enc.get("tfx_bsl RecordBatchToExamplesEncoder")
    add("encoder >= 5x tfx_bsl", framed["rows_s"] / bsl["rows_s"] if framed and bsl else None, 5)
    add(
        "encoder >= 5x tfx_bsl (rows/CPU-s)",
        framed["rows_cpu_s"] / bsl["rows_cpu_s"] if framed and bsl else None,
        5,
    )
    e2e = {e["name"]: e for e in res.get("e2e", [])}

    def ss_ratio(a: str, b: str) -> float | None:
        x, y = e2e.get(a), e2e.get(b)
        if x and y and x.get("steady_rows_s") and y.get("steady_rows_s"):
            return x["steady_rows_s"] / y["steady_rows_s"]
        return None

    for comp, goal in (("gzip", 6), ("none", 8)):
        add(
            f"e2e steady state {comp} >= {goal}x TFX-style (per-row)",
            ss_ratio(PROJECT_GZIP if comp == "gzip" else PROJECT_NONE, f"TFX-style per-row {comp}"),
            goal,
        )
        if f"TFX-style tfx_bsl {comp}" in e2e:
            add(
                f"e2e steady state {comp} >= {goal}x TFX-style (tfx_bsl)",
                ss_ratio(
                    PROJECT_GZIP if comp == "gzip" else PROJECT_NONE, f"TFX-style tfx_bsl {comp}"
                ),
                goal,
            )
    rss = res.get("rss") or []
    scale = f"{rss[1]['rows'] / rss[0]['rows']:.0f}x" if len(rss) == 2 else "8x"
    add(
        f"peak RSS at {scale} the rows <= 1.3x",
        rss[1]["max_rss_mb"] / rss[0]["max_rss_mb"] if len(rss) == 2 else None,
        1.3,
        low=True,
    )
    w = (res.get("workers") or {}).get("jobs", [])
    two = (
        w[1]["steady_rows_s"] / w[0]["steady_rows_s"]
        if len(w) == 2 and w[0].get("steady_rows_s") and w[1].get("steady_rows_s")
        else None
    )
    add("2 workers >= 1.6x one (steady state)", two, 1.6)
    for r in res.get("reader", []):
        if r.get("way") == "pipeline.reader.load_dataset":
            add(f"reader >= 5x tutorial ({r['output']} output)", r["vs_tutorial"], 5)
    return out
