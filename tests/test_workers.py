"""The in-process engine on several worker processes (`--workers N`): the output does not depend
on N (every shard, statistics file and the manifest but for its time and path are byte for byte
those of one worker), grouped writes and sequences run there too, and faults in a worker fail
the job with one line naming the work item, leaving nothing a re-run does not clear."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import pytest
from conftest import REPO, run_cli_captured

import pipeline.engines.inprocess.units as units_module
from pipeline.reader import load_dataset

ROWS = 60_000


def table(rows: int = ROWS, seed: int = 3) -> pa.Table:
    rng = np.random.default_rng(seed)
    ints = rng.integers(-1000, 1000, rows)
    return pa.table(
        {
            "id": np.arange(rows),
            "user": pa.array([f"u{i % 517}" for i in range(rows)]),
            "ts": rng.integers(0, 10**9, rows),
            "x": pa.array(rng.normal(size=rows), mask=rng.random(rows) < 0.1),
            "n": pa.array(ints, mask=ints % 7 == 0),
            "tags": pa.array([[f"t{j}" for j in range(i % 4)] for i in range(rows)]),
            "kind": pa.array([["a", "b", "c", None][i % 4] for i in range(rows)]),
        }
    )


@pytest.fixture(scope="module")
def source(tmp_path_factory) -> Path:
    """Parquet with 15 row groups: several read tasks, each of several work items."""
    path = tmp_path_factory.mktemp("workers") / "t.parquet"
    pq.write_table(table(), path, row_group_size=4_000)
    return path


def files_of(out: Path) -> dict[str, bytes]:
    """Every file of an output, the manifest without its time and output path."""
    found = {}
    for path in sorted(out.rglob("*")):
        if path.is_file():
            data = path.read_bytes()
            if path.name == "manifest.json":
                manifest = json.loads(data)
                manifest.pop("created")
                manifest["config"].pop("output")
                data = json.dumps(manifest, sort_keys=True).encode()
            found[str(path.relative_to(out))] = data
    return found


def convert(source, out, *flags, workers=1, config=None):
    args = ["convert", "--input", source, "--output", out, "--workers", str(workers), *flags]
    if config is not None:
        path = Path(str(out) + ".yaml")
        path.write_text(json.dumps(config), encoding="utf-8")
        args += ["--config", path]
    return run_cli_captured(args)


# The cases: flags and config. A small shard size makes many files per task, so files end inside
# batches (the cut that blocks.py handles) and a task's last small file is folded.
SMALL = ["--shard-mb", "0.05", "--batch-rows", "1500"]
CASES = {
    "gzip": (SMALL, None),
    "none": ([*SMALL, "--compression", "none"], None),
    "zlib": ([*SMALL, "--compression", "zlib"], None),
    "splits": (SMALL, {"splits": {"train": 7, "eval": 2, "test": 1}}),
    "split_key_tfx": (
        [*SMALL, "--layout", "tfx"],
        {"splits": {"a": 1, "b": 1}, "split_key": "user"},
    ),
    "num_shards": (["--num-shards", "3", "--batch-rows", "1500"], None),
    "shuffle": (["--shuffle", "--batch-rows", "1500"], {"splits": {"train": 3, "eval": 1}}),
    "shuffle_one_split": (
        ["--batch-rows", "1500", *SMALL[:2]],
        {"splits": {"train": 3, "eval": 1}, "shuffle": ["train"]},
    ),
    "preprocess": (
        SMALL,
        {
            "splits": {"train": 4, "eval": 1},
            "transforms": [
                {"zscore": {"column": "x", "output": "x_z"}},
                {"vocabulary": {"column": "user", "output": "user_id", "top_k": 50}},
                {"bucketize": {"column": "ts", "output": "ts_bucket", "num_buckets": 4}},
                {"filter": {"expr": "n > -900 or is_null(n)"}},
            ],
        },
    ),
    "sequence": (
        ["--batch-rows", "1500"],
        {"splits": {"train": 4, "eval": 1}, "sequence": {"group_by": "user", "order_by": "ts"}},
    ),
    "sequence_shards": (
        ["--num-shards", "2", "--batch-rows", "1500"],
        {"sequence": {"group_by": "user", "order_by": "ts"}},
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_output_does_not_depend_on_the_workers(source, tmp_path, case):
    flags, config = CASES[case]
    runs = {}
    for workers in (1, 2, 7):
        out = tmp_path / f"w{workers}"
        result = convert(source, out, *flags, workers=workers, config=config)
        assert result.code == 0, result.err
        assert json.loads(result.out.splitlines()[-1])["workers"] == workers
        runs[workers] = files_of(out)
    assert sorted(runs[2]) == sorted(runs[1]) and sorted(runs[7]) == sorted(runs[1])
    for name, data in runs[1].items():
        assert runs[2][name] == data, name
        assert runs[7][name] == data, name
    manifest = json.loads(runs[1]["manifest.json"])
    rows = sum(split["rows"] for split in manifest["splits"].values())
    if case.startswith("sequence"):
        assert manifest["sequence"]["steps"] == ROWS
    elif case != "preprocess":
        assert rows == ROWS


def test_many_files_are_cut_inside_batches(source, tmp_path):
    """The gzip case really cuts files inside batches and folds small last files: the path of
    blocks.py that reads a block back is taken."""
    out = tmp_path / "out"
    assert convert(source, out, *SMALL, workers=2).code == 0
    manifest = json.loads((out / "manifest.json").read_text(encoding="utf-8"))
    shards = manifest["splits"]["train"]["shards"]
    assert len(shards) > 15  # more files than work items
    assert len({s["rows"] for s in shards}) > 2  # rows per file vary: cuts at the file size
    (batch,) = load_dataset(str(out), batch_size=ROWS)
    assert sorted(batch["id"].numpy().tolist()) == list(range(ROWS))


def test_grouped_writes_equal_beams(source, tmp_path):
    """Shuffled and --num-shards shards of the in-process engine on 3 workers are Beam's, byte
    for byte (the statistics are merged in Beam's bundle order there: left out)."""
    for flags in (["--num-shards", "3"], ["--shuffle"]):
        here, beam = tmp_path / "here", tmp_path / "beam"
        assert convert(source, here, *flags, "--overwrite", workers=3).code == 0
        result = run_cli_captured(
            ["convert", "--input", source, "--output", beam, *flags, "--overwrite",
             "--engine", "beam"]
        )  # fmt: skip
        assert result.code == 0, result.err
        ours, theirs = files_of(here), files_of(beam)
        shards = [name for name in ours if name.endswith(".tfrecord.gz")]
        assert shards and all(ours[name] == theirs[name] for name in shards)


@pytest.mark.parametrize("flags", [[], ["--compression", "none"], ["--index"]])
def test_a_shuffled_shard_written_in_slices_is_the_shard_one_worker_writes(
    source, tmp_path, monkeypatch, flags
):
    """On several workers a shuffled shard is written in slices (grouped/slices.py), joined
    after: small slices, blocks and sort groups here make dozens of slices whose blocks cross
    their bounds; the files are those of one worker, which writes each shard whole."""
    from transforms.write.grouped import records, slices, spill

    monkeypatch.setattr(slices, "SLICE_BYTES", 96 << 10)
    monkeypatch.setattr(records, "BLOCK_BYTES", 40 << 10)
    monkeypatch.setattr(spill, "SORT_BYTES", 24 << 10)
    outs = {}
    for workers in (1, 3):
        out = tmp_path / f"w{workers}"
        args = ["--shuffle", "--batch-rows", "1500", *flags]
        result = convert(source, out, *args, workers=workers)
        assert result.code == 0, result.err
        outs[workers] = files_of(out)
    assert outs[1] == outs[3]
    shards = [name for name in outs[1] if ".tfrecord" in name and not name.endswith(".idx")]
    assert len(shards) == 1 and len(outs[1][shards[0]]) > 4 * (96 << 10) // 5
    manifest = json.loads(outs[3]["manifest.json"])
    assert manifest["splits"]["train"]["rows"] == ROWS
    (got,) = load_dataset(str(tmp_path / "w3"), batch_size=ROWS)
    assert sorted(got["id"].numpy().tolist()) == list(range(ROWS))


# ------------------------------------------------------------------ bad rows from every worker


@pytest.fixture(scope="module")
def bad_csvs(tmp_path_factory) -> tuple[list[Path], int]:
    """Four CSV files (four work items), each with bad values: (paths, bad rows in all)."""
    directory = tmp_path_factory.mktemp("bad")
    paths, bad = [], 0
    for f in range(4):
        lines = ["id,amount"]
        for i in range(2_000):
            if i % (97 + f) == 5:
                lines.append(f"{f * 10_000 + i},not-a-number")
                bad += 1
            else:
                lines.append(f"{f * 10_000 + i},{i * 0.5}")
        path = directory / f"part-{f}.csv"
        path.write_text("\n".join(lines) + "\n", encoding="utf-8")
        paths.append(path)
    return paths, bad


def _csv_config(tmp_path: Path, limit: int) -> Path:
    config = tmp_path / f"csv-{limit}.yaml"
    config.write_text(
        json.dumps({"csv": {"column_types": {"amount": "float64"}}, "max_bad_rows": limit}),
        encoding="utf-8",
    )
    return config


def test_bad_rows_of_every_worker_reach_errors_once(bad_csvs, tmp_path):
    paths, bad = bad_csvs
    out = tmp_path / "out"
    pattern = str(paths[0].parent / "part-*.csv")
    args = ["convert", "--input", pattern, "--output", out, "--workers", "3"]
    result = run_cli_captured([*args, "--config", _csv_config(tmp_path, bad)])
    assert result.code == 0, result.err
    lines = [
        json.loads(line)
        for path in sorted((out / "_errors").glob("*.jsonl"))
        for line in path.read_text(encoding="utf-8").splitlines()
    ]
    assert len(lines) == bad
    assert len({(row["source"], row["row"]) for row in lines}) == bad  # each once
    assert {Path(row["source"]).name for row in lines} == {p.name for p in paths}
    summary = json.loads(result.out.splitlines()[-1])
    assert summary["bad"] == bad and summary["rows_out"] == 8_000 - bad
    # the limit applies to the total, not to each worker's share
    result = run_cli_captured([*args, "--overwrite", "--config", _csv_config(tmp_path, bad - 1)])
    assert result.code == 1 and f"{bad} bad row(s) of 8000" in result.err
    assert not (out / "manifest.json").exists()


# ------------------------------------------------------------------ faults


def _boom_on(unit_index: int, how: str):
    """convert_unit raising on one row group, or ("kill") a forked worker killed on its first
    item (the launcher's own process works on items too: it goes on there)."""
    real = units_module.convert_unit
    launcher = os.getpid()

    def convert_unit(job, unit, spill_blocks=True):
        if how == "kill" and os.getpid() != launcher:
            os.kill(os.getpid(), signal.SIGKILL)
        if how == "raise" and unit.item.row_group == unit_index:
            raise RuntimeError("the disk said no")
        return real(job, unit, spill_blocks)

    return convert_unit


@pytest.mark.parametrize("how", ["raise", "kill"])
def test_a_failing_worker_fails_the_job_naming_the_work_item(source, tmp_path, monkeypatch, how):
    out = tmp_path / "out"
    monkeypatch.setattr(units_module, "convert_unit", _boom_on(6, how))
    result = convert(source, out, workers=3)
    assert result.code == 1
    (line,) = [x for x in result.err.splitlines() if x.startswith("tfrecord-etl: error:")]
    if how == "kill":
        assert f"was killed by SIGKILL while it worked on {source} (row group " in line
    else:
        assert f"{source} (row group 6): the disk said no" in line
    assert not (out / "manifest.json").exists() and not (out / "_LEASE").exists()
    assert not list(out.rglob("beam-temp-*"))
    monkeypatch.undo()
    assert convert(source, out, workers=3).code == 0  # a re-run finishes the job


def _children(pid: int) -> set[int]:
    found = set()
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat", "rb") as f:
                    stat = f.read()
            except OSError:
                continue
            if int(stat[stat.rindex(b")") + 2 :].split()[1]) == pid:
                found.add(int(entry))
    return found


# The CLI as a terminal starts it: SIGINT at its default whatever this test process inherited
# (a suite run from a script or in the background has SIGINT ignored, and so would the job).
INTERACTIVE = (
    "import signal, sys; signal.signal(signal.SIGINT, signal.default_int_handler); "
    "sys.argv[0] = 'tfrecord-etl'; from pipeline.cli.main import run; run()"
)


def _state(pid: int) -> str:
    """A process's state letter (R, S, Z: a zombie, ...) or "gone"."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return "gone"
    return stat[stat.rindex(b")") + 2 :].split()[0].decode()


def _start_converting(tmp_path, startup: str) -> tuple[subprocess.Popen, set[int]]:
    """A 1M-row job on 3 workers, started by `startup` in a process group of its own, once its
    workers convert: the job's process and its two forked workers' pids."""
    big = tmp_path / "big.parquet"
    pq.write_table(table(1_000_000), big, row_group_size=10_000)
    out = tmp_path / "out"
    proc = subprocess.Popen(
        [sys.executable, "-c", startup, "convert", "--input", str(big), "--output", str(out),
         "--workers", "3"],
        cwd=REPO, env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONFAULTHANDLER="1"),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
    )  # fmt: skip
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:
        if len(_children(proc.pid)) >= 2 and list(out.glob("beam-temp-*/*")):
            break  # the workers are converting (this process and two forked ones)
        time.sleep(0.01)
    workers = _children(proc.pid)
    assert len(workers) >= 2, proc.communicate(timeout=60)
    return proc, workers


def _start_and_interrupt(tmp_path, startup: str) -> tuple[subprocess.Popen, set[int], str, str]:
    """`_start_converting`, then SIGINT on the job's process group (what the terminal does on
    Ctrl-C); its output streams after."""
    proc, workers = _start_converting(tmp_path, startup)
    os.killpg(proc.pid, signal.SIGINT)
    try:
        stdout, stderr = proc.communicate(timeout=120)
    except subprocess.TimeoutExpired:  # say what was still running, and where (faulthandler)
        alive = {pid: _state(pid) for pid in {proc.pid, *workers}}
        os.killpg(proc.pid, signal.SIGABRT)
        try:
            _, stderr = proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            _, stderr = proc.communicate()
        raise AssertionError(f"no exit 120 s after SIGINT; {alive}\n{stderr[-20000:]}") from None
    return proc, workers, stdout, stderr


def test_ctrl_c_stops_every_worker(tmp_path):
    proc, workers, stdout, stderr = _start_and_interrupt(tmp_path, INTERACTIVE)
    assert proc.returncode == 130, stderr
    assert stderr.strip().splitlines()[-1].startswith("tfrecord-etl: interrupted:")
    assert json.loads(stdout.splitlines()[-1])["status"] == "interrupted"
    assert not any(os.path.exists(f"/proc/{pid}") for pid in workers)


def test_workers_end_when_the_launcher_dies(tmp_path):
    """The launcher killed (or crashed) mid-job: its forked workers do not wait on it for ever
    (each holds no end of the launcher's pipes but its own); they end within seconds."""
    proc, workers = _start_converting(tmp_path, INTERACTIVE)
    try:
        os.kill(proc.pid, signal.SIGKILL)  # the launcher alone, not its process group
        proc.wait(timeout=60)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and any(_state(p) not in ("gone", "Z") for p in workers):
            time.sleep(0.05)
        states = {p: _state(p) for p in workers}
        assert all(state in ("gone", "Z") for state in states.values()), states
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate(timeout=60)


def test_a_ctrl_c_in_numbas_code_is_delivered_after_it():
    """Ctrl-C while numba's or llvmlite's Python code runs (numba loading a function from its
    cache calls back from LLVM into Python, where an exception crashes the process) is not
    raised there; it is raised once that code has returned."""
    from pipeline.engines.inprocess import pool

    space = {"__name__": "numba.core.caching", "os": os, "signal": signal, "time": time}
    exec(  # a function whose frame is numba's, as its module's name says
        "def load():\n"
        "    os.kill(os.getpid(), signal.SIGINT)\n"
        "    end = time.monotonic() + 0.3\n"
        "    while time.monotonic() < end:  # the handler runs here, between bytecodes\n"
        "        pass\n"
        "    return 'loaded'\n",
        space,
    )
    got, interrupted_after = None, False
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)  # as a terminal starts it
    try:
        with pool._Interrupts():
            try:
                got = space["load"]()
                end = time.monotonic() + 5
                while time.monotonic() < end:
                    pass
            except KeyboardInterrupt:
                interrupted_after = True
    finally:
        signal.signal(signal.SIGINT, previous)
    assert got == "loaded" and interrupted_after


