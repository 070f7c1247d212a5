"""Worker processes for the in-process engine: a function over a list of work items, run on N
processes of this machine, the results handed back in the items' order.

    for index, result in run_items(convert_unit, units, workers=4, describe=str): ...

With one worker the items run here, one after another. With N, `run_items` forks N - 1
processes (the `fork` start method: a worker starts with everything this process holds, the
plan, the compiled kernel, the fitted analyzers, so nothing is pickled on the way in and a
worker costs milliseconds, not an interpreter's start-up) and this process is the N-th: N
workers are N processes on N cores. A thread of this process hands each forked worker the
next item index over its pipe as soon as it sends back a result (pickled), while this process
works on items too. The largest items go first (`sizes`), so the last item to finish is a
small one.
Results are yielded in item order whatever order they finish in, so what the caller merges,
and so the output, does not depend on the number of workers.

Faults, each a one-line error naming the work item (`WorkItemError`), after every worker is
stopped:
- a worker raises: its exception's message (and, with `--debug`, its traceback, as the cause);
- a worker dies (killed, out of memory): the signal or exit code and the item it held;
- Ctrl-C: the workers ignore SIGINT (the terminal sends it to the whole process group), this
  process stops them and lets the KeyboardInterrupt through (a job started with SIGINT
  ignored, as `nohup` or a shell's background job starts it, keeps ignoring it).
"""

from __future__ import annotations

import _thread
import collections
import contextlib
import multiprocessing
import signal
import threading
import traceback
from collections.abc import Callable, Iterator, Sequence
from multiprocessing.connection import Connection, wait
from typing import Any, TypeVar

__all__ = ["UserWorkItemError", "WorkItemError", "run_items", "work_item_error"]

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


def work_item_error(item: str, err: BaseException, remote: str | None = None) -> WorkItemError:
    """The error for `err` raised on `item`, naming the item unless its message does (or it
    names one already: a WorkItemError is kept as it is)."""
    if isinstance(err, WorkItemError) and remote is None:
        return err
    message = str(err) or type(err).__name__
    named = isinstance(err, WorkItemError) or getattr(err, "named", False)
    text = message if named or (item and item in message) else f"{item}: {message}"
    user = isinstance(err, ValueError | OSError) or getattr(err, "user", False)
    made = (UserWorkItemError if user else WorkItemError)(text)
    made.__cause__ = _RemoteTracebackError(remote) if remote else err
    return made


def _serve(
    conn: Connection, fn: Callable[[Any], Any], items: Sequence[Any], others: list[Connection]
) -> None:
    """A worker: run fn(items[i]) for each index received; None ends it. `others`: the
    launcher's ends of this worker's pipe and of the workers forked before it, which this one
    holds from the fork and closes: held open here, a launcher that dies (killed, or crashed)
    would leave its workers waiting on pipes it can no longer close, for ever; closed, a
    worker's next read or write of its pipe fails and it ends."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the launcher's to handle
    for other in others:
        other.close()
    while True:
        try:
            index = conn.recv()
        except (EOFError, OSError):  # the launcher is gone
            return
        if index is None:
            return
        try:
            result = fn(items[index])
        except BaseException as err:  # sent back as text: the launcher names the item
            facts = (
                type(err).__name__,
                str(err),
                traceback.format_exc(),
                isinstance(err, WorkItemError),  # it names its work item already
                isinstance(err, ValueError | OSError),  # the user's input, not a fault
            )
            with contextlib.suppress(Exception):
                conn.send(("error", index, facts))
            return
        try:
            conn.send(("done", index, result))
        except OSError:  # the launcher is gone
            return


def _died(process: multiprocessing.process.BaseProcess) -> str:
    code = process.exitcode
    if code is not None and code < 0:
        with contextlib.suppress(ValueError):
            return f"was killed by {signal.Signals(-code).name}"
    return f"exited with code {code}"


class _WorkerError(Exception):
    """A worker's error, rebuilt from its text (its class may not pickle)."""

    def __init__(self, name: str, message: str, named: bool, user: bool) -> None:
        super().__init__(message)
        self.name, self.named, self.user = name, named, user


_DEFER_IN = ("numba", "llvmlite")  # packages in whose Python code Ctrl-C is not raised
DEFER_SECONDS = 0.05  # a deferred Ctrl-C is delivered again this often


