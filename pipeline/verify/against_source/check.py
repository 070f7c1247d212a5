"""The output against its source, for `tfrecord-etl verify` with a source (`--source`, `--config`,
`--sample`): the records the source gives (against_source/source.py `expected_records`)
reconciled with the rows the run set aside in `_errors/` and held in a `Comparison`
(against_source/compare.py) that run.py streams the output's records past; then the comparison
as findings: a row whose record is missing, changed (paired with the record that differs by
against_source/pairs.py, the columns that differ named), in another split, duplicated or extra.

pipeline/verify/run.py calls `derive_expected` before it reads the shards and
`report_comparison` after.
"""

from __future__ import annotations

import dataclasses
import json
import posixpath
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from pipeline.verify.against_source.compare import Comparison
from pipeline.verify.against_source.pairs import decode_record, differences, pair
from pipeline.verify.report import Finding, Findings

if TYPE_CHECKING:
    from pipeline.verify.against_source.source import RowSelect, SourcePlan

# The source side (against_source/source.py: the plan, the readers, and with them Beam's
# filesystems) is imported when the records are derived, as in run.py.

__all__ = ["derive_expected", "report_comparison"]


def _aliases(ran: Sequence[str], now: Sequence[str]) -> dict[str, str]:
    """Each path the run read -> the same file among the paths read now (by its name when the
    source was given elsewhere and the names are unique)."""
    by_name: dict[str, list[str]] = {}
    for path in now:
        by_name.setdefault(posixpath.basename(path), []).append(path)
    out = {}
    for path in ran:
        same = [path] if path in now else by_name.get(posixpath.basename(path), [])
        if len(same) == 1:
            out[path] = same[0]
    return out


def derive_expected(
    plan: SourcePlan,
    errors: list[dict],
    ran: Sequence[str],
    select: RowSelect | None,
    findings: Findings,
) -> tuple[Comparison, dict[str, int]]:
    """The expected records (every row, or the sample) against the run's bad rows."""
    from pipeline.verify.against_source.source import expected_records

    config = plan.job.config
    names = [n for n, _ in config.splits]
    comparison = Comparison(names, full=select is None)
    alias = _aliases(ran, plan.job.paths)
    set_aside = {}
    for e in errors:
        key = (alias.get(e.get("source"), e.get("source")), e.get("row"))
        if key[1] is not None and (select is None or select(key[0], np.array([key[1]]))[0]):
            set_aside[key] = e
    matched, stats = set(), {"bad": 0, "filtered": 0}
    for batch in expected_records(plan, select):
        stats["filtered"] += batch.filtered
        for b in batch.bad:
            key = (b["source"], b["row"])
            stats["bad"] += 1
            matched.add(key)
            if key not in set_aside:
                findings.add(
                    Finding(
                        "bad_rows",
                        f"{key[0]}: row {key[1]}: cannot be converted ({b['reason']}), "
                        "and the run did not set it aside in _errors/",
                        source=key[0],
                        row=key[1],
                    )
                )
        if batch.records is None:
            continue
        records = batch.records.records()
        keep = np.ones(len(records), bool)
        for i, row in enumerate(batch.rows.tolist()):
            e = set_aside.get((batch.source, row))
            if e is not None:  # set aside by the run: absent from the output, as expected
                keep[i] = False
                matched.add((batch.source, row))
                findings.add(
                    Finding(
                        "bad_rows",
                        f"{batch.source}: row {row}: the run set it aside "
                        f"({e.get('reason')}), but it converts now (did the source change?)",
                        source=batch.source,
                        row=row,
                    )
                )
        for s, name in enumerate(names):
            chosen = np.flatnonzero(keep & (batch.splits == s))
            comparison.expect(name, batch.source, batch.rows[chosen], [records[i] for i in chosen])
    for key, e in set_aside.items():
        if key not in matched:
            findings.add(
                Finding(
                    "bad_rows",
                    f"{key[0]}: row {key[1]}: in _errors/ ({e.get('reason')}), but the "
                    "source gives no such bad row now",
                    source=key[0],
                    row=key[1],
                )
            )
    comparison.freeze()
    stats["compared"] = comparison.expected
    return comparison, stats


def _place(rows: list[tuple[str, int]]) -> str:
    return "; ".join(f"{src}: row {row}" for src, row in rows[:5]) + (
        f" and {len(rows) - 5} more" if len(rows) > 5 else ""
    )


def _show(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, default=str)


