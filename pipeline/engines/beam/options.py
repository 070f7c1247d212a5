"""The flags `convert` and `plan` hand to Beam: Beam's options made from them (`beam_options`:
the default runner, the project's DaskRunner for `--runner=DaskRunner`), and which of them no
Beam pipeline option takes (`unknown_beam_args`).

Beam itself only logs a warning for a flag it does not know and drops it, so a mistyped flag
(`--num-shrads 3`, `--runer DataflowRunner`) would run the job without it. The command line
stops on such a flag before anything is read or written: this module finds them the way Beam
parses its options (every `PipelineOptions` class registers its flags; a runner's own options
class is registered once its module is imported, as Beam does when it makes the runner).
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from typing import TYPE_CHECKING, NoReturn

if TYPE_CHECKING:
    from apache_beam.options.pipeline_options import PipelineOptions

__all__ = ["DASK_RUNNER", "DEFAULT_RUNNER", "beam_options", "unknown_beam_args"]

# Beam's DirectRunner (2.68+) first downloads a Prism binary from the network. FnApiRunner is
# Beam's in-process portable runner: same semantics, nothing fetched.
DEFAULT_RUNNER = "FnApiRunner"
DASK_RUNNER = "pipeline.engines.beam.dask_runner.DaskRunner"

# Beam's own DaskRunner leaves gaps the job falls into (pipeline/engines/beam/dask_runner.py
# closes them): the short names select the project's runner.
_RUNNER_ALIASES = {"daskrunner": DASK_RUNNER, "dask": DASK_RUNNER}

# Runners whose options class is defined with the runner, not in Beam's pipeline_options.
_RUNNER_MODULES = {
    "daskrunner": "apache_beam.runners.dask.dask_runner",
    "dask": "apache_beam.runners.dask.dask_runner",
}


def _runner(args: list[str]) -> str:
    """The runner `args` name (`--runner X` or `--runner=X`; the last one wins), or ""."""
    name = ""
    for i, arg in enumerate(args):
        if arg.startswith("--runner="):
            name = arg.split("=", 1)[1]
        elif arg == "--runner" and i + 1 < len(args):
            name = args[i + 1]
    return name


def _import_runner(args: list[str]) -> None:
    """Import the module of the runner `args` name, so that its options class is known."""
    runner = _runner(args)
    module = _RUNNER_MODULES.get(runner.lower())
    if module is None and "." in runner:
        module = runner.rsplit(".", 1)[0]
    if module is not None:
        try:
            importlib.import_module(module)
        except ImportError:
            return  # Beam names the runner it cannot make when the job starts


def unknown_beam_args(args: Sequence[str]) -> list[str]:
    """The arguments among `args` that no Beam pipeline option (of Beam, or of the named
    runner) takes, in their order; [] when every one is an option. ValueError for an option
    whose value Beam refuses (`--direct_num_workers=x`): argparse's message."""
    args = list(args)
    if not args:
        return []
    from apache_beam.options.pipeline_options import PipelineOptions, _BeamArgumentParser

    class Parser(_BeamArgumentParser):
        def error(self, message: str) -> NoReturn:  # argparse would print Beam's usage, exit
            raise ValueError(message)

    _import_runner(args)
    parser = Parser(allow_abbrev=False)
    # What PipelineOptions.get_all_options does: each options class adds its flags (a class
    # defined twice counts once, its first definition, as there).
    classes: dict[str, type] = {}
    for cls in PipelineOptions.__subclasses__():
        classes.setdefault(str(cls), cls)
    for cls in classes.values():
        cls._add_argparse_args(parser)
    _, unknown = parser.parse_known_args(args)
    return unknown


def beam_options(args: Sequence[str]) -> PipelineOptions:
    """Beam's options from the flags `convert` does not know; the default runner when none is
    named, and the project's DaskRunner for `--runner=DaskRunner` (or `dask`)."""
    from apache_beam.options.pipeline_options import PipelineOptions

    args = list(args)
    if not any(a == "--runner" or a.startswith("--runner=") for a in args):
        args.append(f"--runner={DEFAULT_RUNNER}")
    for i, arg in enumerate(args):
        if arg.startswith("--runner="):
            name = arg.split("=", 1)[1]
            args[i] = f"--runner={_RUNNER_ALIASES.get(name.lower(), name)}"
        elif arg == "--runner" and i + 1 < len(args):
            args[i + 1] = _RUNNER_ALIASES.get(args[i + 1].lower(), args[i + 1])
    return PipelineOptions(args)
