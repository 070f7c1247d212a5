"""The report's HTML: one self-contained page (styles inline, plots as `data:` SVG images).

Every string that comes from the data or the run (column names, values, split names, paths,
bad-row reasons) passes through `_e` (html.escape, quotes included; control characters, which
HTML does not allow, as U+FFFD) before it enters the page;
the plots carry theirs inside the SVG images, which a browser never runs scripts in. The
thumbnails of image features are PNGs Pillow made anew from the decoded pixels (never a
record's own bytes), as `data:image/png` images. The page
declares a Content-Security-Policy that lets nothing be fetched (`default-src 'none'`, images
from `data:` only) and no script run. Each number the statistics give is in a cell with
`data-split`, `data-stat` and its exact value in `data-value`; the text shows it rounded.
"""

from __future__ import annotations

import base64
import html
import re
import statistics
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from pipeline.output.manifest import Manifest, StoredFeature
from pipeline.output.sections import with_derived
from pipeline.report.files import BadRows
from pipeline.report.stats import FeatureSummary
from pipeline.report.thumbnails import Thumbnail

__all__ = ["render_page", "svg_image"]

_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\ud800-\udfff]")
CSP = "default-src 'none'; img-src data:; style-src 'unsafe-inline'"
SHARDS_LISTED = 50  # shards listed per split (all are in the split's totals)
_STYLE = """
body{font:13px/1.4 system-ui,sans-serif;margin:1.5em auto;max-width:1150px;color:#222;
padding:0 1em}
h1{font-size:1.5em;margin-bottom:.2em}h2{margin-top:1.6em;border-bottom:1px solid #ddd}
h3{margin:.2em 0;font-size:1.05em}code{font-size:.95em}
table{border-collapse:collapse;margin:.4em 0}
th,td{border:1px solid #ddd;padding:2px 7px;text-align:left;vertical-align:top}
td.n{text-align:right;font-variant-numeric:tabular-nums}th{background:#f4f4f4}
.feature{border-top:1px solid #eee;padding:.6em 0;display:flex;flex-wrap:wrap;gap:1em}
.feature .head{flex-basis:100%}.muted{color:#777}.warn{color:#b00}
details{margin:.3em 0}img{max-width:100%}
.thumbs{display:flex;flex-wrap:wrap;gap:.6em;align-items:flex-end;margin:.3em 0 .8em}
.thumbs figure{margin:0;text-align:center}.thumbs figcaption{font-size:.85em;color:#555}
"""


def _e(value: object) -> str:
    """`value` as HTML text or attribute: escaped, control characters as U+FFFD."""
    return _CONTROL.sub("\ufffd", html.escape(str(value), quote=True))


def _fmt(value: float | int) -> str:
    """Integers (and integral floats: counts) with thousands separators; others to 6 digits."""
    if isinstance(value, int) or (float(value).is_integer() and abs(value) < 1e15):
        return f"{int(value):,}"
    return format(value, ".6g")


def _num(value: float | int, **data: str) -> str:
    """A number cell: the rounded text, the exact value and its keys as data attributes."""
    attrs = "".join(f' data-{k}="{_e(v)}"' for k, v in data.items())
    return f'<td class="n"{attrs} data-value="{_e(repr(value))}">{_e(_fmt(value))}</td>'


def _table(head: Sequence[str], rows: Iterable[Sequence[str]]) -> str:
    """A table from escaped header names and rows of ready cells (`<td>...</td>`)."""
    th = "".join(f"<th>{_e(h)}</th>" for h in head)
    body = "".join(f"<tr>{''.join(r)}</tr>" for r in rows)
    return f"<table><tr>{th}</tr>{body}</table>"


def _td(value: object) -> str:
    return f"<td>{_e(value)}</td>"


def svg_image(svg: str, alt: str) -> str:
    """An `<img>` holding `svg` as a base64 `data:` URI."""
    data = base64.b64encode(svg.encode("utf-8")).decode("ascii")
    return f'<img alt="{_e(alt)}" src="data:image/svg+xml;base64,{data}">'


def _shape(feature: StoredFeature) -> str:
    shape = feature.spec.shape
    if shape is None:
        return "variable-length list"
    if shape == ():
        return "scalar"
    return "(" + ", ".join("?" if d < 0 else str(d) for d in shape) + ")"


def _overview(output: str, manifest: Manifest) -> str:
    sources = list(manifest.sources)
    shown = ", ".join(sources[:5]) + (f" and {len(sources) - 5} more" if len(sources) > 5 else "")
    items = [
        ("output", output),
        ("rows", f"{manifest.rows:,}" if manifest.rows is not None else "not recorded"),
        ("splits", ", ".join(f"{n} ({s.rows:,})" for n, s in manifest.splits.items())),
        ("bad rows", f"{manifest.bad_row_count:,}"),
        ("compression", manifest.compression),
        ("source", f"{manifest.source_format or '?'}: {shown}"),
        ("created", manifest.created or "?"),
        ("versions", ", ".join(f"{k} {v}" for k, v in manifest.versions.items())),
    ]
    if manifest.statistics:
        items.append(("statistics", ", ".join(manifest.statistics.values())))
    if manifest.schema:
        items.append(("schema", manifest.schema))
    rows = "".join(f"<tr><th>{_e(k)}</th>{_td(v)}</tr>" for k, v in items)
    return f"<table>{rows}</table>"


