"""Beam's `DaskRunner` with the translation gaps this job hits closed: run the job on a Dask
cluster with `--runner=DaskRunner --dask_client_address=HOST:PORT` (the short name selects
this runner, pipeline/engines/beam/options.py).

Beam 2.77's DaskRunner (apache_beam/runners/dask/) turns each leaf transform into a `dask.bag`
operation. Its translation has gaps that make a real job fail or, worse, write wrong output:

1. Tagged outputs. Its ParDo returns one bag with every output of the DoFn, and the visitor keys
   bags by producing transform, so every consumer of `pcoll[tag]` (and of the main output) gets
   all outputs mixed: `EncodeExamples`' stats reach the writers ("'BatchStats' object has no
   attribute 'framed'"). Fixed: a ParDo yields (tag, value) pairs and each output PCollection is
   the bag of its own tag; bags are keyed by PCollection.
2. Side inputs. It hands the DoFn a `SideInputMap` over the side input's *bag*, computed inside
   the consuming task (`list(bag)`): the upstream graph runs again there, side effects included,
   and the raw `AsSingleton` objects are left in the arguments instead of their values. Fixed:
   each side input is one list joined from its bag's partitions, taken by their own graph keys
   (a dask `Item` or an optimized `Delayed` would be a renamed copy of the upstream graph, run
   once more per consumer), a dependency of the consuming tasks; its values replace Beam's
   placeholders (`transform.args`/`kwargs`, as the DirectRunner does).
3. `finish_bundle` outputs. It collects a partition's outputs before `finish_bundle` runs, so
   what a DoFn emits there is lost (the rolling writer emits its last files there). Fixed:
   outputs are collected after `finish_bundle`.
4. Shared receivers. One output list is built with the graph and shared by every partition run
   in a process. Fixed: each partition gets its own.
5. `Impulse` (used by Beam's file sinks, e.g. `WriteToText`) has no translation and yields
   nothing. Fixed: one partition holding `b""`.
6. Only the last visited transform is computed. Fixed: every PCollection no step consumes is.
7. `Create` puts 128 elements in a partition: a job's read tasks all run in one Dask task, on one
   worker. Fixed: one element per partition unless --dask_npartitions/--dask_partition_size.
8. A task that raises is not retried. Fixed: `--dask_task_retries` (default 3, as Dataflow
   retries a batch work item 4 times in all) is passed to `Client.compute`; a lost worker's
   tasks are rerun by Dask in any case.

Windowing is the global window only, as in Beam's translation (the job uses no other).
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
from collections.abc import Iterable, Sequence
from typing import Any

import apache_beam as beam
from apache_beam import pvalue
from apache_beam.internal import pickler
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.pipeline import AppliedPTransform, PipelineVisitor
from apache_beam.runners.common import (
    DoFnContext,
    DoFnInvoker,
    DoFnSignature,
    Receiver,
    _OutputHandler,
)
from apache_beam.runners.dask import dask_runner as beam_dask
from apache_beam.runners.dask import transform_evaluator as beam_ops
from apache_beam.runners.dask.overrides import _Create, dask_overrides
from apache_beam.runners.runner import PipelineState
from apache_beam.transforms.sideinputs import SideInputMap
from apache_beam.transforms.window import GlobalWindow, GlobalWindows
from apache_beam.utils.windowed_value import WindowedValue

__all__ = ["DaskRetryOptions", "DaskRunner", "DaskRunnerResult", "run_partition"]

DEFAULT_RETRIES = 3


class DaskRetryOptions(PipelineOptions):
    """How often Dask reruns a task that raised (a lost worker's tasks are rerun regardless)."""

    @classmethod
    def _add_argparse_args(cls, parser: argparse.ArgumentParser) -> None:
        parser.add_argument(
            "--dask_task_retries",
            type=int,
            default=DEFAULT_RETRIES,
            help="times Dask reruns a task that raised before the job fails "
            f"(default {DEFAULT_RETRIES})",
        )


class _Collect(Receiver):
    """Receives one output tag's windowed values into the partition's (tag, value) list."""

    def __init__(self, tag: str | None, out: list[tuple[str | None, Any]]) -> None:
        self._tag, self._out = tag, out

    def receive(self, windowed_value: WindowedValue) -> None:
        self._out.append((self._tag, windowed_value.value))


class _Receivers(dict):
    """tag -> receiver, made on first use; all append to one list."""

    def __init__(self, out: list[tuple[str | None, Any]]) -> None:
        super().__init__()
        self._out = out

    def __missing__(self, tag: str | None) -> _Collect:
        self[tag] = receiver = _Collect(tag, self._out)
        return receiver


@dataclasses.dataclass(frozen=True)
class _SideView:
    """What a side input is, without its PCollection: the view class and its options."""

    view: type
    options: Any


def _global(value: Any) -> WindowedValue:
    return value if isinstance(value, WindowedValue) else WindowedValue(value, 0, (GlobalWindow(),))


def run_partition(
    items: Iterable[Any],
    payload: bytes,
    label: str,
    views: Sequence[_SideView],
    *side_values: list[Any],
) -> list[tuple[str | None, Any]]:
    """Run one bundle: the DoFn (with its args) from `payload` over the partition's `items`,
    side inputs from `side_values` (each the whole side PCollection, in `views` order).
    Returns (tag, element) pairs, the main output's tag None, `finish_bundle`'s outputs last."""
    fn, args, kwargs = pickler.loads(payload)
    out: list[tuple[str | None, Any]] = []
    receivers = _Receivers(out)
    side_inputs = [
        SideInputMap(v.view, v.options, [_global(x) for x in values])
        for v, values in zip(views, side_values, strict=True)
    ]
    handler = _OutputHandler(
        window_fn=GlobalWindows(),
        main_receivers=receivers[None],
        tagged_receivers=receivers,
        per_element_output_counter=None,
        output_batch_converter=None,
        process_yields_batches=False,
        process_batch_yields_elements=False,
    )
    invoker = DoFnInvoker.create_invoker(
        DoFnSignature(fn),
        handler,
        context=DoFnContext(label, state=None),
        side_inputs=side_inputs,
        input_args=args,
        input_kwargs=kwargs,
        user_state_context=None,
        bundle_finalizer_param=beam.DoFn.BundleFinalizerParam(),
    )
    invoker.invoke_setup()
    invoker.invoke_start_bundle()
    for item in items:
        invoker.invoke_process(beam_ops.get_windowed_value(item, None))
    invoker.invoke_finish_bundle()
    invoker.invoke_teardown()
    return out


def _concat(parts: Iterable[Iterable[Any]]) -> list[Any]:
    return [x for part in parts for x in part]


def _is_tag(tag: str | None, pair: tuple[str | None, Any]) -> bool:
    return pair[0] == tag


def _value(pair: tuple[str | None, Any]) -> Any:
    return pair[1]


def _nothing(_: Iterable[Any]) -> list[Any]:
    return []


def _create(transform: _Create, bag_kwargs: dict[str, Any]) -> Any:
    """Beam's Create translation, one element per partition unless --dask_npartitions or
    --dask_partition_size says otherwise: a Create of work items (a read's tasks) is then
    spread over the workers, where Beam's default (128 per partition) runs them in one task."""
    import dask.bag as db

    items = list(transform.values)
    npartitions = bag_kwargs.get("npartitions")
    size = bag_kwargs.get("partition_size")
    if npartitions and size:
        raise ValueError("give --dask_npartitions or --dask_partition_size, not both")
    if not npartitions and not size:
        size = 1
    if npartitions:
        return db.from_sequence(items, npartitions=npartitions)
    return db.from_sequence(items, partition_size=max(1, size))


class _Visitor(PipelineVisitor):
    """Each leaf transform -> a dask bag per output PCollection."""

    def __init__(self, bag_kwargs: dict[str, Any]) -> None:
        self.bags: dict[pvalue.PCollection, Any] = {}
        self.consumed: set[pvalue.PCollection] = set()
        self._bag_kwargs = bag_kwargs

    def _input(self, node: AppliedPTransform) -> Any:
        bags = [self.bags.get(p) for p in node.inputs if not isinstance(p, pvalue.PBegin)]
        self.consumed.update(p for p in node.inputs if not isinstance(p, pvalue.PBegin))
        return bags

    def visit_transform(self, node: AppliedPTransform) -> None:
        import dask.bag as db

        transform = node.transform
        inputs = self._input(node)
        if isinstance(transform, _Create):
            bag = _create(transform, self._bag_kwargs)
        elif isinstance(transform, beam.Impulse):
            bag = db.from_sequence([b""], npartitions=1)
        elif type(transform) is beam.ParDo:
            self._par_do(node, inputs[0])
            return
        else:  # Beam's translation of Flatten, GroupByKey; identity otherwise (Reshuffle, ...)
            op_class = beam_ops.TRANSLATIONS.get(type(transform), beam_ops.NoOp)
            op = op_class(node, bag_kwargs=self._bag_kwargs)
            if isinstance(op, beam_ops.Flatten):
                bag = op.apply(inputs) if inputs else db.from_sequence([], npartitions=1)
            else:
                bag = op.apply(inputs[0] if inputs else None)
        for out in node.outputs.values():
            if isinstance(out, pvalue.PCollection):
                self.bags[out] = bag

    def _par_do(self, node: AppliedPTransform, bag: Any) -> None:
        import dask

        transform = node.transform
        views, values = [], []
        for side in transform.side_inputs:
            self.consumed.add(side.pvalue)
            views.append(_SideView(type(side), side._view_options()))
            # the side input's partitions by their own keys (optimize_graph=False): an Item or
            # an optimized Delayed would be a renamed copy of the upstream graph, run again
            parts = self.bags[side.pvalue].to_delayed(optimize_graph=False)
            values.append(dask.delayed(_concat, pure=True)(parts))
        payload = pickler.dumps((transform.fn, list(transform.args), dict(transform.kwargs)))
        pairs = bag.map_partitions(run_partition, payload, node.full_label, views, *values)
        for tag, out in node.outputs.items():
            if isinstance(out, pvalue.PCollection):
                key = None if tag in (None, "None") or out.tag is None else out.tag
                self.bags[out] = pairs.filter(functools.partial(_is_tag, key)).map(_value)

    def leaves(self) -> list[Any]:
        """The bags no step consumes: computing them runs the whole graph."""
        return [
            bag.map_partitions(_nothing)
            for pcoll, bag in self.bags.items()
            if pcoll not in self.consumed and bag is not None
        ]


class DaskRunnerResult(beam_dask.DaskRunnerResult):
    """Beam's result, closing its client once the job has ended (Beam's keeps it open, and it
    then tries to reconnect to a scheduler that is gone)."""

    def wait_until_finish(self, duration: int | None = None) -> str:
        try:
            return super().wait_until_finish(duration)
        finally:
            if PipelineState.is_terminal(self._state):
                self.client.close()


class DaskRunner(beam_dask.DaskRunner):
    """Beam's DaskRunner with tagged outputs, side inputs, `finish_bundle` outputs, Impulse and
    task retries translated (see the module docstring). Same options (`--dask_client_address`,
    ...), plus `--dask_task_retries`."""

    def run_pipeline(self, pipeline: beam.Pipeline, options: PipelineOptions) -> DaskRunnerResult:
        import dask.distributed as ddist

        dask_options = options.view_as(beam_dask.DaskOptions).get_all_options(
            drop_default=True, current_only=True
        )
        bag_kwargs = beam_dask.DaskOptions._extract_bag_kwargs(dask_options)
        retries = options.view_as(DaskRetryOptions).dask_task_retries
        # the client first: a GroupByKey's dask shuffle is the task-based one (across workers)
        # only while a distributed client exists, else an on-disk one local to each process
        client = ddist.Client(**dask_options)
        pipeline.replace_all(dask_overrides())
        visitor = _Visitor(bag_kwargs)
        pipeline.visit(visitor)
        leaves = visitor.leaves()
        futures = client.compute(leaves, retries=retries)  # optimized as one graph
        return DaskRunnerResult(client, futures)