def _deferring(frame: Any) -> bool:
    """Whether the code running in `frame`, or one that called it, is numba's or llvmlite's."""
    while frame is not None:
        name = frame.f_globals.get("__name__", "")
        if name.split(".", 1)[0] in _DEFER_IN:
            return True
        frame = frame.f_back
    return False


class _Interrupts:
    """Whether Ctrl-C came while the items ran. The KeyboardInterrupt it raises can be lost: in
    compiled code it comes out as another error (numba: "returned a result with an exception
    set"), and in a finalizer (`__del__`, numba's compiler runs some) Python prints it and goes
    on. With this, it is still reported as the interrupt it is: `check()` raises it again at
    the next item boundary.

    It is not raised at all while numba or llvmlite code runs (`_deferring`): numba loads a
    function from its cache through a callback that LLVM makes into Python, and a
    KeyboardInterrupt raised there is dropped by ctypes and leaves LLVM with no object code:
    the process crashed (a segmentation fault), and its workers were left running. The
    interrupt is delivered again every DEFER_SECONDS (`_thread.interrupt_main`) until it
    comes outside that code."""

    def __init__(self) -> None:
        self.seen = False
        self.raised = False
        self._previous: Any = None

    def _handler(self, signum: int, frame: Any) -> None:
        self.seen = True
        if _deferring(frame):
            again = threading.Timer(DEFER_SECONDS, self._again)
            again.daemon = True
            again.start()
            return
        self.raised = True
        raise KeyboardInterrupt

    def _again(self) -> None:
        """The deferred Ctrl-C delivered again, unless it was raised since or the run is over."""
        if self._previous is not None and not self.raised:
            _thread.interrupt_main(signal.SIGINT)

    def check(self) -> None:
        """Raise the KeyboardInterrupt of a Ctrl-C that came and was lost on its way."""
        if self.seen:
            self.raised = True
            raise KeyboardInterrupt

    def __enter__(self) -> _Interrupts:
        # only where Ctrl-C interrupts at all: a job started with SIGINT ignored (nohup, a
        # shell's background job) keeps it ignored
        main = threading.current_thread() is threading.main_thread()
        if main and signal.getsignal(signal.SIGINT) is not signal.SIG_IGN:
            self._previous = signal.signal(signal.SIGINT, self._handler)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._previous is not None:
            previous, self._previous = self._previous, None
            signal.signal(signal.SIGINT, previous)


def _here(
    fn: Callable[[T], R], item: T, describe: Callable[[T], str], interrupts: _Interrupts
) -> R:
    """fn(item) in this process, a failure named by its work item."""
    try:
        result = fn(item)
    except KeyboardInterrupt:
        raise
    except Exception as err:
        # Ctrl-C, surfaced by compiled code as another error (maybe already named by its
        # work item: a read task names the item of its own that failed)
        if interrupts.seen:
            raise KeyboardInterrupt from err
        raise work_item_error(describe(item), err) from err
    interrupts.check()  # Ctrl-C, lost in a finalizer while the item ran
    return result


def run_items(
    fn: Callable[[T], R],
    items: Sequence[T],
    workers: int,
    describe: Callable[[T], str] = str,
    sizes: Sequence[float] | None = None,
) -> Iterator[tuple[int, R]]:
    """(index, fn(items[index])) for every item, in index order, on `workers` processes: this
    one and `workers - 1` forked ones (1: this one alone). `describe` names an item in an
    error; `sizes` (optional) orders the work, largest first."""
    with _Interrupts() as interrupts:  # for the whole run: the caller's work between items too
        if workers <= 1 or len(items) <= 1:
            for index, item in enumerate(items):
                result = _here(fn, item, describe, interrupts)
                yield index, result
                interrupts.check()
            return
        order = list(range(len(items)))
        if sizes is not None:
            order.sort(key=lambda i: -sizes[i])  # largest first: the tail is a small item
        yield from _run_pool(fn, items, min(workers, len(items)), describe, order, interrupts)


