"""Every option of a conversion job, declared once: the `convert` flags and the config keys.

An `Option` is a key of the YAML config (underscores) and, unless `flag=False`, the command-line
flag of the same name (`--num-shards`, also spelled `--num_shards` as templates pass it). The
argument parser (pipeline/cli/main.py) and the config's checks (pipeline/job/config.py) both
derive from `OPTIONS`; the config's structured keys (csv, columns, splits, transforms) have
parsers there.
"""

from __future__ import annotations

import argparse
import dataclasses
from typing import Any

from transforms.names import FORMATS, LAYOUTS, SCHEMA_MODES, SINKS
from transforms.write.compression import COMPRESSIONS, GZIP_BACKENDS

__all__ = ["FORMATS", "OPTIONS", "Option", "add_flags", "scalar_options", "true_or_false"]


def true_or_false(text: str) -> bool:
    """A boolean flag's value: true or false (any case)."""
    value = {"true": True, "false": False}.get(text.lower())
    if value is None:
        raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")
    return value


LOG_FORMATS = ("text", "json")  # --log-format (pipeline/cli/joblog.py)
# Forms of the flags of the command only, not keys of the config: they say how a run is watched,
# not what it writes, and never reach the config or the manifest.
COMMAND_FORMS = ("command", "negatable")
__all__ += ["COMMAND_FORMS", "LOG_FORMATS", "config_flags"]


@dataclasses.dataclass(frozen=True)
class Option:
    """One option: its config key, the YAML types it takes, its flag's form and help.

    `form`: "scalar" (one value of `types[0]`), "bool" (`--x`, `--x=true|false`), "paths"
    (one or more values; the config takes a path or a list) or "switch" (a bool flag, the config
    also takes a list of split names: `shuffle`). Options of form "paths" and "switch" have
    their own config parser (pipeline/job/config.py). Flags of the command only (COMMAND_FORMS):
    "command" (as "bool" for types (bool,), else one value, of `choices` if given) and
    "negatable" (`--x` and `--no-x`). `recorded=False`: the manifest's `config` section leaves
    it out (it acts on how the job runs, or after it, on nothing the records hold: `report`,
    `engine`, `workers`).
    """

    key: str
    types: tuple[type, ...]
    help: str
    form: str = "scalar"
    choices: tuple[str, ...] | None = None
    flag: bool = True
    metavar: str | None = None
    recorded: bool = True  # False: not in the manifest's config (acts after the job, not on it)

    @property
    def flags(self) -> list[str]:
        dashed = "--" + self.key.replace("_", "-")
        return [dashed] if "_" not in self.key else [dashed, "--" + self.key]


# What runs a convert job (pipeline/engines/choose.py).
ENGINES = ("auto", "beam", "in-process")

