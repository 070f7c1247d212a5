"""The catalogue of user errors (docs/cli.md): each prints one line on stderr, saying what is
wrong and how to fix it, no traceback (unless --debug), and exits with its code: 2 for what the
user gave (flags, config, inputs, output, date), 1 for inspect of a path that is not there.
A convert that stops on its config or inputs still ends stdout with the JSON summary line."""

from __future__ import annotations

import contextlib
import io
import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import REPO, SAMPLE_PARQUET

from pipeline.cli.main import main

SAMPLE = str(SAMPLE_PARQUET)


def run(argv: list[str]) -> tuple[int, str, str]:
    """(exit code, stdout, stderr) of `tfrecord-etl ARGV` in this process; argparse's usage
    errors leave by SystemExit."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main([str(a) for a in argv])
        except SystemExit as exit:
            code = exit.code
    return code, out.getvalue(), err.getvalue()


def write(path: Path, text: str) -> str:
    path.write_text(text, encoding="utf-8")
    return str(path)


def with_config(text: str) -> Callable[[Path], list]:
    """convert of the sample with a config file of `text`."""

    def argv(tmp: Path) -> list:
        config = write(tmp / "c.yaml", text)
        return ["convert", "--config", config, "--input", SAMPLE, "--output", tmp / "o"]

    return argv


def complete_output(tmp: Path) -> str:
    out = tmp / "done"
    out.mkdir()
    # a tfrecord-etl manifest (another tool's manifest.json gets its own error)
    write(out / "manifest.json", '{"manifest_version": 1, "splits": {}, "features": []}')
    return str(out)


# (name, argv from a tmp dir, exit code, texts the one line holds, JSON summary line expected)
Case = tuple[str, Callable[[Path], list[str]], int, tuple[str, ...], bool]

CATALOGUE: list[Case] = [
    (
        "unknown command",
        lambda t: ["convrt", "--input", SAMPLE],
        2,
        ("invalid choice: 'convrt'", "see tfrecord-etl --help"),
        False,
    ),
    (
        "unknown flag of convert",
        lambda t: ["convert", "--input", SAMPLE, "--output", t / "o", "--compresion", "none"],
        2,
        (
            "unknown flag --compresion: not a flag of convert nor a Beam pipeline option",
            "did you mean --compression?",
            "see tfrecord-etl convert --help",
        ),
        False,
    ),
    (
        "unknown flag of inspect",
        lambda t: ["inspect", t, "--recods", "3"],
        2,
        ("unknown flag --recods: not a flag of inspect", "did you mean --records?"),
        False,
    ),
    (
        "Beam option with a bad value",
        lambda t: ["convert", "--input", SAMPLE, "--output", t / "o", "--direct_num_workers=x"],
        2,
        ("argument --direct_num_workers: invalid int value: 'x' (a Beam pipeline option)",),
        False,
    ),
    (
        "stray argument",
        lambda t: ["convert", "--input", SAMPLE, "--output", t / "o", "extra"],
        2,
        ("unexpected argument 'extra'",),
        False,
    ),
    (
        "flag of the wrong type",
        lambda t: ["convert", "--input", SAMPLE, "--output", t / "o", "--num-shards", "three"],
        2,
        (
            "argument --num-shards/--num_shards: invalid int value: 'three'",
            "see tfrecord-etl convert --help",
        ),
        False,
    ),
    (
        "flag outside its choices",
        lambda t: ["convert", "--input", SAMPLE, "--output", t / "o", "--compression", "lz4"],
        2,
        ("argument --compression: invalid choice: 'lz4'",),
        False,
    ),
    (
        "unknown config key",
        with_config("num_shard: 3\n"),
        2,
        ("c.yaml: key 'num_shard' is unknown; did you mean 'num_shards'?",),
        True,
    ),
    (
        "config value of the wrong type",
        with_config("num_shards: three\n"),
        2,
        ("c.yaml: key 'num_shards': expected int, got 'three'",),
        True,
    ),
    (
        "bad YAML",
        with_config("splits:\n  train: 8\n eval: 2\n"),
        2,
        ("c.yaml: line 3, column 2: not valid YAML:", "check the indentation and quoting"),
        True,
    ),
    (
        "missing config file",
        lambda t: ["convert", "--config", t / "nope.yaml", "--input", SAMPLE, "--output", t / "o"],
        2,
        ("nope.yaml: cannot read the config", "No such file or directory"),
        True,
    ),
    (
        "unknown step",
        with_config("transforms:\n  - zscor: {}\n"),
        2,
        ("key 'transforms[0]': unknown step 'zscor' (did you mean 'zscore'?",),
        True,
    ),
    (
        "missing input",
        lambda t: ["convert", "--input", t / "nope" / "*.parquet", "--output", t / "o"],
        2,
        ("nope/*.parquet: no file matches this input",),
        True,
    ),
    (
        "no input at all",
        lambda t: ["convert", "--output", t / "o"],
        2,
        ("--input is required (on the command line or as a key in --config)",),
        True,
    ),
    (
        "existing output",
        lambda t: ["convert", "--input", SAMPLE, "--output", complete_output(t)],
        2,
        ("already holds a complete output", "pass --overwrite to replace it"),
        True,
    ),
    (
        "bad --date",
        lambda t: ["convert", "--input", SAMPLE, "--output", t / "{date}", "--date", "2026-13-01"],
        2,
        ("--date '2026-13-01': expected a date as YYYY-MM-DD",),
        True,
    ),
    (
        "dated path without --date",
        lambda t: ["convert", "--input", SAMPLE, "--output", t / "{date}"],
        2,
        ("the path has {date}; pass --date YYYY-MM-DD",),
        True,
    ),
    (
        "verify of a directory without a manifest",
        lambda t: ["verify", t],
        2,
        ("manifest.json: no manifest; the directory is not a complete tfrecord-etl output",),
        True,
    ),
    (
        "inspect of a missing path",
        lambda t: ["inspect", t / "nope.tfrecord"],
        1,
        ("nope.tfrecord: no such file, and no output directory with a manifest",),
        False,
    ),
]


@pytest.mark.parametrize(
    ("argv", "code", "texts", "summary"),
    [case[1:] for case in CATALOGUE],
    ids=[case[0] for case in CATALOGUE],
)
def test_each_user_error_is_one_line(tmp_path, argv, code, texts, summary):
    got, out, err = run(argv(tmp_path))
    assert got == code, err
    lines = err.splitlines()
    assert len(lines) == 1, err  # one short message, no traceback, no usage text
    assert lines[0].startswith("tfrecord-etl: error: "), err
    for text in texts:
        assert text in lines[0]
    if summary:
        line = json.loads(out.splitlines()[-1])
        assert line["status"] == "invalid" and line["exit_code"] == code
        assert line["error"] == lines[0].removeprefix("tfrecord-etl: error: ")
    else:
        assert out == ""
    assert not (tmp_path / "o").exists()


def test_debug_shows_the_traceback(tmp_path):
    config = write(tmp_path / "c.yaml", "num_shard: 3\n")
    argv = ["convert", "--config", config, "--input", SAMPLE, "--output", tmp_path / "o"]
    code, _, err = run([*argv, "--debug"])
    assert code == 2
    assert "Traceback (most recent call last)" in err and "ConfigError" in err
    assert err.splitlines()[-1].startswith("tfrecord-etl: error: ")


def test_a_failed_job_is_one_line_on_the_console(tmp_path):
    """The whole process, a job that fails on its bad rows: Beam logs the step's traceback, the
    command prints only its one line (and the summary line, status failed)."""
    source = write(tmp_path / "bad.csv", "id,x\n1,2.5\n2,abc\n3,4\n")
    config = write(tmp_path / "c.yaml", "csv: {column_types: {x: double}}\n")
    argv = ["convert", "--input", source, "--config", config, "--output", str(tmp_path / "o")]
    env = dict(os.environ, PYTHONPATH=str(REPO))
    proc = subprocess.run(
        [sys.executable, "-m", "pipeline", *argv],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 1
    # The progress line says what was written before the failure; the error is one line.
    (line,) = [x for x in proc.stderr.splitlines() if not x.startswith("tfrecord-etl: progress:")]
    assert line.startswith("tfrecord-etl: error: the job failed: 1 bad row(s) of 3"), line
    assert "row 1: column 'x': cannot convert 'abc' to double" in line
    summary = json.loads(proc.stdout.splitlines()[-1])
    assert summary["status"] == "failed" and summary["exit_code"] == 1
    assert not (tmp_path / "o" / "manifest.json").exists()
