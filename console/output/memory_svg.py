"""The postmortem's picture: GPU memory over the incident, one panel per node, actions marked.

Plain SVG text, no plotting library. Each GPU is a step line (memory stays where it was until
it is read again) on a 0-to-total scale; GPUs whose lines are drawn the same, to the pixel, share
one line and one legend entry ("GPUs 0-7": eight stuck GPUs are one line, not eight drawn over
each other). Every action is a dashed vertical line labelled with its key letter, title and time
("k SIGKILL 8 processes (T+0:30)"), every wait a shaded span as well; the labels sit in rows
above the plot, each in the first row where it overlaps no other label and no mark's line
crosses it. So "nothing came back after SIGKILL, then everything at +91 s, during the wait" is
seen at a glance. Every label (node names, action titles) is untrusted and escaped for XML;
control characters are shown as \\xNN.
"""
from __future__ import annotations

from pathlib import Path
from typing import Mapping, Sequence
from xml.sax.saxutils import escape

from console.diagnosis import text as t
from console.output.memory_series import MemorySeries, series_from_data
from console.textsafe import printable

COLORS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#17becf", "#8c564b", "#e377c2")
WIDTH = 960
PLOT_H = 186
LEFT, RIGHT, TOP, BOTTOM = 64, 150, 34, 40
LANE_H = 13                # a row of mark labels above the plot
CHAR_W = 7.0               # the width of a label's character (11 px sans-serif: wide glyphs assumed)
LABEL_GAP = 6              # the least room between two labels in one row
LABEL_CHARS = 64           # a mark's label is cut to this


def _text(value: object, limit: int | None = 80) -> str:
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


def label_width(text: str) -> float:
    """The width a mark's label takes (11 px sans-serif, wide glyphs assumed: never less)."""
    return len(text) * CHAR_W


def _fit(text: str, letter: str, when: str, room: float) -> str:
    """``text`` ("k SIGKILL 8 processes (T+0:30)"), its title cut with … to fit ``room`` px (the
    letter and the time always whole)."""
    if label_width(text) <= room:
        return text
    title = text[len(letter) + 1:-(len(when) + 3)]
    keep = max(0, int(room / CHAR_W) - len(letter) - len(when) - 5)
    return f"{letter} {title[:keep].rstrip()}… ({when})"


def _place(xs: Sequence[float], texts: Sequence[str], right: float) -> list[tuple[int, float]]:
    """Each label's row above the plot and where its text starts: right of its mark, or left of it
    when it does not fit there. The first row (then side) where it overlaps no label, no line of a
    mark (drawn from its label's row down to the plot) crosses it, and its own line crosses no
    label below. None fits: a new row, right of its mark (nothing earlier is there to cross it),
    cut to fit."""
    placed: list[tuple[int, float, float, float]] = []        # (row, mark x, from, to)

    def free(row: int, x: float, lo: float, hi: float) -> bool:
        return lo >= 2 and hi <= right and not any(
            (r == row and not (hi + LABEL_GAP <= a or lo >= b + LABEL_GAP))
            or (r < row and lo - 2 <= mx <= hi + 2) or (r > row and a - 2 <= x <= b + 2)
            for r, mx, a, b in placed)
    out = []
    for x, text in zip(xs, texts):
        w = label_width(text)
        rows = max((r + 1 for r, *_ in placed), default=0)
        spot = next(((row, lo) for row in range(rows + 1) for lo in (x + 3, x - 3 - w)
                     if free(row, x, lo, lo + w)), None)
        row, lo = spot if spot is not None else (rows, x + 3)
        placed.append((row, x, lo, lo + w if spot is not None else right))
        out.append((row, lo))
    return out


def _groups(series: MemorySeries, y) -> list[list[int]]:
    """GPUs whose lines are drawn the same (to the pixel) share one line: [[0, 1, ..., 7]]."""
    drawn: dict[tuple, list[int]] = {}
    for gpu in series.gpus:
        key = tuple((t, None if read.get(gpu) is None else round(y(read[gpu]))) for t, read in series.points
                    if gpu in read)
        drawn.setdefault(key, []).append(gpu)
    return list(drawn.values())


