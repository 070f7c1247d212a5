"""The report's plots: one small matplotlib figure per feature, as compact SVG.

A feature's figure has up to three panels, each with every split overlaid in its own colour:
the distribution (a histogram of the numbers, or the top values of strings), the list lengths
(values per row, for lists and arrays) and the null rate. A quantiles histogram (equal counts,
TFDV's form for list lengths) is drawn as the cumulative share it gives exactly; an equal-width
one as bars of each bucket's share of the split's values.

Matplotlib's object API only (no pyplot: no global figure state), the Agg-free SVG backend, text
left as SVG text (`svg.fonttype: none`, a few hundred bytes per label instead of glyph paths),
no date or creator in the file, ids from a fixed salt: the same statistics give the same bytes;
then compacted (`_compact`: geometry to 0.1 pt, whitespace out), about 5-10 KB a figure.
User strings (values, split names) reach matplotlib as plain text (`text.parse_math` off, so a
`$` is not mathtext), cut to a short label, control characters replaced.
"""

from __future__ import annotations

import io
import itertools
import re
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence

import matplotlib
from matplotlib.axes import Axes
from matplotlib.backends.backend_svg import FigureCanvasSVG
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from pipeline.report.stats import Bucket, FeatureSummary

__all__ = ["COLORS", "feature_svg", "label"]

Panel = Callable[[Axes, Mapping[str, FeatureSummary]], None]

COLORS = ("#4c78a8", "#f58518", "#54a24b", "#e45756", "#72b7b2", "#b279a2", "#9d755d")
TOP_SHOWN = 10  # top values drawn per feature
_LABEL_CHARS = 22
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\ud800-\udfff\ufffe\uffff]")
_PANEL = (2.35, 1.6)  # inches per panel
_WIDTHS = {"_distribution": 2.5, "_top_values": 3.2, "_lengths": 2.3, "_nulls": 1.5}
_MARGINS = {"_distribution": 0.45, "_top_values": 1.2, "_lengths": 0.4, "_nulls": 0.05}
_RC = {
    "svg.fonttype": "none",
    "svg.hashsalt": "tfrecord-etl-report",
    "text.parse_math": False,
    "text.usetex": False,
    "font.family": "sans-serif",
    "font.sans-serif": ["DejaVu Sans"],  # one name in each text's style, not matplotlib's ten
    "font.size": 7.0,
    "axes.titlesize": 7.5,
    "axes.titlelocation": "left",
    "axes.spines.top": False,
    "axes.spines.right": False,
    "axes.linewidth": 0.6,
    "xtick.major.width": 0.6,
    "ytick.major.width": 0.6,
    "xtick.major.size": 2.5,
    "ytick.major.size": 2.5,
    "legend.fontsize": 6.5,
    "legend.frameon": False,
}
_NO_METADATA = {"Date": None, "Creator": None, "Format": None, "Type": None}
_SVG_PROLOGUE = re.compile(r"^\s*(<\?xml[^>]*\?>\s*)?(<!DOCTYPE[^>]*>\s*)?")
_GEOMETRY = re.compile(r'(\s(?:d|transform|x|y|width|height|viewBox)=")([^"]*)"')
_DIGITS = re.compile(r"(-?\d+\.\d)\d+")
_NO_ROTATION = re.compile(r' transform="rotate\(-?0 [^"]*\)"')
_GROUP_ID = re.compile(r'<g id="[A-Za-z0-9_.]+">')
_TAG = re.compile(r"<[^<>]+>")


def label(text: str, width: int = _LABEL_CHARS) -> str:
    """`text` as a short one-line plot label: control characters as U+FFFD, cut with "…"."""
    text = _CONTROL.sub("\ufffd", text)
    return text if len(text) <= width else text[: width - 1] + "…"


def _bars(ax: Axes, buckets: Sequence[Bucket], color: str, name: str) -> None:
    """Equal-width buckets as bars of each bucket's share of the split's values."""
    total = sum(count for _, _, count in buckets) or 1.0
    edges = [buckets[0][0]] + [high for _, high, _ in buckets]
    joined = all(a[1] == b[0] for a, b in itertools.pairwise(buckets))
    if joined and all(b > a for a, b in itertools.pairwise(edges)):  # one artist, not one a bar
        shares = [count / total for _, _, count in buckets]
        ax.stairs(shares, edges, fill=True, color=color, alpha=0.55, label=name)
        return
    span = max(high for _, high, _ in buckets) - min(low for low, _, _ in buckets)
    least = span / 60 if span > 0 else 0.8
    lows, widths, heights = [], [], []
    for low, high, count in buckets:
        width = max(high - low, least)
        lows.append(low if high > low else low - width / 2)
        widths.append(width)
        heights.append(count / total)
    ax.bar(lows, heights, width=widths, align="edge", color=color, alpha=0.55, label=name)


def _cumulative(ax: Axes, buckets: Sequence[Bucket], color: str, name: str) -> None:
    """Quantile buckets as the cumulative share of values up to each boundary."""
    total = sum(count for _, _, count in buckets) or 1.0
    xs, ys, seen = [buckets[0][0]], [0.0], 0.0
    for _, high, count in buckets:
        seen += count
        xs.append(high)
        ys.append(seen / total)
    ax.plot(xs, ys, color=color, linewidth=1.2, drawstyle="steps-post", label=name)
    ax.set_ylim(0, 1.02)


def _share(quantiles: Iterable[bool]) -> str:
    return "cumulative share" if any(quantiles) else "share per bucket"