class _Dispatch(threading.Thread):
    """The launcher's thread that keeps the forked workers fed: it hands each the next item as
    soon as it sends a result, while the launcher's own thread works on an item of its own or
    on what the caller does with a result."""

    def __init__(
        self,
        procs: list[tuple[multiprocessing.process.BaseProcess, Connection]],
        items: Sequence[Any],
        pending: collections.deque[int],
        describe: Callable[[Any], str],
    ) -> None:
        super().__init__(daemon=True, name="tfrecord-etl workers")
        self.procs, self.items, self.pending, self.describe = procs, items, pending, describe
        self.changed = threading.Condition()  # guards pending, held, done, failure
        self.held: dict[int, int] = {}  # forked worker -> the item it works on
        self.done: dict[int, Any] = {}
        self.failure: BaseException | None = None
        self._stopping = False

    def take(self) -> int | None:
        """The next item for the launcher's own thread (None: none left)."""
        with self.changed:
            return self.pending.popleft() if self.pending else None

    def feed(self, w: int) -> None:
        """Hand worker `w` its next item, or tell it to stop (with `changed` held)."""
        conn = self.procs[w][1]
        if self.pending:
            index = self.pending.popleft()
            self.held[w] = index
            try:
                conn.send(index)
            except OSError:  # its end of the pipe closed: it died
                raise self.died(w) from None
        else:
            self.held.pop(w, None)
            with contextlib.suppress(OSError):
                conn.send(None)

    def died(self, w: int) -> WorkItemError:
        proc = self.procs[w][0]
        proc.join(timeout=5)
        return WorkItemError(
            f"a worker process (pid {proc.pid}) {_died(proc)} while it worked on "
            f"{self.describe(self.items[self.held[w]])}"
        )

    def run(self) -> None:
        try:
            with self.changed:
                for w in range(len(self.procs)):
                    self.feed(w)
            while not self._stopping:
                with self.changed:
                    busy = [w for w in self.held]
                if not busy:
                    return
                conns = [self.procs[w][1] for w in busy]
                sentinels = [self.procs[w][0].sentinel for w in busy]
                ready = wait(conns + sentinels, timeout=0.2)
                for w in busy:
                    proc, conn = self.procs[w]
                    if conn in ready or conn.poll():
                        try:
                            kind, index, payload = conn.recv()
                        except (EOFError, OSError):  # its end of the pipe closed: it died
                            raise self.died(w) from None
                        if kind == "error":
                            name, message, remote, named, user = payload
                            failed = _WorkerError(name, message, named, user)
                            raise work_item_error(self.describe(self.items[index]), failed, remote)
                        with self.changed:
                            self.done[index] = payload
                            self.feed(w)
                            self.changed.notify_all()
                    elif proc.sentinel in ready:
                        raise self.died(w)
        except BaseException as err:
            with self.changed:
                self.failure = err
                self.changed.notify_all()

    def stop(self) -> None:
        self._stopping = True
        self.join(timeout=5)


def _run_pool(
    fn: Callable[[T], R],
    items: Sequence[T],
    workers: int,
    describe: Callable[[T], str],
    order: list[int],
    interrupts: _Interrupts,
) -> Iterator[tuple[int, R]]:
    """`workers - 1` forked processes and this one take the items, so N workers are N
    processes (N cores busy, not N + 1 processes sharing them, and memory for N). A thread of
    this process feeds the forked ones (`_Dispatch`) while this one works on items too."""
    context = multiprocessing.get_context("fork")
    procs: list[tuple[multiprocessing.process.BaseProcess, Connection]] = []
    dispatch: _Dispatch | None = None
    next_out = 0
    try:
        for _ in range(workers - 1):
            ours, theirs = context.Pipe()
            others = [ours, *(c for _, c in procs)]
            proc = context.Process(target=_serve, args=(theirs, fn, items, others), daemon=True)
            proc.start()
            theirs.close()
            procs.append((proc, ours))
        dispatch = _Dispatch(procs, items, collections.deque(order), describe)
        dispatch.start()  # after every fork: no worker is forked while a thread runs
        while next_out < len(items):
            index = dispatch.take()
            if index is not None:  # an item for this process
                result = _here(fn, items[index], describe, interrupts)
                with dispatch.changed:
                    dispatch.done[index] = result
            with dispatch.changed:
                while index is None and next_out not in dispatch.done and dispatch.failure is None:
                    dispatch.changed.wait(timeout=0.5)
                    interrupts.check()
                if dispatch.failure is not None:
                    interrupts.check()  # a worker's fault after Ctrl-C: the interrupt it is
                    raise dispatch.failure
                ready = []
                while next_out in dispatch.done:
                    ready.append((next_out, dispatch.done.pop(next_out)))
                    next_out += 1
            yield from ready
            interrupts.check()
    finally:
        if dispatch is not None:
            dispatch.stop()
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