def report_comparison(plan: SourcePlan, comparison: Comparison, findings: Findings) -> None:
    """Findings for the missing, changed, misplaced, duplicated and extra records."""
    missing, total = comparison.missing()
    extras = list(comparison.extras)
    shown = 0
    for m in list(missing):  # a record in another split than its row's
        hit = next((e for e in extras if e.digest == m.digest and e.split != m.split), None)
        if hit is not None and m.found == 0:
            src, row = m.rows[0]
            findings.add(
                Finding(
                    "split",
                    f"{src}: row {row}: its record is in split {hit.split} "
                    f"({hit.file}: record {hit.record}); the row's split is {m.split}",
                    split=m.split,
                    file=hit.file,
                    record=hit.record,
                    source=src,
                    row=row,
                )
            )
            missing.remove(m)
            extras.remove(hit)
            shown += len(m.rows)
    specs = {s.name: s for s in plan.specs}
    if comparison.full and missing and extras:
        wanted: dict[str, set[int]] = {}
        for m in missing:
            wanted.setdefault(m.rows[0][0], set()).add(m.rows[0][1])
        derived = _records_of(plan, wanted)
        key = plan.job.config.split_key
        for split in sorted({m.split for m in missing}):
            ms = [m for m in missing if m.split == split and m.rows[0] in derived]
            xs = [x for x in extras if x.split == split]
            exp = [decode_record(derived[m.rows[0]], specs) or {} for m in ms]
            got = [decode_record(x.data, specs) or {} for x in xs]
            for i, j in pair(exp, got, key):
                m, x = ms[i], xs[j]
                diff = differences(exp[i], got[j])
                src, row = m.rows[0]
                text = "; ".join(
                    f"column {c!r}: source {_show(v['source'])}, record {_show(v['record'])}"
                    for c, v in diff.items()
                )
                findings.add(
                    Finding(
                        "changed",
                        f"{src}: row {row} (split {split}) and {x.file}: "
                        f"record {x.record} differ: {text}",
                        split=split,
                        file=x.file,
                        record=x.record,
                        source=src,
                        row=row,
                        columns=diff,
                    )
                )
                missing.remove(m)
                extras.remove(x)
                shown += len(m.rows)
    for m in missing:
        shown += len(m.rows) - m.found
        same = (
            f"; {len(m.rows)} rows give this same record, the split holds {m.found}"
            if len(m.rows) > 1
            else ""
        )
        findings.add(
            Finding(
                "missing",
                f"{_place(m.rows)}: no record of split {m.split} equals "
                f"the one this row gives{same}",
                split=m.split,
                source=m.rows[0][0],
                row=m.rows[0][1],
            )
        )
    findings.more("missing", max(total - shown, 0))
    for d in comparison.duplicates:
        findings.add(
            Finding(
                "duplicate",
                f"{d.file}: record {d.record} (split {d.split}) is copy "
                f"{d.copy} of a record the source gives {len(d.rows)} time(s) "
                f"({_place(d.rows)}); the first copy is {d.first[0]}: record "
                f"{d.first[1]}",
                split=d.split,
                file=d.file,
                record=d.record,
            )
        )
    findings.more("duplicate", comparison.duplicate_count - len(comparison.duplicates))
    for x in extras:
        record = decode_record(x.data, specs) or {}
        key = plan.job.config.split_key
        what = f" ({key} {_show(record[key])})" if key in record else ""
        findings.add(
            Finding(
                "extra",
                f"{x.file}: record {x.record} (split {x.split}){what}: no "
                "source row gives this record",
                split=x.split,
                file=x.file,
                record=x.record,
            )
        )
    findings.more("extra", comparison.extra_count - len(comparison.extras))


def _records_of(plan: SourcePlan, wanted: dict[str, set[int]]) -> dict[tuple[str, int], bytes]:
    """The records of some source rows, derived again (only their files are read)."""
    from pipeline.verify.against_source.source import expected_records

    work = tuple(w for w in plan.job.work if w.path in wanted)
    again = dataclasses.replace(plan, job=dataclasses.replace(plan.job, work=work))
    arrays = {path: np.array(sorted(rows), np.int64) for path, rows in wanted.items()}

    def select(source: str, rows: np.ndarray) -> np.ndarray:
        return np.isin(rows, arrays.get(source, np.empty(0, np.int64)))

    out = {}
    for batch in expected_records(again, select):
        if batch.records is not None:
            for row, data in zip(batch.rows.tolist(), batch.records.records(), strict=True):
                out[(batch.source, row)] = data
    return out