OPTIONS: tuple[Option, ...] = (
    Option(
        "input",
        (str, list),
        "paths or globs (local, gs://, s3://, azfs://, any Beam filesystem)",
        "paths",
    ),
    Option("output", (str,), "output directory"),
    Option("format", (str,), "default: from the file names", choices=FORMATS),
    Option(
        "schema",
        (str,),
        "strict (default): every input file has the same schema; unify: the union of the "
        "files' schemas, types widened, a column a file lacks null there",
        choices=SCHEMA_MODES,
    ),
    Option("num_shards", (int,), "files per split; default 0: as many as --shard-mb gives"),
    Option("shard_mb", (float, int), "target shard size in MiB, default 128"),
    Option(
        "shuffle",
        (bool, list),
        "write every split in a seeded global shuffle (in the config: also a list of splits)",
        "switch",
    ),
    Option("shuffle_seed", (int,), "the shuffle's seed, default 0"),
    Option("fit_split", (str,), "the split analyzers are fitted on", flag=False),
    Option("compression", (str,), "default gzip", choices=COMPRESSIONS),
    Option("compression_level", (int,), "gzip level (isal 0-3, default 2; zlib 0-9, default 6)"),
    Option("gzip_backend", (str,), "default isal (ISA-L)", choices=GZIP_BACKENDS),
    Option("sink", (str,), "default blocks", choices=SINKS),
    Option("batch_rows", (int,), "rows per Arrow batch, default 32768"),
    Option(
        "overwrite",
        (bool,),
        "replace a complete output (also --overwrite=true|false, as templates pass it)",
        "bool",
    ),
    Option(
        "transform_artifacts",
        (str,),
        "apply the fitted analyzers of a previous output (its dir or its transform/)",
    ),
    Option(
        "max_bad_rows",
        (int,),
        "bad rows (to <output>/_errors/) allowed before the job fails; default 0",
    ),
    Option(
        "max_bad_fraction",
        (float, int),
        "or the fraction of the rows read that may be bad; default 0",
    ),
    Option(
        "quiet",
        (bool,),
        "no progress lines and no notes on stderr: only the summary (and errors)",
        "command",
    ),
    Option(
        "log_format",
        (str,),
        "stderr lines as text (default) or json: one JSON object per line, for schedulers",
        "command",
        choices=LOG_FORMATS,
    ),
    Option(
        "wait",
        (bool,),
        "follow a job that runs elsewhere (Dataflow) until it ends (default); --no-wait: "
        "return once it is submitted",
        "negatable",
    ),
    Option("split_key", (str,), "the column whose value picks the split", flag=False),
    Option("split_salt", (str,), "salt of the split hash", flag=False),
    Option(
        "expect_schema",
        (str,),
        "a previous manifest (or output dir): fail before writing if a column disappeared "
        "or changed type",
    ),
    Option(
        "layout",
        (str,),
        "default flat; tfds: uncompressed, with TFDS's dataset_info.json and features.json; "
        "tfx: Split-<split>/data_tfrecord-*.gz and examples_artifact.json (docs/downstream.md)",
        choices=LAYOUTS,
    ),
    Option(
        "stats",
        (bool,),
        "feature statistics per split (statistics/<split>/FeatureStats.pb), computed as the "
        "job encodes; default true, --stats=false turns them off",
        "bool",
    ),
    Option(
        "index",
        (bool,),
        "an index file beside each shard (<shard>.idx: where each record lies), for random "
        "access by record number; gzip is then written in members of about 32 KiB",
        "bool",
    ),
    Option(
        "report",
        (bool,),
        "after the run, write <output>/report.html from the manifest and the statistics "
        "(also tfrecord-etl report OUTPUT)",
        "bool",
        recorded=False,
    ),
    Option(
        "engine",
        (str,),
        "what runs the job: beam, in-process (here, without Beam: local files, no "
        "--num-shards/--shuffle), or auto (default: in-process when it can and no Beam option "
        "is given)",
        choices=ENGINES,
        recorded=False,
    ),
    Option(
        "workers",
        (int,),
        "worker processes of the in-process engine (default 0: every core this process may "
        "use); the output is the same for any number",
        recorded=False,
    ),
)


def scalar_options() -> dict[str, Option]:
    """The options whose config value is one checked scalar (not "paths" or "switch")."""
    return {o.key: o for o in OPTIONS if o.form in ("scalar", "bool")}


def config_flags(args: argparse.Namespace) -> dict[str, Any]:
    """The parsed flags that are config keys (config key -> value, None when not given)."""
    return {o.key: getattr(args, o.key) for o in OPTIONS if o.flag and o.form not in COMMAND_FORMS}


def add_flags(parser: argparse.ArgumentParser) -> None:
    """Add a flag for each option that has one, each with `dest` = its config key."""
    for option in OPTIONS:
        if not option.flag:
            continue
        kwargs: dict[str, Any] = {"dest": option.key, "help": option.help}
        if option.form == "paths":
            kwargs["nargs"] = "+"
        elif option.form == "negatable":
            kwargs["action"] = argparse.BooleanOptionalAction
        elif option.form in ("bool", "switch") or option.types == (bool,):
            kwargs.update(nargs="?", const=True, type=true_or_false)
        elif option.choices is not None:
            kwargs["choices"] = option.choices
        else:
            kwargs["type"] = option.types[0]
        parser.add_argument(*option.flags, **kwargs)
