"""The sample's report: `convert --report` (no statistics yet), then the sample's statistics
(tests/report_stats.py) and `tfrecord-etl report`; the page in headless Chromium (Debian's
`chromium`, which .ci/run installs; skipped without it): a screenshot that is not blank, no
error logged, every plot decoded, nothing the page's policy blocked, the rendered page's numbers
equal to the statistics. TFRECORD_ETL_REPORT_SCREENSHOT=PATH keeps the screenshot.
"""

from __future__ import annotations

import html
import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import SAMPLE_PARQUET
from PIL import Image
from report_page import check_numbers
from report_stats import add_statistics


@pytest.fixture(scope="module")
def sample_output(tmp_path_factory: pytest.TempPathFactory, run_cli_captured) -> tuple:
    """The bundled sample converted with --report (the job's own statistics): the output, the
    run's stdout, the page it wrote."""
    out = tmp_path_factory.mktemp("sample") / "sample-output"
    done = run_cli_captured(["convert", "--input", SAMPLE_PARQUET, "--output", out, "--report"])
    assert done.code == 0, done.err
    return out, done.out, (out / "report.html").read_text(encoding="utf-8")


@pytest.fixture(scope="module")
def sample_report(sample_output, run_cli_captured) -> tuple:
    """The sample's statistics added (tests/report_stats.py), then `tfrecord-etl report`."""
    out = sample_output[0]
    stats = add_statistics(out, {"train": pq.read_table(SAMPLE_PARQUET)})
    done = run_cli_captured(["report", out])
    assert done.code == 0, done.err
    assert f"report: {out / 'report.html'}" in done.out and "statistics: train)" in done.out
    return out / "report.html", stats


def test_convert_report(sample_output) -> None:
    out, stdout, page = sample_output
    assert f"report: {out / 'report.html'}" in stdout
    assert json.loads(stdout.strip().splitlines()[-1])["report"] == str(out / "report.html")
    manifest = json.loads((out / "manifest.json").read_text())
    assert "report" not in manifest["config"]  # the output does not depend on --report
    assert "This output has no statistics" not in page
    # the numbers of the statistics the job computed as it encoded
    stats = {"train": out / "statistics" / "train" / "FeatureStats.pb"}
    assert check_numbers(page, stats) > 100
    assert '<td class="n" data-split="train" data-stat="rows" data-value="2000">2,000</td>' in page


def test_report_command_without_an_output(tmp_path: Path, run_cli_captured) -> None:
    done = run_cli_captured(["report", tmp_path / "nothing"])
    assert done.code == 1 and "no manifest" in done.err
    assert not (tmp_path / "nothing").exists()


# ----------------------------------------------------------------------------- in Chromium

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
needs_chromium = pytest.mark.skipif(CHROMIUM is None, reason="needs chromium (.ci/run installs it)")

# Runs before the page's own Content-Security-Policy (a meta policy covers what follows it):
# records errors, blocked fetches and undecoded images into the DOM that --dump-dom prints.
PROBE = """<script>
window.__problems = [];
addEventListener("error", e => __problems.push("error: " + (e.message ||
  (e.target && e.target.outerHTML ? e.target.outerHTML.slice(0, 80) : "?"))), true);
addEventListener("securitypolicyviolation", e =>
  __problems.push("blocked: " + e.violatedDirective + " " + e.blockedURI));
addEventListener("load", () => {
  for (const img of document.images) {
    if (!img.complete || img.naturalWidth === 0) __problems.push("not decoded: " + img.alt);
  }
  document.body.setAttribute("data-probe", JSON.stringify(
    {problems: __problems, images: document.images.length}));
});
</script>"""


def _chromium(*args: str) -> subprocess.CompletedProcess:
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--no-first-run"]
    return subprocess.run(
        [CHROMIUM, *flags, "--enable-logging=stderr", "--v=0", *args],
        capture_output=True,
        text=True,
        timeout=120,
    )


def _console_errors(stderr: str) -> list[str]:
    """Lines where the page logged to the console (Chromium's CONSOLE lines) or threw."""
    return [line for line in stderr.splitlines() if "CONSOLE" in line or "Uncaught" in line]


@needs_chromium
def test_screenshot_is_not_blank_and_nothing_is_logged(sample_report, tmp_path: Path) -> None:
    report, _ = sample_report
    shot = tmp_path / "report.png"
    done = _chromium("--window-size=1200,1500", f"--screenshot={shot}", report.as_uri())
    assert shot.exists(), done.stderr[-3000:]
    assert _console_errors(done.stderr) == []
    pixels = np.asarray(Image.open(shot).convert("RGB"), dtype=np.int16)
    assert pixels.shape[:2] == (1500, 1200)
    assert pixels.std() > 10  # not one colour
    colours = np.unique(pixels.reshape(-1, 3), axis=0)
    assert len(colours) > 50  # text, tables and plots, not a flat page
    keep = os.environ.get("TFRECORD_ETL_REPORT_SCREENSHOT")
    if keep:  # docs/report.png is made so
        Image.open(shot).convert("RGB").quantize(colors=64).save(keep, optimize=True)


@needs_chromium
def test_rendered_page_has_the_statistics_and_no_error(sample_report, tmp_path: Path) -> None:
    report, stats = sample_report
    page = report.read_text(encoding="utf-8")
    probe = tmp_path / "probe.html"
    probe.write_text(page.replace("<head>", "<head>" + PROBE, 1), encoding="utf-8")
    done = _chromium("--virtual-time-budget=10000", "--dump-dom", probe.as_uri())
    assert done.returncode == 0, done.stderr[-3000:]
    assert _console_errors(done.stderr) == []
    found = re.search(r'<body[^>]*data-probe="([^"]*)"', done.stdout)
    assert found, done.stdout[:2000]
    result = json.loads(html.unescape(found.group(1)))
    features = json.loads((report.parent / "manifest.json").read_text())["features"]
    assert result == {"problems": [], "images": len(features)}
    assert check_numbers(done.stdout, stats) > 10 * len(features)


def test_convert_report_that_fails_exits_1_with_the_output_complete(
    tmp_path: Path, run_cli_captured, monkeypatch: pytest.MonkeyPatch
) -> None:
    source = tmp_path / "in.parquet"
    pq.write_table(pa.table({"x": [1, 2, 3]}), source)

    def fails(output: str) -> None:
        raise OSError(f"{output}/report.html: no space left")

    monkeypatch.setattr("pipeline.report.write.write_report", fails)
    done = run_cli_captured(["convert", "--input", source, "--output", tmp_path / "o", "--report"])
    assert done.code == 1
    assert "the output is complete, its report failed" in done.err and "no space left" in done.err
    summary = json.loads(done.out.strip().splitlines()[-1])
    assert summary["status"] == "failed" and summary["error"].startswith("report: ")
    assert (tmp_path / "o" / "manifest.json").exists()
