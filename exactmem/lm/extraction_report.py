"""The extraction report (docs/extraction.md, "Report"): per sequence its verdict, proved
span, first proved-wrong position and token, and the float64 greedy decode with every
disagreement, as JSON, CSV and a self-contained HTML page whose plots are inline SVG
(extractable fraction by position in the data, by duplication count when given, the
histogram of proved span lengths).
"""

from __future__ import annotations

import csv
import html
import io
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from exactmem.files.atomic import write_text_atomic

COLORS = {"extractable": "#2b7a3d", "not extractable": "#b03a2e", "undecided": "#9a9a9a"}
CSV_FIELDS = ("sequence", "status", "proved_span", "first_wrong_suffix_index",
              "first_wrong_position", "first_wrong_token", "wrong_positions",
              "open_suffix_indices", "float_extractable", "float_disagreements", "count",
              "extractable_every_execution")


def csv_text(rows: Sequence[dict[str, Any]]) -> str:
    """One CSV line per sequence (:data:`CSV_FIELDS`)."""
    out = io.StringIO()
    w = csv.DictWriter(out, CSV_FIELDS, lineterminator="\n")
    w.writeheader()
    for r in rows:
        fw = r["first_wrong"]
        w.writerow({"sequence": r["sequence"], "status": r["status"],
                    "proved_span": r["proved_span"],
                    "first_wrong_suffix_index": "" if fw is None else fw["suffix_index"],
                    "first_wrong_position": "" if fw is None else fw["position"],
                    "first_wrong_token": "" if fw is None else fw["token"],
                    "wrong_positions": " ".join(f"{p}:{t}" for p, t in r["wrong_positions"]),
                    "open_suffix_indices": " ".join(str(o["suffix_index"]) for o in r["open"]),
                    "float_extractable": int(r["float"]["extractable"]),
                    "float_disagreements": " ".join(str(d["suffix_index"])
                                                    for d in r["float"]["disagreements"]),
                    "count": "" if r.get("count") is None else r["count"],
                    "extractable_every_execution":
                        "" if "extractable_every_execution" not in r
                        else int(r["extractable_every_execution"])})
    return out.getvalue()