def test_a_job_started_with_sigint_ignored_keeps_ignoring_it(tmp_path):
    """nohup, or a shell's background job: SIGINT ignored from the start stays ignored, in the
    launcher's own work items too; the job finishes."""
    startup = INTERACTIVE.replace("signal.default_int_handler", "signal.SIG_IGN")
    proc, _, stdout, stderr = _start_and_interrupt(tmp_path, startup)
    assert proc.returncode == 0, stderr
    summary = json.loads(stdout.splitlines()[-1])
    assert summary["status"] == "succeeded" and summary["rows_out"] == 1_000_000


def test_progress_counts_every_workers_rows(source, tmp_path):
    result = convert(source, tmp_path / "out", "--log-format", "json", workers=3)
    assert result.code == 0
    events = [json.loads(x) for x in result.err.splitlines() if x.startswith("{")]
    last = [e for e in events if e.get("event") == "progress"][-1]
    assert last["rows"] == ROWS and last["done"] is True


def test_csv_work_items_on_workers(tmp_path):
    """CSV: one work item per file, converted on several workers, the same output."""
    for f in range(3):
        pacsv.write_csv(table(5_000, seed=f).select(["id", "user", "ts"]), tmp_path / f"{f}.csv")
    outs = []
    for workers in (1, 3):
        out = tmp_path / f"o{workers}"
        assert convert(str(tmp_path / "*.csv"), out, workers=workers).code == 0
        outs.append(files_of(out))
    assert outs[0] == outs[1]


