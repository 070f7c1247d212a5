"""What `tfrecord-etl verify` found: one Finding per fault, collected with a cap per check, and
the report as text or JSON."""

from __future__ import annotations

import collections
import dataclasses
from typing import Any

__all__ = ["CHECKS", "Finding", "Findings", "VerifyReport", "format_report"]

# check name -> what a finding of it means (the report's legend, in the order of the checks)
CHECKS = {
    "files": "a shard the manifest lists is missing or unreadable",
    "stale": "a file on disk named like a shard (or an error file) that the manifest does not list",
    "compression": "a shard does not decompress (corrupt or truncated)",
    "framing": "a TFRecord frame is broken (length crc, truncated record)",
    "crc": "a record's data does not match its crc",
    "parse": "a record does not parse as the manifest's features (kind, length, missing)",
    "features": "records hold features the manifest does not list",
    "nulls": "a feature is absent from another number of records than its null_count",
    "counts": "records per split or in total differ from the manifest",
    "index": "a shard's index file (--index) is missing or does not say where its records are",
    "bad_rows": "the rows in _errors/ differ from the manifest, or from the source",
    "schema": "the source no longer maps to the manifest's features",
    "missing": "a source row's record is not in its split",
    "changed": "a source row and a record that differ in some columns",
    "split": "a record is in another split than its row's",
    "duplicate": "a record is there more times than the source has it",
    "extra": "a record that no source row gives",
}


@dataclasses.dataclass(frozen=True)
class Finding:
    """One fault. `message` is a whole sentence naming the shard and record, or the source
    file and row; the other fields hold the same facts for programs."""

    check: str
    message: str
    split: str | None = None
    file: str | None = None
    record: int | None = None
    source: str | None = None
    row: int | None = None
    columns: dict[str, dict[str, Any]] | None = None  # column -> {"source": v, "record": v}

    def to_json(self) -> dict[str, Any]:
        return {k: v for k, v in dataclasses.asdict(self).items() if v is not None}


class Findings:
    """Every finding counted by check; the first `limit` of each check kept."""

    def __init__(self, limit: int = 20) -> None:
        if limit < 1:
            raise ValueError(
                f"the number of findings kept per check must be at least 1, not {limit}"
            )
        self.limit = limit
        self.counts: collections.Counter[str] = collections.Counter()
        self.kept: list[Finding] = []

    def add(self, finding: Finding, count: int = 1) -> None:
        if finding.check not in CHECKS:
            raise ValueError(f"unknown check {finding.check!r}")
        if self.counts[finding.check] < self.limit:
            self.kept.append(finding)
        self.counts[finding.check] += count

    def more(self, check: str, count: int) -> None:
        """Count `count` findings of `check` beyond those added (not kept)."""
        self.counts[check] += count

    def __len__(self) -> int:
        return sum(self.counts.values())


@dataclasses.dataclass
class VerifyReport:
    """The result: what was checked (`checked`, JSON-able) and what was found."""

    output: str
    checked: dict[str, Any]
    findings: Findings

    @property
    def ok(self) -> bool:
        return len(self.findings) == 0

    def to_json(self) -> dict[str, Any]:
        order = {name: i for i, name in enumerate(CHECKS)}
        kept = sorted(self.findings.kept, key=lambda f: order[f.check])
        return {
            "result": "passed" if self.ok else "failed",
            "checked": self.checked,
            "finding_counts": {
                c: self.findings.counts[c] for c in CHECKS if self.findings.counts[c]
            },
            "findings": [f.to_json() for f in kept],
        }


def _checked_lines(checked: dict[str, Any]) -> list[str]:
    lines = []
    if checked.get("spans"):
        lines.append(f"dataset: spans {checked['spans']}, each checked as an output of its own")
    m = checked["manifest"]
    splits = ", ".join(
        f"{name} {s['rows']} in {s['files']} file(s)" for name, s in m["splits"].items()
    )
    lines.append(
        f"manifest: {m['rows']} records ({splits}), {m['compression']}, "
        f"{m['features']} features, {m['bad_rows']} bad row(s)"
    )
    r = checked["records"]
    per_split = ", ".join(f"{name} {n}" for name, n in r["per_split"].items())
    lines.append(
        f"records: {r['read']} read from {r['files']} file(s) ({per_split}): frames and crcs, "
        "parse against the manifest's features, null counts"
    )
    s = checked.get("source")
    if s:
        mode = "full" if s["sample"] is None else f"sample {s['sample']:g} (seed {s['seed']})"
        lines.append(
            f"source: {s['rows_compared']} row(s) of {s['files']} file(s) compared ({mode}), "
            f"{s['rows_bad']} bad, {s['rows_filtered']} dropped by filters; config from "
            f"{s['config_from']}"
        )
    else:
        lines.append("source: not compared (pass --source to compare values row by row)")
    return lines


def format_report(report: VerifyReport) -> str:
    """The human-readable report: what was checked, the result, then each finding kept."""
    lines = [f"verify {report.output}"]
    lines += ["  " + line for line in _checked_lines(report.checked)]
    findings = report.findings
    if report.ok:
        lines.append("result: passed (no finding)")
        return "\n".join(lines)
    counts = ", ".join(f"{c} {findings.counts[c]}" for c in CHECKS if findings.counts[c])
    lines.append(f"result: FAILED, {len(findings)} finding(s): {counts}")
    order = {name: i for i, name in enumerate(CHECKS)}
    for check in sorted({f.check for f in findings.kept}, key=order.get):
        kept = [f for f in findings.kept if f.check == check]
        lines.append(f"  {check}: {CHECKS[check]}")
        lines += [f"    {f.message}" for f in kept]
        more = findings.counts[check] - len(kept)
        if more > 0:
            lines.append(f"    ... and {more} more (--max-findings shows more)")
    return "\n".join(lines)
