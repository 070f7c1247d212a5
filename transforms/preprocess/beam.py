"""The preprocessing PTransforms: thin wiring over chain.py, analyzers.py and artifacts.py."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

import apache_beam as beam

from transforms.batch import TableBatch
from transforms.convert import Conversion
from transforms.deadletter import BAD_TAG, count_bad, isolate_bad_rows
from transforms.preprocess.analyzers import AnalyzeFn
from transforms.preprocess.artifacts import read_artifacts, write_artifacts
from transforms.preprocess.chain import (
    PreprocessPlan,
    analysis_inputs,
    prepare_fitted,
)

__all__ = ["Analyze", "AnalyzeCombineFn", "FitPreprocess", "Preprocess", "WriteArtifacts"]

Fitted = dict[int, dict[str, Any]]


class AnalyzeCombineFn(beam.CombineFn):
    """{step: column} -> {step: result}: analyzers.AnalyzeFn as a Beam CombineFn."""

    def __init__(self, analyzers: Mapping[int, Any]) -> None:
        self._fn = AnalyzeFn(analyzers)

    def create_accumulator(self) -> dict[int, Any]:
        return self._fn.create_accumulator()

    def add_input(self, acc: dict[int, Any], columns: Mapping[int, Any]) -> dict[int, Any]:
        return self._fn.add_input(acc, columns)

    def merge_accumulators(self, accs: Iterable[dict[int, Any]]) -> dict[int, Any]:
        return self._fn.merge_accumulators(accs)

    def extract_output(self, acc: dict[int, Any]) -> Fitted:
        return self._fn.extract_output(acc)


class _WithFitted(beam.DoFn):
    """Holds the plan; prepares the fitted side input once per value it receives."""

    def __init__(self, plan: PreprocessPlan) -> None:
        self._plan = plan

    def setup(self) -> None:
        self._fitted: Mapping | None = None
        self._prepared: dict[int, Any] = {}

    def prepared(self, fitted: Mapping) -> dict[int, Any]:
        if fitted is not self._fitted:
            self._fitted, self._prepared = fitted, prepare_fitted(self._plan, fitted)
        return self._prepared


class _ApplyDoFn(_WithFitted):
    """TableBatch -> TableBatch: the conversion's transform stage (transforms/convert.py)."""

    def __init__(self, conversion: Conversion) -> None:
        super().__init__(conversion.preprocess)
        self._conversion = conversion

    def process(self, batch: TableBatch, fitted: Mapping) -> Iterator:
        out, bad = self._conversion.transform(batch, self.prepared(fitted))
        count_bad("transform", bad)
        for row in bad:
            yield beam.pvalue.TaggedOutput(BAD_TAG, row)
        if out is not None:
            yield out


class _InputsDoFn(_WithFitted):
    def __init__(self, plan: PreprocessPlan, level: int) -> None:
        super().__init__(plan)
        self._level = level

    def process(self, batch: TableBatch, fitted: Mapping) -> Iterator[dict[int, Any]]:
        # A row a step cannot take is left out of the statistics; the full run dead-letters it.
        prepared = self.prepared(fitted)
        inputs, _ = isolate_bad_rows(
            batch, lambda b: analysis_inputs(self._plan, self._level, b, prepared), "transform"
        )
        if inputs is not None:
            yield inputs


@beam.typehints.with_input_types(TableBatch)
class Preprocess(beam.PTransform):
    """TableBatch -> TableBatch (main output `batches`): every step of the conversion's
    preprocessing, with the fitted analyzers as a side input; the rows a step fails on go to
    the output tagged `bad` (dead-letter dicts).
    """

    def __init__(self, conversion: Conversion, fitted: beam.pvalue.AsSingleton) -> None:
        super().__init__()
        if conversion.preprocess is None:
            raise ValueError("Preprocess needs a conversion with preprocessing steps")
        self._conversion = conversion
        self._fitted = fitted

    def expand(self, batches: beam.PCollection) -> beam.pvalue.DoOutputsTuple:
        apply = _ApplyDoFn(self._conversion)
        return batches | "Apply" >> beam.ParDo(apply, self._fitted).with_outputs(
            BAD_TAG, main="batches"
        )


@beam.typehints.with_input_types(TableBatch)
@beam.typehints.with_output_types(dict[int, dict[str, Any]])
class Analyze(beam.PTransform):
    """TableBatch from the source -> one {step index: result} for the analyzers of pass `level`.

    Each batch goes through the steps that pass depends on (fitted in earlier passes, the side
    input `fitted`); each analyzer takes its column where it stands in the list. When splits
    exist, the input is the fit split only (see FitPreprocess).
    """

    def __init__(self, plan: PreprocessPlan, level: int, fitted: beam.pvalue.AsSingleton) -> None:
        super().__init__()
        self._plan = plan
        self._level = level
        self._fitted = fitted

    def expand(self, batches: beam.PCollection) -> beam.PCollection:
        plan, level = self._plan, self._level
        analyze = AnalyzeCombineFn(plan.analyzers(level))
        return (
            batches
            | "Inputs" >> beam.ParDo(_InputsDoFn(plan, level), self._fitted)  # {step: pa.Array}
            | "Fit" >> beam.CombineGlobally(analyze)  # {step: result}
        )


def _merged(new: Fitted, old: Fitted) -> Fitted:
    return {**old, **new}


@beam.typehints.with_output_types(dict[int, dict[str, Any]])
class FitPreprocess(beam.PTransform):
    """PBegin -> one {step index: result} for every analyzer of the plan.

    `read()` makes a fresh transform PBegin -> TableBatch of the rows to fit on (the source, or
    its train split alone): each analysis pass reads the input again (memory does not grow
    with the input). With `artifacts` (a directory checked at construction), the
    results are read from a previous run's files instead, and nothing is read twice.
    """

    def __init__(
        self,
        plan: PreprocessPlan,
        read: Callable[[], beam.PTransform],
        artifacts: str | None = None,
    ) -> None:
        super().__init__()
        self._plan = plan
        self._read = read
        self._artifacts = artifacts

    def expand(self, pbegin: beam.pvalue.PBegin) -> beam.PCollection:
        plan = self._plan
        if self._artifacts is not None:
            return (
                pbegin
                | "ArtifactsDir" >> beam.Create([self._artifacts])
                | "ReadArtifacts" >> beam.Map(read_artifacts, plan)
            )
        fitted = pbegin | "Nothing" >> beam.Create([{}])
        for level in range(1, plan.num_passes + 1):
            # Rows the source cannot read are reported by the full run's read, not here.
            batches = pbegin | f"ReadTable[pass{level}]" >> self._read()  # TableBatch
            side = beam.pvalue.AsSingleton(fitted)
            new = batches | f"Analyze[pass{level}]" >> Analyze(plan, level, side)
            fitted = new | f"Merge[pass{level}]" >> beam.Map(_merged, side)
        return fitted


@beam.typehints.with_input_types(dict[int, dict[str, Any]])
@beam.typehints.with_output_types(str)
class WriteArtifacts(beam.PTransform):
    """The one fitted dict -> the paths of the statistics and vocabulary files written."""

    def __init__(self, plan: PreprocessPlan, directory: str) -> None:
        super().__init__()
        self._plan = plan
        self._directory = directory

    def expand(self, fitted: beam.PCollection) -> beam.PCollection:
        return fitted | "Write" >> beam.FlatMap(write_artifacts, self._plan, self._directory)