class _InterruptsInFinalizer:
    """Ctrl-C that arrives while a finalizer runs: Python prints the KeyboardInterrupt
    ("Exception ignored in ...") and goes on, as it did once in numba's compiler."""

    def __del__(self) -> None:
        os.kill(os.getpid(), signal.SIGINT)
        for _ in range(1000):  # the handler runs between bytecodes: here, inside __del__
            pass


def _item_that_loses_a_ctrl_c(item: int) -> int:
    """The launcher's first item past item 0 loses a Ctrl-C. A forked worker's items are slow,
    so that the launcher has such an item even when the worker is scheduled first (with
    instant items a loaded machine once let the worker take items 1 to 5)."""
    if os.getpid() != _LAUNCHER[0]:
        time.sleep(0.2)
    elif item >= 1 and not _FIRED:
        _FIRED.append(item)
        _InterruptsInFinalizer()  # made and dropped: its __del__ runs here
    return item


_LAUNCHER = [0]
_FIRED: list[int] = []


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
@pytest.mark.parametrize("workers", [1, 2])
def test_a_ctrl_c_lost_in_a_finalizer_still_interrupts(workers):
    from pipeline.engines.inprocess.pool import run_items

    _LAUNCHER[0] = os.getpid()
    _FIRED.clear()
    seen = []
    with pytest.raises(KeyboardInterrupt):
        for _index, result in run_items(_item_that_loses_a_ctrl_c, list(range(6)), workers):
            seen.append(result)
    assert (seen == [0]) if workers == 1 else (len(seen) < 6)
    assert len(_FIRED) == 1
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # put back


