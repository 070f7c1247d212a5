"""The `transforms:` config list -> a checked plan, and the plan applied to a batch.

`parse_steps` checks the list without a schema (step names, parameter names and types);
`plan_preprocess` walks the steps over the input schema, so a missing column or a wrong type
fails at construction with the config file and key, and the schema after the last step is
known before the job runs (the encoder's features are planned from it).

Analysis passes: an analyzer sees the data exactly as the steps before it leave it. Its
*level* is 1 + the highest level among the analyzers its input depends on (through the
columns it reads and every filter before it). The analyzers of one level are fitted together
in one pass over the source, which applies only the steps they depend on (all fitted in
lower levels). A config therefore reads the input 1 + (number of levels) times: e.g.
`zscore(fare)` with `vocabulary(company)` is one analysis pass, `zscore(fare)` then
`bucketize(fare)` two. Reused artifacts (`--transform-artifacts`) need no analysis pass.
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from transforms.batch import TableBatch
from transforms.encode.schema import ConversionError
from transforms.preprocess.base import Step
from transforms.preprocess.column_steps import (
    Cast,
    Clip,
    FillMissing,
    HashBucket,
    Log1p,
    Lower,
    OneHot,
    Reshape,
    SplitText,
    Strip,
)
from transforms.preprocess.fitted_steps import Bucketize, MinMax, VocabularyStep, ZScore
from transforms.preprocess.ops import RowError, column
from transforms.preprocess.spec import StepConfig, StepError
from transforms.preprocess.table_steps import Derive, Drop, Filter, Rename, Select

__all__ = [
    "KINDS",
    "PreprocessError",
    "PreprocessPlan",
    "analysis_inputs",
    "apply_steps",
    "parse_steps",
    "plan_preprocess",
    "prepare_fitted",
]

KINDS: dict[str, type[Step]] = {
    cls.kind: cls
    for cls in (
        Select,
        Drop,
        Rename,
        Cast,
        FillMissing,
        Clip,
        Log1p,
        Filter,
        Derive,
        HashBucket,
        Lower,
        Strip,
        SplitText,
        Reshape,
        OneHot,
        ZScore,
        MinMax,
        VocabularyStep,
        Bucketize,
    )
}

Fitted = Mapping[int, Mapping[str, Any]]  # step index -> analyzer result


class PreprocessError(ConversionError):
    """A step that fails on a row: names the file, row and column, and the step."""


def _type_name(types: tuple[type, ...]) -> str:
    names = {int: "an integer", float: "a number", str: "a string", bool: "true/false"}
    names.update({list: "a list", dict: "a mapping"})
    return " or ".join(names.get(t, t.__name__) for t in types)


def _parse_one(index: int, entry: Any, source: str) -> StepConfig:
    def error(key: str, message: str) -> StepError:
        return StepError(f"{source}: key 'transforms[{index}]{key}': {message}")

    if not isinstance(entry, Mapping) or len(entry) != 1:
        raise error("", "expected a one-key mapping, step name -> parameters")
    ((kind, raw),) = entry.items()
    if kind not in KINDS:
        near = difflib.get_close_matches(str(kind), list(KINDS), n=1, cutoff=0.7)
        hint = f"did you mean {near[0]!r}? " if near else ""
        raise error("", f"unknown step {kind!r} ({hint}known: {', '.join(sorted(KINDS))})")
    raw = {} if raw is None else raw
    if not isinstance(raw, Mapping):
        raise error(f".{kind}", "expected a mapping of parameters")
    spec = KINDS[kind].params
    unknown = sorted(set(raw) - set(spec))
    if unknown:
        raise error(
            f".{kind}.{unknown[0]}", f"unknown parameter (known: {', '.join(sorted(spec))})"
        )
    params = {}
    for name, param in spec.items():
        value = raw.get(name)
        if value is None:
            if param.required:
                raise error(f".{kind}.{name}", "required")
            params[name] = param.default
            continue
        wrong_bool = isinstance(value, bool) and bool not in param.types
        if wrong_bool or not isinstance(value, param.types):
            raise error(f".{kind}.{name}", f"expected {_type_name(param.types)}, got {value!r}")
        params[name] = value
    config = StepConfig(index, kind, params, dict(raw), source)
    KINDS[kind].check_params(config)
    return config


def parse_steps(raw: Any, source: str) -> tuple[StepConfig, ...]:
    """The config's `transforms:` list, checked without a schema; raises StepError."""
    if not isinstance(raw, list):
        raise StepError(f"{source}: key 'transforms': expected a list of steps")
    return tuple(_parse_one(i, entry, source) for i, entry in enumerate(raw))


@dataclasses.dataclass(frozen=True)
class PreprocessPlan:
    """The steps planned over the input schema, and how their analyzers are fitted."""

    steps: tuple[Step, ...]
    input_schema: pa.Schema
    output_schema: pa.Schema
    levels: Mapping[int, int]  # analyzer step index -> its analysis pass (1-based)
    needed: Mapping[int, frozenset[int]]  # pass -> the steps that pass applies

    @property
    def num_passes(self) -> int:
        return max(self.levels.values(), default=0)

    def analyzers(self, level: int | None = None) -> dict[int, Any]:
        """step index -> accumulator, for one pass (or all)."""
        return {
            i: self.steps[i].analyzer()
            for i, lv in self.levels.items()
            if level is None or lv == level
        }

    def configured(self) -> list[dict[str, Any]]:
        """The steps as written in the config (for the manifest)."""
        return [{s.config.kind: dict(s.config.configured)} for s in self.steps]

    def inputs_of(self, i: int) -> list[int]:
        """The steps before step `i` that change the rows or the values it reads, in order."""
        return sorted(_dependencies(self.steps, i))