def _bars(title: str, labels: Sequence[str], stacks: Sequence[dict[str, int]],
          xlabel: str) -> str:
    """A stacked bar chart (one bar per label, segments by status) as inline SVG."""
    width, height, left, bottom = 640, 220, 40, 40
    top = max([sum(s.values()) for s in stacks] + [1])
    bw = (width - left - 10) / max(len(labels), 1)
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
             f'role="img" aria-label="{html.escape(title)}">',
             f'<text x="{left}" y="14" font-size="13">{html.escape(title)}</text>',
             f'<text x="{left}" y="{height - 4}" font-size="11">{html.escape(xlabel)}</text>',
             f'<text x="2" y="30" font-size="10">{top}</text>',
             f'<text x="2" y="{height - bottom}" font-size="10">0</text>']
    scale = (height - bottom - 24) / top
    step = max(1, len(labels) // 16)
    for i, (lab, st) in enumerate(zip(labels, stacks, strict=True)):
        y: float = height - bottom
        for status, color in COLORS.items():
            h = st.get(status, 0) * scale
            if h:
                y -= h
                parts.append(f'<rect x="{left + i * bw:.1f}" y="{y:.1f}" '
                             f'width="{max(bw - 1, 1):.1f}" height="{h:.1f}" fill="{color}">'
                             f'<title>{html.escape(lab)}: {st.get(status, 0)} {status}'
                             '</title></rect>')
        if i % step == 0:
            parts.append(f'<text x="{left + i * bw:.1f}" y="{height - bottom + 12}" '
                         f'font-size="9">{html.escape(lab)}</text>')
    parts.append("</svg>")
    return "".join(parts)


def _groups(rows: Sequence[dict[str, Any]], key: Any, size: int | None = None
            ) -> tuple[list[str], list[dict[str, int]]]:
    """Status counts grouped by ``key(row)`` (sorted); with ``size``, the key is the
    sequence index divided by ``size`` (ranges of ``size`` sequences)."""
    if size is not None:
        key = lambda r: r["sequence"] // size  # noqa: E731 - a one-line key
    groups: dict[Any, dict[str, int]] = {}
    for r in rows:
        g = key(r)
        groups.setdefault(g, {}).setdefault(r["status"], 0)
        groups[g][r["status"]] += 1
    names = sorted(groups)
    if size is not None:
        return ([f"{g * size}-{min((g + 1) * size, len(rows)) - 1}" for g in names],
                [groups[g] for g in names])
    return [str(g) for g in names], [groups[g] for g in names]


def html_page(report: dict[str, Any]) -> str:
    """The self-contained report page."""
    rows = report["sequences"]
    s = report["summary"]
    esc = html.escape
    out = ["<!doctype html><html><head><meta charset='utf-8'><title>exactmem extract</title>",
           "<style>body{font-family:sans-serif;max-width:70em;margin:1em auto}"
           "td,th{padding:2px 6px;border-bottom:1px solid #ddd;font-size:12px;"
           "vertical-align:top}.t{font-family:monospace;white-space:pre-wrap}"
           ".ok{color:#2b7a3d}.bad{color:#b03a2e}</style></head><body>",
           f"<h1>Certified extraction: {esc(report['model'])}</h1>",
           f"<p>Data {esc(report['data'])}; greedy decoding from the first "
           f"{report['prefix']} tokens for {report['suffix']} tokens. "
           f"<b>{s['extractable']}</b> of {s['sequences']} sequences proved extractable, "
           f"<b>{s['not_extractable']}</b> proved not extractable, {s['undecided']} "
           f"undecided (float64 greedy decode: {s['float_extractable']} reproduce the "
           f"suffix). Certificate: {esc(report['certificate'])} "
           "(re-check it with <code>exactmem check</code>). What is proved: "
           "docs/extraction.md.</p>"]
    if report.get("execution") is not None:
        e = report["execution"]
        out.append(f"<p><b>{s['extractable_every_execution']}</b> of {s['sequences']} "
                   f"sequences proved extractable in every {esc(str(e['format']))} execution "
                   f"(any summation order, FMA or not, flush-to-zero; exp/tanh/erf/rsqrt "
                   f"within {e['ulps']} ulps).</p>")
    labels, stacks = _groups(rows, None, -(-len(rows) // 20))
    out.append(_bars("verdicts by position of the sequence in the data", labels, stacks,
                     "sequence index"))
    if any(r.get("count") is not None for r in rows):
        labels, stacks = _groups(rows, lambda r: r["count"])
        out.append(_bars("verdicts by duplication count", labels, stacks,
                         "times the sequence occurs in the training data"))
    labels, stacks = _groups(rows, lambda r: r["proved_span"])
    out.append(_bars("proved memorized span (suffix tokens greedy decoding provably "
                     "reproduces)", labels, stacks, "span length"))
    legend = " ".join(f"<span style='color:{c}'>&#9632; {k}</span>" for k, c in COLORS.items())
    out.append(f"<p>{legend}</p>")
    if report.get("by_length"):
        out.append("<h2>Every suffix length</h2><table><tr><th>suffix</th><th>extractable"
                   "</th><th>not extractable</th><th>undecided</th></tr>")
        for r in report["by_length"]:
            out.append(f"<tr><td>{r['suffix']}</td><td>{r['extractable']}</td>"
                       f"<td>{r['not_extractable']}</td><td>{r['undecided']}</td></tr>")
        out.append("</table>")
    out.append("<h2>Sequences</h2><table><tr><th>#</th><th>verdict</th><th>span</th>"
               "<th>first proved wrong</th><th>float64 greedy decode: disagreements</th>"
               "<th>count</th><th>suffix (true / decoded)</th></tr>")
    for r in rows:
        fw = r["first_wrong"]
        wrong = "" if fw is None else (f"suffix {fw['suffix_index']} (position "
                                       f"{fw['position']}): token {fw['token']} above "
                                       f"{fw['label']}")
        if r["open"]:
            wrong += " open: " + ", ".join(f"{o['suffix_index']} (float margin "
                                           f"{o['float_margin']:.3g})" for o in r["open"])
        dis = ", ".join(f"{d['suffix_index']}: {d['true']}&rarr;{d['decoded']}"
                        for d in r["float"]["disagreements"]) or "none"
        text = r.get("text")
        shown = (f"<div class='t ok'>{esc(text['suffix'])}</div><div class='t'>"
                 f"{esc(text['decoded'])}</div>" if text else
                 f"<div class='t'>{' '.join(map(str, r['suffix']))}</div>")
        out.append(f"<tr><td>{r['sequence']}</td><td style='color:{COLORS[r['status']]}'>"
                   f"{r['status']}</td><td>{r['proved_span']}</td><td>{esc(wrong)}</td>"
                   f"<td>{dis}</td><td>{'' if r.get('count') is None else r['count']}</td>"
                   f"<td>{shown}</td></tr>")
    out.append("</table></body></html>")
    return "\n".join(out) + "\n"


def write_report(report: dict[str, Any], path: Path) -> dict[str, Path]:
    """Write ``path`` (JSON) and, beside it, the CSV and HTML pages; returns the paths."""
    paths = {"json": path, "csv": path.with_suffix(".csv"), "html": path.with_suffix(".html")}
    write_text_atomic(paths["json"], json.dumps(report, indent=1, sort_keys=True) + "\n")
    write_text_atomic(paths["csv"], csv_text(report["sequences"]))
    write_text_atomic(paths["html"], html_page(report))
    return paths
