"""`convert --incremental`: convert only the inputs that are new since the last run, into a new
numbered span of the dataset in `--output` (pipeline/output/dataset/).

One run, under the dataset's lease (`<output>/_LEASE`, so two runs are one after the other):

1. read dataset.json (none on the first run) and remove span directories it does not list
   (a run killed before it committed its span, or a retired span whose removal failed);
2. match the inputs and compare them with the ledger: new, changed (another size or
   modification time), gone, unchanged. A changed input stops the run (exit 2, each named)
   unless `--reconvert-changed`: then every span holding one is re-converted, with the new
   inputs, into the new span and retired. `--overwrite` re-converts every input into one new
   span and retires all the others. Nothing new: exit 0, nothing written;
3. run the span as any run (pipeline/cli/convert.py `run_config`): its own output
   `span-NNNNN/`, its lease, checks, engine and manifest, with the schema-drift gate against
   the last span (a new column fails too: the spans of a dataset share one set of features)
   and the fitted transforms of the last span reused (`--refit` fits them again);
4. commit (pipeline/cli/span_run.py): the whole dataset's statistics merged from the spans'
   saved accumulators, dataset.json rewritten with the span, its inputs (the ledger) and those
   statistics, then the retired spans' directories and earlier statistics removed.

A run killed before step 4 leaves the dataset as it was (its readers see the committed spans);
the next run removes the unfinished span and converts the same inputs again.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
from collections.abc import Mapping, Sequence
from typing import Any

import pyarrow as pa

from pipeline.cli.convert import Run, configured, run_config
from pipeline.cli.errors import EXIT_OK, EXIT_USAGE, print_error
from pipeline.cli.joblog import JobLog, job_log
from pipeline.cli.span_run import SpanPlan, SpanRun, remove_spans
from pipeline.job.config import JobConfig
from pipeline.job.errors import ConfigError
from pipeline.job.plan import JobPlan
from pipeline.output.dataset import (
    Dataset,
    InputChanges,
    LedgerInput,
    compare_inputs,
    read_dataset,
    span_name,
)
from pipeline.output.dataset.ledger import TEMP_PREFIX, span_dirs
from pipeline.output.entries import delete
from pipeline.output.lease import acquire_lease, release_lease
from pipeline.output.manifest import MANIFEST_NAME, read_manifest
from transforms import fs
from transforms.read.delimited.reader import CsvOptions
from transforms.read.inputs import match_input_metadata
from transforms.read.partitions import partition_segments

__all__ = ["SpanPlan", "Survey", "convert_incremental", "plan_span", "preview", "survey"]


def plan_span(
    dataset: Dataset,
    found: Sequence[LedgerInput],
    changes: InputChanges,
    reconvert_changed: bool,
    overwrite: bool,
) -> SpanPlan | None:
    """What the run converts (None: nothing new). ConfigError when an input changed and
    `reconvert_changed` is not given."""
    number = dataset.next_span
    if overwrite:
        return SpanPlan(number, tuple(found), tuple(dataset.numbers))
    if changes.changed and not reconvert_changed:
        raise ConfigError(
            f"{len(changes.changed)} input(s) changed since they were converted: "
            f"{changes.describe_changed()}; pass --reconvert-changed to convert the spans "
            "holding them again into a new span (those spans are retired), or restore the inputs"
        )
    retire = sorted({span for _, _, span in changes.changed})
    again = {i.path for s in dataset.spans if s.span in retire for i in s.inputs}
    inputs = [i for i in found if i.path in again] + list(changes.new)
    if not inputs:
        return None
    return SpanPlan(number, tuple(sorted(inputs, key=lambda i: i.path)), tuple(retire))


def _found_inputs(patterns: Sequence[str]) -> list[LedgerInput]:
    """The inputs the patterns match now; local paths made absolute (the ledger knows an input
    by its path: a run given a relative pattern and one given an absolute one agree)."""
    found = match_input_metadata(patterns)
    return [
        LedgerInput(os.path.abspath(p) if fs.is_local(p) else p, size, modified)
        for p, (size, modified) in found.items()
    ]


def _lease_options(output: str, beam_args: Sequence[str]) -> Any:
    if fs.is_local(output):
        return None
    from apache_beam.options.pipeline_options import PipelineOptions

    return PipelineOptions(list(beam_args))


def convert_incremental(
    args: argparse.Namespace, flags: Mapping[str, Any], beam_args: Sequence[str]
) -> int:
    """`convert --incremental` (see the module docstring); arguments as `convert` takes them."""
    with job_log(getattr(args, "log_format", None), getattr(args, "quiet", None)) as log:

        def run_it(config: JobConfig, run: Run) -> int:
            return _incremental(config, args, beam_args, log, run)

        return configured(args, flags, run_it)


def _incremental(
    config: JobConfig, args: argparse.Namespace, beam_args: Sequence[str], log: JobLog, run: Run
) -> int:
    output = config.output
    run.output = output
    options = _lease_options(output, beam_args)
    try:
        _refuse_plain_output(output)  # before the lease: nothing of it is touched
        lease = acquire_lease(output, options)
    except (ValueError, OSError) as err:
        return run.report(EXIT_USAGE, "invalid", error=print_error(err, args.debug))
    try:
        return _under_lease(config, args, beam_args, log, run)
    finally:
        try:
            release_lease(output, lease.run_id, options)
        except Exception as err:
            print(
                f"tfrecord-etl: warning: could not remove the dataset's lease: {err}",
                file=sys.stderr,
            )


def _note(log: JobLog, text: str) -> None:
    log.event("note", f"note: {text}", note=text)


def _pinned_csv_types(config: JobConfig, last: str, step: SpanPlan) -> CsvOptions:
    """The CSV options of the next span: the column types the last span read, unless the config
    sets them. A CSV's types are inferred from its first rows, so a new file whose first rows
    are empty in a column would read it as text and fail the drift gate; the dataset's spans
    read it as the first span did."""
    manifest = read_manifest(last)
    if manifest.source_format != "csv" or not step.inputs:
        return config.csv
    keys = {key for key, _ in partition_segments(step.inputs[0].path)}
    types = dict(config.csv.column_types)
    for feature in manifest.features:
        name, source = feature.name, feature.spec.to_json().get("source_type")
        if name in types or name in keys or not isinstance(source, str):
            continue
        try:
            pa.type_for_alias(source)
        except (ValueError, KeyError):
            continue  # a type csv.column_types cannot name: inferred again
        types[name] = source
    return dataclasses.replace(config.csv, column_types=types)


def _span_config(config: JobConfig, dataset: Dataset, step: SpanPlan, refit: bool) -> JobConfig:
    output = config.output
    live = [s for s in dataset.spans if s.span not in step.retire] or list(dataset.spans)
    last = fs.join(output, live[-1].name) if live and not config.overwrite else None
    artifacts = config.transform_artifacts
    if artifacts is None and config.transforms and last is not None and not refit:
        fitted = fs.join(last, "transform", "statistics.json")
        artifacts = fs.join(last, "transform") if fs.exists(fitted) else None
    csv = config.csv
    if last is not None and not (config.transforms or config.sequence or config.files):
        csv = _pinned_csv_types(config, last, step)
    return dataclasses.replace(
        config,
        csv=csv,
        inputs=tuple(i.path for i in step.inputs),
        output=fs.join(output, span_name(step.number)),
        overwrite=False,
        expect_schema=last or config.expect_schema,
        transform_artifacts=artifacts,
        sketches=True,  # merged into the whole dataset's statistics at the commit
    )


@dataclasses.dataclass(frozen=True)
class Survey:
    """What an incremental run finds before it writes: the dataset, the span directories
    present (and those dataset.json does not list), the inputs against the ledger, the next
    span (None: nothing new)."""

    dataset: Dataset
    on_disk: dict[int, list[str]]
    unlisted: list[int]
    changes: InputChanges
    step: SpanPlan | None

    def inputs(self) -> dict[str, int]:
        c = self.changes
        return {
            "new": len(c.new),
            "changed": len(c.changed),
            "gone": len(c.gone),
            "unchanged": c.unchanged,
        }


def _refuse_plain_output(output: str) -> None:
    if fs.exists(fs.join(output, MANIFEST_NAME)):
        raise ConfigError(
            f"{output} holds a complete output of a run without --incremental "
            f"({fs.join(output, MANIFEST_NAME)}); an incremental dataset needs an output of "
            "its own"
        )


def survey(config: JobConfig, reconvert_changed: bool) -> Survey:
    """Read the dataset in `config.output` and match the inputs; writes nothing. ValueError
    (ConfigError) for a changed input without `reconvert_changed`, a malformed ledger, a link."""
    output = config.output
    _refuse_plain_output(output)
    dataset = read_dataset(output) or Dataset()
    on_disk = span_dirs(output)
    unlisted = sorted(set(on_disk) - set(dataset.numbers))
    found = _found_inputs(config.inputs)
    changes = compare_inputs(dataset, found)
    step = plan_span(dataset, found, changes, reconvert_changed, config.overwrite)
    return Survey(dataset, on_disk, unlisted, changes, step)


def preview(config: JobConfig, args: argparse.Namespace) -> tuple[JobConfig | None, dict]:
    """For `plan --incremental`: the next span's config (None: nothing new) and what the run
    would find; nothing written, no lease taken."""
    found = survey(config, getattr(args, "reconvert_changed", False))
    facts: dict[str, Any] = {
        "dataset": config.output,
        "spans": found.dataset.numbers,
        "inputs": found.inputs(),
        "span": None if found.step is None else found.step.number,
        "retire": [] if found.step is None else list(found.step.retire),
        "unlisted": [span_name(n) for n in found.unlisted],
    }
    if found.step is None:
        return None, facts
    return _span_config(config, found.dataset, found.step, getattr(args, "refit", False)), facts


def _under_lease(
    config: JobConfig, args: argparse.Namespace, beam_args: Sequence[str], log: JobLog, run: Run
) -> int:
    output = config.output
    try:
        found = survey(config, getattr(args, "reconvert_changed", False))
    except (ValueError, OSError) as err:
        return run.report(EXIT_USAGE, "invalid", error=print_error(err, args.debug))
    dataset, on_disk, unlisted = found.dataset, found.on_disk, found.unlisted
    changes, step, inputs = found.changes, found.step, found.inputs()
    if fs.is_local(output) and os.path.isdir(output):  # a commit killed before its rename
        delete(output, [e.path for e in os.scandir(output) if e.name.startswith(TEMP_PREFIX)])
    if unlisted:
        remove_spans(output, unlisted, on_disk)
        names = ", ".join(span_name(n) for n in unlisted)
        _note(log, f"removed {names}: not committed to the dataset (a run that did not finish)")
    for then, span in changes.gone:
        _note(log, f"{then.path} (span {span}) is no longer found; its rows stay in the dataset")
    if step is None:
        print(
            f"nothing new: {changes.unchanged} input(s), all in the dataset's spans "
            f"{dataset.numbers}; nothing written"
        )
        return run.report(
            EXIT_OK,
            "succeeded",
            span=None,
            spans=dataset.numbers,
            inputs=inputs,
            dataset_rows=dataset.rows,
            rows_in=0,
            rows_out=0,
            bad=0,
        )
    if step.retire:
        _note(log, f"span {step.number} re-converts and retires span(s) {list(step.retire)}")
    span_run = SpanRun(run, output, dataset, step)
    span_run.facts = {"span": step.number, "inputs": inputs, "retired": list(step.retire)}
    span_config = _span_config(config, dataset, step, getattr(args, "refit", False))

    def check_plan(plan: JobPlan) -> None:
        span_run.plan = plan
        if dataset.spans and plan.new_columns and not config.overwrite:
            raise ConfigError(
                f"column(s) {list(plan.new_columns)} are new against the dataset's span "
                f"{dataset.spans[-1].span} ({span_config.expect_schema}); the spans of a "
                "dataset share one set of features: convert into a new dataset, or pass "
                "--overwrite to convert every input again with them"
            )

    return run_config(span_config, args, beam_args, log, span_run, check_plan)