def _splits(sizes: Mapping[str, list[tuple[str, int | None, int]]], manifest: Manifest) -> str:
    rows = []
    details = []
    for name, shards in sizes.items():
        known = [b for _, _, b in shards if b >= 0]
        rows.append(
            [
                _td(name),
                _num(manifest.splits[name].rows, split=name, stat="rows"),
                _num(len(shards), split=name, stat="shards"),
                _num(sum(known), split=name, stat="bytes"),
                *(
                    _num(f(known), split=name, stat=label)
                    for label, f in (("min", min), ("median", statistics.median), ("max", max))
                    if known
                ),
            ]
        )
        listed = [
            [
                _td(f),
                _num(r, split=name, stat="shard rows") if r is not None else _td("?"),
                _num(b, split=name, stat="shard bytes") if b >= 0 else _td("missing"),
            ]
            for f, r, b in shards[:SHARDS_LISTED]
        ]
        more = len(shards) - SHARDS_LISTED
        note = f"<p class=muted>and {more:,} more</p>" if more > 0 else ""
        details.append(
            f"<details><summary>{_e(name)}: {len(shards):,} shard(s)</summary>"
            f"{_table(['file', 'records', 'bytes'], listed)}{note}</details>"
        )
    head = ["split", "rows", "shards", "bytes", "smallest shard", "median shard", "largest shard"]
    return _table(head, rows) + "".join(details)


def _bad_rows(bad: BadRows) -> str:
    if bad.count == 0 and not bad.first:
        return "<p>No bad row: every row read was written.</p>"
    out = [
        f'<p class="warn">{_e(f"{bad.count:,}")} bad row(s), set aside in '
        f"<code>_errors/</code> ({_e(len(bad.files))} file(s)).</p>"
    ]
    if bad.read < bad.count:
        out.append(f"<p class=muted>Counts below from the first {bad.read:,} lines.</p>")
    causes = sorted(bad.by_cause.items(), key=lambda kv: -kv[1])
    out.append(
        _table(
            ["stage", "column", "rows"],
            ([_td(s), _td(c), _num(n, stat="bad rows")] for (s, c), n in causes),
        )
    )
    first = [
        [
            _td(r.get("source", "")),
            _td(r.get("row", "")),
            _td(r.get("column") or ""),
            _td(r.get("stage", "")),
            _td(r.get("reason", "")),
        ]
        for r in bad.first
    ]
    out.append(
        f"<details><summary>the first {len(first)}</summary>"
        f"{_table(['source', 'row', 'column', 'stage', 'reason'], first)}</details>"
    )
    return "".join(out)


def _type_mapping(manifest: Manifest) -> str:
    rows = [
        [
            _td(".".join(f.spec.path)),
            _td(f.spec.source_type),
            f"<td><code>{_e(f.name)}</code></td>",
            _td(f.spec.kind),
            _td(f.spec.dtype),
            _td(_shape(f)),
            _td(f.spec.encoding + (f" ({f.spec.unit})" if f.spec.unit else "")),
            _td(f.spec.null_policy),
            _num(f.null_count, feature=f.name, stat="nulls"),
        ]
        for f in manifest.features
    ]
    head = [
        "source column",
        "source type",
        "feature",
        "Example kind",
        "dtype",
        "shape",
        "encoding",
        "nulls",
        "null rows",
    ]
    return _table(head, rows)


def _feature_table(name: str, by_split: Mapping[str, FeatureSummary]) -> str:
    labels: list[str] = []
    for s in by_split.values():
        labels += [k for k in s.stats if k not in labels]
    rows = [
        [f"<th>{_e(label)}</th>"]
        + [_num(value(s), split=split, stat=label) for split, s in by_split.items()]
        for label, value in (
            ("rows", lambda s: s.examples),
            ("present", lambda s: s.present),
            ("missing", lambda s: s.missing),
            ("null rate", lambda s: s.null_rate),
        )
    ]
    for label in labels:
        rows.append(
            [f"<th>{_e(label)}</th>"]
            + [
                _num(s.stats[label], split=split, stat=label) if label in s.stats else _td("")
                for split, s in by_split.items()
            ]
        )
    head = "".join(f"<th>{_e(split)}</th>" for split in by_split)
    body = "".join(f"<tr>{''.join(r)}</tr>" for r in rows)
    return f'<table data-feature="{_e(name)}"><tr><th></th>{head}</tr>{body}</table>'


