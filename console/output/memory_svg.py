"""The postmortem's picture: GPU memory over the incident, one panel per node, actions marked.

Plain SVG text, no plotting library. Each GPU is a step line (memory stays where it was until
it is read again) on a 0-to-total scale; every action is a dashed vertical line labelled with
its key letter and title ("k SIGKILL 8 processes"), so "nothing came back after SIGKILL, then
everything at +91 s" is seen at a glance. Every label (node names, action titles) is untrusted
and escaped for XML; control characters are shown as \\xNN.
"""
from __future__ import annotations

from pathlib import Path
from typing import Callable, Mapping, Sequence
from xml.sax.saxutils import escape

from console.model import TimelineEntry
from console.output.memory_series import MemorySeries, series_from_data, series_from_timeline
from console.textsafe import printable

COLORS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#17becf", "#8c564b", "#e377c2")
WIDTH = 960
PANEL_H = 260
LEFT, RIGHT, TOP, BOTTOM = 64, 150, 34, 40


def _text(value: object, limit: int = 80) -> str:
    return escape(printable(value, limit), {'"': "&quot;"})


def _clock(seconds: float) -> str:
    sign = "-" if seconds < 0 else "+"
    whole = int(round(abs(seconds)))
    h, rest = divmod(whole, 3600)
    m, s = divmod(rest, 60)
    return f"T{sign}{h}:{m:02d}:{s:02d}" if h else f"T{sign}{m}:{s:02d}"


def _ticks(span: float) -> list[float]:
    for step in (5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 14400, 43200, 86400):
        if span / step <= 8:
            return [i * step for i in range(int(span // step) + 1)]
    return [0.0, span]


def _panel(out: list[str], top: float, node: str, series: MemorySeries, start: float, span: float) -> None:
    plot_w = WIDTH - LEFT - RIGHT
    plot_h = PANEL_H - TOP - BOTTOM
    y0 = top + TOP + plot_h
    scale = max([series.scale(g) for g in series.gpus] + [1])

    def x(t: float) -> float:
        return LEFT + (t - start) / span * plot_w

    def y(mib: float) -> float:
        return y0 - mib / scale * plot_h
    out.append(f'<text x="{LEFT}" y="{top + 22}" class="title">{_text(node)}: GPU memory used</text>')
    out.append(f'<rect x="{LEFT}" y="{top + TOP}" width="{plot_w}" height="{plot_h}" class="plot"/>')
    gib = scale / 1024
    for frac in (0, 0.25, 0.5, 0.75, 1):
        yy = y(scale * frac)
        out.append(f'<line x1="{LEFT}" y1="{yy:.1f}" x2="{LEFT + plot_w}" y2="{yy:.1f}" class="grid"/>')
        out.append(f'<text x="{LEFT - 6}" y="{yy + 4:.1f}" class="axis" text-anchor="end">{gib * frac:.0f} GiB</text>')
    for tick in _ticks(span):
        xx = x(start + tick)
        out.append(f'<text x="{xx:.1f}" y="{y0 + 16}" class="axis" text-anchor="middle">{_clock(tick)}</text>')
    for i, gpu in enumerate(series.gpus):
        color = COLORS[i % len(COLORS)]
        coords: list[str] = []
        last: float | None = None
        for t, read in series.points:
            v = read.get(gpu)
            if v is None:
                continue
            if last is not None:
                coords.append(f"{x(t):.1f},{y(last):.1f}")       # a step: it held `last` until now
            coords.append(f"{x(t):.1f},{y(v):.1f}")
            last = v
        if coords and last is not None and series.end is not None:
            coords.append(f"{x(series.end):.1f},{y(last):.1f}")
        if coords:
            out.append(f'<polyline points="{" ".join(coords)}" fill="none" stroke="{color}" stroke-width="1.6" '
                       f'stroke-opacity="0.85"><title>GPU {gpu}</title></polyline>')
        ly = top + TOP + 12 + i * 16
        out.append(f'<line x1="{LEFT + plot_w + 12}" y1="{ly - 4}" x2="{LEFT + plot_w + 30}" y2="{ly - 4}" '
                   f'stroke="{color}" stroke-width="3"/>')
        out.append(f'<text x="{LEFT + plot_w + 36}" y="{ly}" class="legend">GPU {gpu}</text>')
    for j, m in enumerate(series.marks):
        xx = x(m.t)
        label = f"{m.letter} {m.label}" if m.label else m.letter
        out.append(f'<line x1="{xx:.1f}" y1="{top + TOP}" x2="{xx:.1f}" y2="{y0}" class="mark"/>')
        out.append(f'<text x="{xx + 3:.1f}" y="{top + TOP + 12 + (j % 4) * 12}" class="mark-label">'
                   f'{_text(label, 48)} ({_clock(m.t - start)})</text>')


def memory_svg(charts: Sequence[tuple[str, MemorySeries]], title: str = "") -> str:
    """One panel per (node, series), on a shared time axis."""
    charts = [(n, s) for n, s in charts if s.points or s.marks]
    starts = [s.start for _, s in charts if s.start is not None]
    ends = [s.end for _, s in charts if s.end is not None]
    start = min(starts) if starts else 0.0
    span = max((max(ends) if ends else 0.0) - start, 1.0)
    height = max(1, len(charts)) * PANEL_H + (24 if title else 0)
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" '
           f'viewBox="0 0 {WIDTH} {height}" font-family="sans-serif">',
           "<style>.title{font-size:14px;font-weight:bold;fill:#222}.axis{font-size:11px;fill:#444}"
           ".legend{font-size:12px;fill:#222}.plot{fill:#fafafa;stroke:#999}.grid{stroke:#ddd}"
           ".mark{stroke:#b00020;stroke-dasharray:4 3;stroke-width:1.2}"
           ".mark-label{font-size:11px;fill:#b00020}</style>",
           f'<rect width="{WIDTH}" height="{height}" fill="#ffffff"/>']
    top = 0.0
    if title:
        out.append(f'<text x="{LEFT}" y="18" class="title">{_text(title, 120)}</text>')
        top = 24.0
    if not charts:
        out.append(f'<text x="{LEFT}" y="{top + 40}" class="axis">no memory readings recorded</text>')
    for i, (node, series) in enumerate(charts):
        _panel(out, top + i * PANEL_H, node, series, start, span)
    out.append("</svg>")
    return "\n".join(out) + "\n"


def postmortem_svg(entries: Sequence[TimelineEntry], memory: Mapping[str, Mapping] | None = None, *,
                   rung_of: Callable[[TimelineEntry], str] | None = None, title: str = "") -> str | None:
    """The postmortem's chart: per node, the memory the console recorded poll by poll (the
    live state's trails, ``memory``) — else the readings the timeline holds (before and after
    each action and check) — with the timeline's actions marked. None when there is no reading."""
    nodes = [n for n in dict.fromkeys(e.node for e in entries if e.node)]
    for n in (memory or {}):
        if n not in nodes:
            nodes.append(n)
    charts = []
    for node in nodes:
        from_timeline = series_from_timeline(entries, node, rung_of)
        data = (memory or {}).get(node)
        series = series_from_data(data, from_timeline.marks) if data else from_timeline
        if series.points:
            charts.append((node, series))
    return memory_svg(charts, title) if charts else None


def chart_name(markdown: str | Path) -> str:
    """`<id>.md` -> `<id>.memory.svg` (beside it)."""
    return Path(markdown).with_suffix("").name + ".memory.svg"