def _distribution(ax: Axes, by_split: Mapping[str, FeatureSummary]) -> None:
    for color, (split, s) in zip(itertools.cycle(COLORS), by_split.items()):
        if s.histogram:
            draw = _cumulative if s.histogram_quantiles else _bars
            draw(ax, s.histogram, color, label(split, 12))
    ax.set_title("values: " + _share(s.histogram_quantiles for s in by_split.values()))


def _top_values(ax: Axes, by_split: Mapping[str, FeatureSummary]) -> None:
    """Grouped horizontal bars: the first split's top values (then others' new ones), each
    split's share of its present rows. A value outside a split's top list has no bar there."""
    order: list[str] = []
    for s in by_split.values():
        order += [v for v, _ in s.top_values if v not in order]
    order = order[:TOP_SHOWN]
    height = 0.8 / max(len(by_split), 1)
    for i, (color, (split, s)) in enumerate(zip(itertools.cycle(COLORS), by_split.items())):
        counts = dict(s.top_values)
        total = float(s.present) or 1.0
        rows = [(k, counts[v] / total) for k, v in enumerate(order) if v in counts]
        ax.barh(
            [k + i * height for k, _ in rows],
            [share for _, share in rows],
            height=height,
            color=color,
            label=label(split, 12),
        )
    ax.set_yticks([k + 0.4 - height / 2 for k in range(len(order))])
    ax.set_yticklabels([label(v) for v in order])
    ax.invert_yaxis()
    ax.set_title("top values: share of rows")


def _lengths(ax: Axes, by_split: Mapping[str, FeatureSummary]) -> None:
    for color, (split, s) in zip(itertools.cycle(COLORS), by_split.items()):
        if s.lengths is not None and s.lengths.buckets:
            draw = _cumulative if s.lengths.quantiles else _bars
            draw(ax, s.lengths.buckets, color, label(split, 12))
    quantiles = (s.lengths.quantiles for s in by_split.values() if s.lengths is not None)
    ax.set_title("values per row: " + _share(quantiles))


def _nulls(ax: Axes, by_split: Mapping[str, FeatureSummary]) -> None:
    """A bar per split (the share of rows without a value), labelled; no axis."""
    rates = [s.null_rate for s in by_split.values()]
    ax.barh(range(len(rates)), [1.0] * len(rates), color="#eeeeee", height=0.6)
    colors = [c for c, _ in zip(itertools.cycle(COLORS), rates)]
    ax.barh(range(len(rates)), rates, color=colors, height=0.6)
    for k, (split, rate) in enumerate(zip(by_split, rates, strict=True)):
        ax.text(0.02, k - 0.42, f"{label(split, 12)}: {rate:.1%}", va="bottom")
    ax.set_xlim(0, 1)
    ax.set_ylim(len(rates) - 0.5 + 0.1, -0.95)
    ax.set_axis_off()
    ax.set_title("null rate")


def _panels(by_split: Mapping[str, FeatureSummary]) -> list[Panel]:
    summaries = list(by_split.values())
    panels: list[Panel] = []
    if any(s.histogram for s in summaries):
        panels.append(_distribution)
    elif any(s.top_values for s in summaries):
        panels.append(_top_values)
    if any(s.lengths is not None and s.lengths.buckets for s in summaries):
        panels.append(_lengths)
    panels.append(_nulls)
    return panels


def feature_svg(by_split: Mapping[str, FeatureSummary]) -> str:
    """One feature's figure (its summary per split, in split order) as an SVG document."""
    panels = _panels(by_split)
    with matplotlib.rc_context(_RC), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a glyph missing from the font: still drawn as text
        fig = Figure(figsize=(sum(_WIDTHS[p.__name__] for p in panels), _PANEL[1]))
        FigureCanvasSVG(fig)
        left = 0.0
        for panel in panels:
            width = _WIDTHS[panel.__name__]
            margin = _MARGINS[panel.__name__]
            ax = fig.add_axes(
                (
                    (left + margin) / fig.get_figwidth(),
                    0.16,
                    (width - margin - 0.12) / fig.get_figwidth(),
                    0.72,
                )
            )
            left += width
            panel(ax, by_split)
            ax.xaxis.set_major_locator(MaxNLocator(nbins=4))
            if panel is not _top_values:
                ax.yaxis.set_major_locator(MaxNLocator(nbins=3))
            ax.tick_params(labelsize=6.5)
        if len(by_split) > 1 and panels[0] is not _nulls:
            fig.axes[0].legend(loc="upper right")
        out = io.StringIO()
        fig.savefig(out, format="svg", metadata=_NO_METADATA)
    return _compact(out.getvalue())


def _compact(svg: str) -> str:
    """Matplotlib's SVG, smaller and the same picture: no prologue, geometry to 0.1 pt, no
    whitespace between tags, no zero rotations, no names on groups (nothing refers to them)."""
    svg = _SVG_PROLOGUE.sub("", svg, count=1)
    svg = _TAG.sub(_compact_tag, svg)  # tags only: text (escaped, no raw < or >) stays as is
    return re.sub(r">\s+<", "><", svg)


def _compact_tag(tag: re.Match) -> str:
    text = _GEOMETRY.sub(lambda m: m[1] + " ".join(_DIGITS.sub(r"\1", m[2]).split()) + '"', tag[0])
    return _GROUP_ID.sub("<g>", _NO_ROTATION.sub("", text))