def _panel(out: list[str], top: float, node: str, series: MemorySeries, start: float, span: float) -> float:
    """One node's panel from ``top``; returns its height."""
    plot_w = WIDTH - LEFT - RIGHT

    def x(t: float) -> float:
        return LEFT + (t - start) / span * plot_w
    marks = sorted(series.marks, key=lambda m: m.t)
    xs = [x(m.t) for m in marks]
    labels = [f"{m.letter} {printable(m.label, LABEL_CHARS)} ({_clock(m.t - start)})" if m.label
              else f"{m.letter} ({_clock(m.t - start)})" for m in marks]
    spots = _place(xs, labels, WIDTH - 2)
    wholes, labels = labels, [_fit(text, m.letter, _clock(m.t - start), WIDTH - 2 - lo)
              for m, text, (_, lo) in zip(marks, labels, spots)]
    lanes = max((row + 1 for row, _ in spots), default=0)
    plot_top = top + TOP + lanes * LANE_H + (6 if lanes else 0)
    y0 = plot_top + PLOT_H
    scale = max([series.scale(g) for g in series.gpus] + [1])

    def y(mib: float) -> float:
        return y0 - mib / scale * PLOT_H
    out.append(f'<text x="{LEFT}" y="{top + 22}" class="title">{_text(node)}: GPU memory used</text>')
    out.append(f'<rect x="{LEFT}" y="{plot_top}" width="{plot_w}" height="{PLOT_H}" class="plot"/>')
    for m in series.marks:           # a wait: shaded for as long as it lasted
        if m.end is not None and m.end > m.t:
            out.append(f'<rect x="{x(m.t):.1f}" y="{plot_top}" width="{x(m.end) - x(m.t):.1f}" height="{PLOT_H}" '
                       f'class="wait"><title>{_text(m.label, 120)}</title></rect>')
    gib = scale / 1024
    for frac in (0, 0.25, 0.5, 0.75, 1):
        yy = y(scale * frac)
        out.append(f'<line x1="{LEFT}" y1="{yy:.1f}" x2="{LEFT + plot_w}" y2="{yy:.1f}" class="grid"/>')
        out.append(f'<text x="{LEFT - 6}" y="{yy + 4:.1f}" class="axis" text-anchor="end">{gib * frac:.0f} GiB</text>')
    for tick in _ticks(span):
        xx = x(start + tick)
        out.append(f'<text x="{xx:.1f}" y="{y0 + 16}" class="axis" text-anchor="middle">{_clock(tick)}</text>')
    for i, gpus in enumerate(_groups(series, y)):
        color = COLORS[i % len(COLORS)]
        name = t.gpus(gpus)
        coords: list[str] = []
        last: float | None = None
        for when, read in series.points:
            v = read.get(gpus[0])
            if v is None:
                continue
            if last is not None:
                coords.append(f"{x(when):.1f},{y(last):.1f}")       # a step: it held `last` until now
            coords.append(f"{x(when):.1f},{y(v):.1f}")
            last = v
        if coords and last is not None and series.end is not None:
            coords.append(f"{x(series.end):.1f},{y(last):.1f}")
        if coords:
            out.append(f'<polyline points="{" ".join(coords)}" fill="none" stroke="{color}" stroke-width="1.6" '
                       f'stroke-opacity="0.85"><title>{name}</title></polyline>')
        ly = plot_top + 12 + i * 16
        out.append(f'<line x1="{LEFT + plot_w + 12}" y1="{ly - 4}" x2="{LEFT + plot_w + 30}" y2="{ly - 4}" '
                   f'stroke="{color}" stroke-width="3"/>')
        out.append(f'<text x="{LEFT + plot_w + 36}" y="{ly}" class="legend">{_text(name, 24)}</text>')
    for xx, text, whole, (row, lo) in zip(xs, labels, wholes, spots):
        ly = top + TOP + (row + 1) * LANE_H - 3
        out.append(f'<line x1="{xx:.1f}" y1="{ly + 3:.1f}" x2="{xx:.1f}" y2="{y0}" class="mark"/>')
        out.append(f'<text x="{lo:.1f}" y="{ly:.1f}" class="mark-label">{_text(text, None)}'
                   f'<title>{_text(whole, None)}</title></text>')
    return y0 + BOTTOM - top


def memory_svg(charts: Sequence[tuple[str, MemorySeries]], title: str = "") -> str:
    """One panel per (node, series), on a shared time axis."""
    charts = [(n, s) for n, s in charts if s.points or s.marks]
    starts = [s.start for _, s in charts if s.start is not None]
    ends = [s.end for _, s in charts if s.end is not None]
    start = min(starts) if starts else 0.0
    span = max((max(ends) if ends else 0.0) - start, 1.0)
    top = 24.0 if title else 0.0
    body: list[str] = []
    if title:
        body.append(f'<text x="{LEFT}" y="18" class="title">{_text(title, 120)}</text>')
    if not charts:
        body.append(f'<text x="{LEFT}" y="{top + 40}" class="axis">no memory readings recorded</text>')
    bottom = top + (0 if charts else 60)
    for node, series in charts:
        bottom += _panel(body, bottom, node, series, start, span)
    height = int(bottom + 0.5)
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" '
           f'viewBox="0 0 {WIDTH} {height}" font-family="sans-serif">',
           "<style>.title{font-size:14px;font-weight:bold;fill:#222}.axis{font-size:11px;fill:#444}"
           ".legend{font-size:12px;fill:#222}.plot{fill:#fafafa;stroke:#999}.grid{stroke:#ddd}"
           ".mark{stroke:#b00020;stroke-dasharray:4 3;stroke-width:1.2}"
           ".wait{fill:#b00020;fill-opacity:0.08}"
           ".mark-label{font-size:11px;fill:#b00020}</style>",
           f'<rect width="{WIDTH}" height="{height}" fill="#ffffff"/>', *body, "</svg>"]
    return "\n".join(out) + "\n"


def postmortem_svg(from_timeline: Mapping[str, MemorySeries], memory: Mapping[str, Mapping] | None = None, *,
                   title: str = "") -> str | None:
    """The postmortem's chart: per node, the memory the console recorded poll by poll (the live
    state's trails, ``memory``), else the readings the timeline holds (``from_timeline``: built
    from the timeline by console/ui/postmortem.py), with the timeline's actions and waits marked.
    None when there is no reading."""
    nodes = list(from_timeline)
    nodes += [n for n in (memory or {}) if n not in nodes]
    charts = []
    for node in nodes:
        timeline = from_timeline.get(node) or MemorySeries()
        data = (memory or {}).get(node)
        series = series_from_data(data, timeline.marks) if data else timeline
        if series.points:
            charts.append((node, series))
    return memory_svg(charts, title) if charts else None


def chart_name(markdown: str | Path) -> str:
    """`<id>.md` -> `<id>.memory.svg` (beside it)."""
    return Path(markdown).with_suffix("").name + ".memory.svg"
