"""What the command line's own process sets once, before its command runs.

Imports with the garbage collector paused (`import_paused`). Python's cyclic collector runs
every 700 new container objects; importing a command's modules (numba's typing registries,
pyarrow, the job's dataclasses) makes hundreds of thousands of them, nearly all kept for the
life of the process, so the collections during the imports walk a growing heap and find
almost nothing: 280 collections, about 0.17 s of `convert`'s 1.1-1.3 s of imports on a 2-core
machine, for about a thousand unreachable objects. The imported objects are then frozen
(`gc.freeze`): later collections skip them, and a forked worker's collections do not write to
the pages it shares with the launcher.

pyarrow without pandas (`pyarrow_without_pandas`). pyarrow imports pandas, when it is installed,
the first time it builds an array from Python or NumPy values (the Cython layer, `pa.array`) and
the first time it converts one to NumPy (the C++ layer, `to_numpy`), only to know whether its
inputs are pandas objects (apache/arrow#34994). Each layer tries once and keeps the answer. A
job never hands pyarrow a pandas object, and importing pandas took 0.3-0.5 s of a local job's
serial start-up (about 1.5 s in all on a 2-core machine, `bench/startup.py`), paid before the
workers start: so the command's process makes both first conversions with pandas hidden. Nothing
else changes: an explicit `import pandas` afterwards works, and so does `to_pandas()`.

One BLAS thread (`one_blas_thread`). numpy's OpenBLAS starts a thread per core when numpy is
imported, and those threads spin for a while waiting for work that a job never gives them (no
step calls a matrix routine): about 0.11 s of a second core's time per process on a 2-core
machine (`convert` of the bundled sample: 0.66 s of CPU with them, 0.53 s without, medians of 7
runs of bench/startup.py). On one core it
slows the import; with workers on every core it takes time from the other worker. So the
command's process asks OpenBLAS for one thread before numpy loads, unless the environment
already says how many (`OPENBLAS_NUM_THREADS`); its child processes inherit the setting.
"""

from __future__ import annotations

import gc
import importlib
import os
import sys
from collections.abc import Iterable
from importlib.abc import MetaPathFinder

# command -> the modules it imports in any case (the engine's own are imported when chosen)
COMMAND_MODULES: dict[str, tuple[str, ...]] = {
    "convert": ("pipeline.cli.convert",),
    "plan": ("pipeline.cli.commands", "pipeline.cli.plan_summary", "pipeline.job.plan"),
    "verify": ("pipeline.cli.commands", "pipeline.verify.run", "pipeline.verify.report"),
    "inspect": ("pipeline.cli.commands", "pipeline.verify.inspect"),
}


BLAS_THREADS = "OPENBLAS_NUM_THREADS"


def one_blas_thread() -> None:
    """Ask numpy's OpenBLAS for a single thread (no spinning threads), unless the environment
    sets `OPENBLAS_NUM_THREADS` or numpy is already loaded (then it is too late: a no-op).
    Only for a process the command line owns (`run()`)."""
    if "numpy" not in sys.modules:
        os.environ.setdefault(BLAS_THREADS, "1")


def import_paused(modules: Iterable[str]) -> None:
    """Import `modules` with the cyclic garbage collector paused, then freeze every object
    the process holds (they stay for its life) and resume the collector. Only for a process
    the command line owns (`run()`); a collector someone else paused stays paused."""
    running = gc.isenabled()
    gc.disable()
    try:
        for name in modules:
            importlib.import_module(name)
    finally:
        if running:
            gc.freeze()
            gc.enable()


class _HidePandas(MetaPathFinder):
    """Answers every `import pandas` (and its submodules) as if pandas were not installed."""

    def find_spec(self, fullname: str, path: object = None, target: object = None) -> None:
        if fullname == "pandas" or fullname.startswith("pandas."):
            raise ModuleNotFoundError(f"No module named {fullname!r}", name=fullname)


def pyarrow_without_pandas() -> None:
    """Let pyarrow's two first conversions find no pandas, so that it never imports it.

    Only for a process the command line owns (`run()`): a program that imports this package
    and hands pyarrow pandas objects keeps pyarrow's usual behaviour. A no-op when pandas is
    already imported.
    """
    if "pandas" in sys.modules:
        return
    import numpy as np
    import pyarrow as pa

    hidden = _HidePandas()
    sys.meta_path.insert(0, hidden)
    try:
        pa.array(np.zeros(1)).to_numpy(zero_copy_only=False)
    finally:
        sys.meta_path.remove(hidden)