def _top_table(name: str, by_split: Mapping[str, FeatureSummary]) -> str:
    """Each split's top values and their rows (cells keyed `data-stat="top <value>"`)."""
    rows = "".join(
        f"<tr>{_td(split)}<td><code>{_e(value)}</code></td>"
        f"{_num(count, split=split, stat='top ' + value)}</tr>"
        for split, s in by_split.items()
        for value, count in s.top_values
    )
    if not rows:
        return ""
    return (
        f'<details><summary>top values</summary><table data-feature="{_e(name)}">'
        f"<tr><th>split</th><th>value</th><th>rows</th></tr>{rows}</table></details>"
    )


def _feature(feature: StoredFeature, by_split: Mapping[str, FeatureSummary], svg: str) -> str:
    head = (
        f'<div class="head"><h3 id="f-{_e(feature.name)}"><code>{_e(feature.name)}</code></h3>'
        f'<span class="muted">{_e(feature.spec.dtype)}, {_e(_shape(feature))}, from '
        f"{_e(feature.spec.source_type)}</span></div>"
    )
    if not by_split:
        return (
            f'<div class="feature" data-feature="{_e(feature.name)}">{head}'
            "<p class=muted>no statistics for this feature</p></div>"
        )
    return (
        f'<div class="feature" data-feature="{_e(feature.name)}">{head}'
        f"<div>{svg_image(svg, f'plots of {feature.name}')}</div>"
        f"<div>{_feature_table(feature.name, by_split)}{_top_table(feature.name, by_split)}"
        "</div></div>"
    )


def _thumbnail(name: str, split: str, t: Thumbnail) -> str:
    caption = f"{split} #{t.record}"
    if t.png is None:
        return (
            f'<figure data-feature="{_e(name)}" data-split="{_e(split)}">'
            f'<span class="warn">{_e(t.error)}</span><figcaption>{_e(caption)}</figcaption>'
            "</figure>"
        )
    data = base64.b64encode(t.png).decode("ascii")
    return (
        f'<figure data-feature="{_e(name)}" data-split="{_e(split)}">'
        f'<img alt="{_e(f"{name}, {caption}")}" src="data:image/png;base64,{data}">'
        f"<figcaption>{_e(caption)}: {t.width}x{t.height}</figcaption></figure>"
    )


def _images(thumbnails: Mapping[str, Mapping[str, Sequence[Thumbnail]]]) -> str:
    """Each image feature's first records per split, as thumbnails."""
    out = []
    for name, by_split in thumbnails.items():
        out.append(f"<h3><code>{_e(name)}</code></h3>")
        for split, shown in by_split.items():
            figures = "".join(_thumbnail(name, split, t) for t in shown)
            out.append(
                f'<div class="thumbs"><strong>{_e(split)}</strong>'
                f"{figures or '<span class=muted>no record</span>'}</div>"
            )
    return "".join(out)


def render_page(
    *,
    output: str,
    manifest: Manifest,
    sizes: Mapping[str, list[tuple[str, int | None, int]]],
    bad: BadRows,
    summaries: Mapping[str, Mapping[str, FeatureSummary]],
    plots: Mapping[str, str],
    thumbnails: Mapping[str, Mapping[str, Sequence[Thumbnail]]] | None = None,
) -> str:
    """The page. `summaries`: feature -> split -> its statistics (empty when the output has
    none); `plots`: feature -> its figure as SVG; `thumbnails`: image feature -> split -> its
    first records' thumbnails."""
    title = f"Dataset report: {output}"
    if summaries:
        shown = with_derived(manifest.features, manifest.rows or 0)
        features = "".join(
            _feature(f, summaries.get(f.name, {}), plots.get(f.name, "")) for f in shown
        )
        known = {f.name for f in shown}
        others = [name for name in summaries if name not in known]
        if others:
            features += (
                "<p class=warn>Statistics of features the manifest does not list (not shown): "
                + ", ".join(f"<code>{_e(name)}</code>" for name in others)
                + "</p>"
            )
    else:
        features = (
            "<p class=muted>This output has no statistics (the manifest lists none): "
            "the tables above come from the manifest alone.</p>"
        )
    sections: list[tuple[str, Any]] = [
        ("Splits and shards", _splits(sizes, manifest)),
        ("Bad rows", _bad_rows(bad)),
        ("Type mapping", _type_mapping(manifest)),
    ]
    if thumbnails:
        sections.append(("Images", _images(thumbnails)))
    sections.append(("Features", features))
    body = "".join(f"<h2>{_e(h)}</h2>{content}" for h, content in sections)
    return (
        "<!DOCTYPE html>\n<html lang=en><head><meta charset=utf-8>"
        f'<meta http-equiv="Content-Security-Policy" content="{CSP}">'
        '<meta name=viewport content="width=device-width,initial-scale=1">'
        f"<title>{_e(title)}</title><style>{_STYLE}</style></head><body>"
        f"<h1>{_e(title)}</h1>{_overview(output, manifest)}{body}</body></html>\n"
    )