def _item_whose_ctrl_c_comes_out_named(item: int) -> int:
    """What numba does with a Ctrl-C in compiled code ("returned a result with an exception
    set"), inside a read task that names its failing work item (units.convert_task)."""
    from pipeline.engines.inprocess.pool import work_item_error

    if item == 1 and os.getpid() == _LAUNCHER[0]:
        try:
            os.kill(os.getpid(), signal.SIGINT)
            for _ in range(1000):  # the handler raises KeyboardInterrupt here
                pass
        except KeyboardInterrupt as err:
            failed = SystemError("CPUDispatcher(_count) returned a result with an exception set")
            raise work_item_error("part.parquet (row group 0)", failed) from err
    return item


@pytest.mark.parametrize("workers", [1, 2])
def test_a_ctrl_c_that_comes_out_as_a_named_work_item_error_still_interrupts(workers):
    """A backfill's date once failed with "part.parquet (row group 0): CPUDispatcher(...)
    returned a result with an exception set" after Ctrl-C: the work item's own error came
    back, not the interrupt."""
    from pipeline.engines.inprocess.pool import run_items

    _LAUNCHER[0] = os.getpid()
    with pytest.raises(KeyboardInterrupt):
        for _ in run_items(_item_whose_ctrl_c_comes_out_named, list(range(6)), workers):
            pass
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