def _dependencies(steps: Sequence[Step], i: int) -> set[int]:
    """The steps before `i` that change the rows or the values step `i` reads."""
    wanted = set(steps[i].reads)
    needed: set[int] = set()
    for j in range(i - 1, -1, -1):
        step = steps[j]
        if isinstance(step, Rename):
            back = {new: old for old, new in step.mapping.items()}
            wanted = {back.get(c, c) for c in wanted}
        elif step.structural:
            continue
        elif step.filters:
            needed.add(j)
            wanted |= step.reads
        elif step.writes & wanted:
            needed.add(j)
            wanted = (wanted - step.writes) | step.reads
    return needed


def plan_preprocess(configs: Sequence[StepConfig], schema: pa.Schema) -> PreprocessPlan:
    """Build every step against the schema the previous one leaves; raises StepError."""
    planned: list[Step] = []
    domains: dict[str, int] = {}
    current = schema
    for config in configs:
        step = KINDS[config.kind](config, current, domains)
        planned.append(step)
        current, domains = step.output_schema, step.domains
    levels: dict[int, int] = {}
    needed: dict[int, set[int]] = {}
    for i, step in enumerate(planned):
        if step.analyzer() is None:
            continue
        deps = _dependencies(planned, i)
        levels[i] = 1 + max((levels[j] for j in deps if j in levels), default=0)
        needed.setdefault(levels[i], set()).update(deps)
    return PreprocessPlan(
        tuple(planned),
        schema,
        current,
        levels,
        {level: frozenset(s) for level, s in needed.items()},
    )


def prepare_fitted(plan: PreprocessPlan, fitted: Fitted) -> dict[int, Any]:
    """Analyzer results in the form the steps apply them (vocabularies as Arrow arrays...)."""
    return {i: plan.steps[i].prepare(result) for i, result in fitted.items()}


def _first_failing_row(fn: Callable[[pa.Table], Any], table: pa.Table) -> int:
    """The first row on which a row-local step fails (bisection over prefixes; error path)."""
    low, high = 0, table.num_rows  # a prefix of `high` rows fails, one of `low` rows does not
    while high - low > 1:
        mid = (low + high) // 2
        try:
            fn(table.slice(0, mid))
        except (pa.ArrowException, RowError):
            high = mid
        else:
            low = mid
    return high - 1


def _run(
    step: Step, fn: Callable[[pa.Table], Any], table: pa.Table, source: str, rows: np.ndarray
) -> Any:
    """`fn(table)`; a failure becomes a PreprocessError naming the source row and column."""
    try:
        return fn(table)
    except RowError as err:
        index, message = err.index, err.message
        cause: Exception = err
    except pa.ArrowException as err:
        index, message, cause = _first_failing_row(fn, table), str(err), err
    row = int(rows[index]) if 0 <= index < len(rows) else "?"
    raise PreprocessError(
        f"{source}: row {row}: column {step.error_column!r}: "
        f"{step.config.key()} ({step.config.source}): {message}"
    ) from cause


def _walk(
    plan: PreprocessPlan, batch: TableBatch, fitted: Mapping[int, Any], level: int | None
) -> tuple[pa.Table, np.ndarray | None, dict[int, pa.Array]]:
    """Apply the steps of the full run (level None) or of one analysis pass to a batch.

    Returns the table, the source row of each row (None while no row was dropped), and for an
    analysis pass each of its analyzers' input column, taken where the analyzer stands.
    """
    table = batch.table
    rows = batch.rows
    if rows is None:
        rows = np.arange(batch.first_row, batch.first_row + table.num_rows, dtype=np.int64)
    filtered = batch.rows is not None
    inputs: dict[int, pa.Array] = {}
    needed = plan.needed.get(level, frozenset()) if level is not None else None
    last = len(plan.steps) - 1
    if level is not None:
        last = max(i for i, lv in plan.levels.items() if lv == level)
    for i, step in enumerate(plan.steps[: last + 1]):
        if needed is not None:
            if plan.levels.get(i) == level:
                inputs[i] = column(table, step.column)
                continue
            if i not in needed and not isinstance(step, Rename):
                continue  # nothing this pass fits depends on it
        if step.filters:
            keep = _run(step, step.mask, table, batch.source, rows)
            table, rows = table.filter(keep), rows[keep.to_numpy(zero_copy_only=False)]
            filtered = True
        else:
            apply = functools.partial(step.apply, fitted=fitted.get(i))
            table = _run(step, apply, table, batch.source, rows)
    return table, (rows if filtered else None), inputs


def apply_steps(
    plan: PreprocessPlan, batch: TableBatch, fitted: Mapping[int, Any]
) -> TableBatch | None:
    """Every step on one batch (`fitted` from `prepare_fitted`); None when no row is left."""
    table, rows, _ = _walk(plan, batch, fitted, None)
    if table.num_rows == 0:
        return None
    return dataclasses.replace(batch, table=table, rows=rows)


def analysis_inputs(
    plan: PreprocessPlan, level: int, batch: TableBatch, fitted: Mapping[int, Any]
) -> dict[int, pa.Array]:
    """The input column of each analyzer of pass `level`, as the steps before it leave it.

    `batch` comes from the source; when splits exist it is to come from the train split only.
    """
    return _walk(plan, batch, fitted, level)[2]
