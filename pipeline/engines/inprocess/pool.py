"""Worker processes for the in-process engine: a function over a list of work items, run on N
processes of this machine, the results handed back in the items' order.

    for index, result in run_items(convert_unit, units, workers=4, describe=str): ...

With one worker the items run here, one after another. With more, `run_items` forks that many
processes (the `fork` start method: a worker starts with everything this process holds, the
plan, the compiled kernel, the fitted analyzers, so nothing is pickled on the way in and a
worker costs milliseconds, not an interpreter's start-up). Each worker is handed one item index
at a time over its pipe and sends back the result (pickled); the next item goes to whichever
worker is free, the largest items first (`sizes`), so the last item to finish is a small one.
Results are yielded in item order whatever order they finish in, so what the caller merges,
and so the output, does not depend on the number of workers.

Faults, each a one-line error naming the work item (`WorkItemError`), after every worker is
stopped:
- a worker raises: its exception's message (and, with `--debug`, its traceback, as the cause);
- a worker dies (killed, out of memory): the signal or exit code and the item it held;
- Ctrl-C: the workers ignore SIGINT (the terminal sends it to the whole process group), this
  process stops them and lets the KeyboardInterrupt through.
"""

from __future__ import annotations

import collections
import contextlib
import multiprocessing
import signal
import traceback
from collections.abc import Callable, Iterator, Sequence
from multiprocessing.connection import Connection, wait
from typing import Any, TypeVar

__all__ = ["UserWorkItemError", "WorkItemError", "run_items"]

PREFETCH = 2  # items sent to a worker at a time: the one it works on, and the next

T = TypeVar("T")
R = TypeVar("R")


class WorkItemError(RuntimeError):
    """A work item failed in a worker, or its worker died."""


class UserWorkItemError(WorkItemError, ValueError):
    """A work item failed on the user's input (the worker raised a ValueError or OSError):
    reported without the hint of a program fault."""


class _RemoteTracebackError(Exception):
    """The worker's traceback, as the cause of the error raised here."""

    def __str__(self) -> str:
        return str(self.args[0])


def _error(item: str, err: BaseException, remote: str | None = None) -> WorkItemError:
    """The error for `err` raised on `item`, naming the item unless its message does."""
    message = str(err) or type(err).__name__
    text = message if item and item in message else f"{item}: {message}"
    cls = UserWorkItemError if isinstance(err, ValueError | OSError) else WorkItemError
    made = cls(text)
    made.__cause__ = _RemoteTracebackError(remote) if remote else err
    return made


def _serve(conn: Connection, fn: Callable[[Any], Any], items: Sequence[Any]) -> None:
    """A worker: run fn(items[i]) for each index received; None ends it."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the launcher's to handle
    while True:
        try:
            index = conn.recv()
        except EOFError:
            return
        if index is None:
            return
        try:
            result = fn(items[index])
        except BaseException as err:  # sent back as text: the launcher names the item
            with contextlib.suppress(Exception):
                conn.send(("error", index, (type(err).__name__, str(err), traceback.format_exc())))
            return
        conn.send(("done", index, result))


def _died(process: multiprocessing.process.BaseProcess) -> str:
    code = process.exitcode
    if code is not None and code < 0:
        with contextlib.suppress(ValueError):
            return f"was killed by {signal.Signals(-code).name}"
    return f"exited with code {code}"


class _WorkerError(Exception):
    """A worker's error, rebuilt from its text (its class may not pickle)."""

    def __init__(self, name: str, message: str) -> None:
        super().__init__(message)
        self.name = name


def run_items(
    fn: Callable[[T], R],
    items: Sequence[T],
    workers: int,
    describe: Callable[[T], str] = str,
    sizes: Sequence[float] | None = None,
) -> Iterator[tuple[int, R]]:
    """(index, fn(items[index])) for every item, in index order; `workers` processes (1: here).
    `describe` names an item in an error; `sizes` (optional) orders the work, largest first."""
    if workers <= 1 or len(items) <= 1:
        for index, item in enumerate(items):
            try:
                result = fn(item)
            except (KeyboardInterrupt, WorkItemError):
                raise
            except Exception as err:
                raise _error(describe(item), err) from err
            yield index, result
        return
    order = list(range(len(items)))
    if sizes is not None:
        order.sort(key=lambda i: -sizes[i])  # largest first: the tail is a small item
    yield from _run_pool(fn, items, min(workers, len(items)), describe, order)


def _run_pool(
    fn: Callable[[T], R],
    items: Sequence[T],
    workers: int,
    describe: Callable[[T], str],
    order: list[int],
) -> Iterator[tuple[int, R]]:
    context = multiprocessing.get_context("fork")
    pending = collections.deque(order)
    procs: list[tuple[multiprocessing.process.BaseProcess, Connection]] = []
    # worker -> the item indices sent to it, the first being worked on: a worker holds a second
    # one queued (while items are left for every worker), so it never waits for this process,
    # which may be busy with what the caller does with a result
    held: dict[int, collections.deque[int]] = {}
    done: dict[int, Any] = {}
    next_out = 0

    def feed(w: int) -> None:
        queue = held.setdefault(w, collections.deque())
        while pending and (not queue or (len(queue) < PREFETCH and len(pending) >= workers)):
            index = pending.popleft()
            queue.append(index)
            try:
                procs[w][1].send(index)
            except OSError:  # its end of the pipe closed: it died
                raise died(w) from None
        if not queue:
            del held[w]
            with contextlib.suppress(OSError):
                procs[w][1].send(None)

    def died(w: int) -> WorkItemError:
        proc = procs[w][0]
        proc.join(timeout=5)
        return WorkItemError(
            f"a worker process (pid {proc.pid}) {_died(proc)} while it worked on "
            f"{describe(items[held[w][0]])}"
        )

    try:
        for _ in range(workers):
            ours, theirs = context.Pipe()
            proc = context.Process(target=_serve, args=(theirs, fn, items), daemon=True)
            proc.start()
            theirs.close()
            procs.append((proc, ours))
        for w in range(workers):
            feed(w)
        while held:
            busy = [procs[w] for w in held]  # an idle worker's sentinel would wake us for nothing
            ready = wait([c for _, c in busy] + [p.sentinel for p, _ in busy])
            for w in list(held):
                proc, conn = procs[w]
                if conn in ready or conn.poll():
                    try:
                        kind, index, payload = conn.recv()
                    except (EOFError, OSError):  # its end of the pipe closed: it died
                        raise died(w) from None
                    if kind == "error":
                        name, message, remote = payload
                        raise _error(describe(items[index]), _WorkerError(name, message), remote)
                    done[index] = payload
                    held[w].popleft()
                    feed(w)
                elif proc.sentinel in ready:
                    raise died(w)
            while next_out in done:
                yield next_out, done.pop(next_out)
                next_out += 1
        while next_out in done:
            yield next_out, done.pop(next_out)
            next_out += 1
    finally:
        _stop(procs)


def _stop(procs: list[tuple[multiprocessing.process.BaseProcess, Connection]]) -> None:
    """End every worker: those still at work are killed (their items are abandoned)."""
    for proc, conn in procs:
        if proc.is_alive():
            with contextlib.suppress(OSError, ValueError):
                conn.send(None)
    for proc, conn in procs:
        proc.join(timeout=0.5)
        if proc.is_alive():
            proc.kill()
            proc.join(timeout=5)
        conn.close()
