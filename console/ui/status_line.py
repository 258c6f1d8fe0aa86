"""The status line at the top of the node console: the node (or, with several, how many, how
many fail or connect, which is viewed), its GPUs and memory, whether its poll stopped returning,
its first warning (the rest whole in ``m``), the process filter and tags, work in progress and
results waiting, the mode (read-only, dry-run) and, at the right, the incident's ID.

``status_text`` builds the line from what it is given (no App, no Textual); ``StatusLine``
draws it only when it changed, and without a new layout when its width did not."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

from rich.text import Text

from console.output.remedy import remedy_first
from console.diagnosis import text as t
from console.model import NodeSnapshot
from console.ui.text import LiteralStatic, printable


@dataclass(frozen=True)
class StatusFacts:
    nodes: Sequence[str]                           # every node's name, in the node list's order
    snapshots: Mapping[str, NodeSnapshot | None]   # the readings drawn
    viewing: str                                   # the node in view
    multi_node: bool
    stale_s: float | None                          # how long the node in view has not answered
    proc_filter: str = ""
    tagged: int = 0
    gpus_in_view: int | None = None                # the GPU panel shows only this many (a split pane)


def _gpus_more(f: StatusFacts, snap: NodeSnapshot) -> str:
    """" (2 in view ↓)" when the GPU panel shows fewer GPUs than the node has (it scrolls)."""
    rows = len(snap.gpus) + len(snap.lost_gpus)
    if f.gpus_in_view is None or f.gpus_in_view >= rows:
        return ""
    return f" ({f.gpus_in_view} in view ↓)"


def status_text(f: StatusFacts) -> Text:
    line = Text()
    snap = f.snapshots.get(f.viewing)
    if f.multi_node:
        snaps = [f.snapshots.get(n) for n in f.nodes]
        failing = sum(1 for s in snaps if s is not None and s.error)
        waiting = sum(1 for s in snaps if s is None)
        count = len(f.nodes)
        line.append(f"{count} node{'' if count == 1 else 's'}" if count else "no node open yet", style="bold")
        if failing:
            line.append(f"  {failing} failing", style="bold red")
        if waiting:
            line.append(f"  {waiting} connecting", style="dim")
        line.append("  · viewing ")
        line.append(printable(f.viewing, 40), style="bold")
        if f.stale_s is not None:
            line.append(f" ⚠ last reading {f.stale_s:.0f} s ago", style="bold yellow")
        if snap is not None and snap.error:
            line.append(" ✖ " + printable(remedy_first(snap.error), 80), style="bold red")
        elif snap is not None and _gpus_more(f, snap):
            line.append(f" · {len(snap.gpus)} GPUs" + _gpus_more(f, snap), style="bold yellow")
    else:
        line.append(printable(f.viewing, 30), style="bold")
        if snap is None:
            line.append(" connecting…", style="dim")
        elif snap.error:
            line.append(" ✖ " + printable(remedy_first(snap.error), 120), style="bold red")
        elif f.stale_s is not None:
            line.append(f"  ⚠ last reading {f.stale_s:.0f} s ago: the poll stopped returning", style="bold yellow")
        else:
            used = sum(g.memory_used_mib or 0 for g in snap.gpus)
            line.append(f"  {len(snap.gpus)} GPUs")
            more = _gpus_more(f, snap)
            if more:
                line.append(more, style="bold yellow")
            line.append(f"  {t.mib(used)} used")
            if snap.probe_ms is not None:
                line.append(f"  probe {snap.probe_ms:.0f}ms", style="dim")
            if snap.warnings:
                first = snap.warnings[0]
                line.append(f"  ⚠ {printable(first, 60)}", style="yellow")
                if len(snap.warnings) > 1 or len(first) > 60:     # the rest, whole: in m
                    line.append(f" (m: {len(snap.warnings)} whole)" if len(snap.warnings) > 1 else " (m: whole)",
                                style="dim")
    if f.proc_filter:
        line.append(f"  filter: {printable(f.proc_filter, 30)}", style="bold cyan")
    if f.tagged:
        line.append(f"  {f.tagged} tagged", style="bold cyan")
    return line


def with_mode_and_incident(line: Text, mode: str, incident_id: str | None, width: int,
                           person: str | None = None, new: bool = False) -> Text:
    """The mode after what the line says; the incident's ID at the right edge (its word
    "incident" dropped first, the line cut with … before the ID is); ``person``: who this
    console writes as, where ``--as`` named them ("incident p1 as alice@vm"). ``new``:
    ``--incident ID`` named none that existed: "new incident ID" (its "new" kept at every width)."""
    if mode:
        line.append("  " + mode, style="bold yellow")
    if incident_id:
        width = max(0, width - 2)
        who = f" as {printable(person, 30)}" if person else ""
        style = "bold yellow" if new else "dim"
        right = Text(f"{'new ' if new else ''}incident {printable(incident_id, 40)}{who}", style=style)
        if line.cell_len + right.cell_len + 2 > width:
            right = Text(f"{'new ' if new else ''}{printable(incident_id, 40)}{who}", style=style)
        room = width - right.cell_len - 2
        if room >= 20:
            line.truncate(room, overflow="ellipsis")
            line.append(" " * (width - line.cell_len - right.cell_len))
            line.append_text(right)
    else:       # cut and padded to the width all the same: a new probe time needs no new layout
        line.truncate(max(1, width - 2), overflow="ellipsis", pad=True)
    return line


class StatusLine(LiteralStatic):
    """Draws a status line only when it changed: the line is padded to the screen's width, so
    the same width again needs no new layout (a whole-screen render, ~12 ms, twice a second at
    256 nodes)."""

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self._drawn: Text | None = None

    def show(self, line: Text) -> None:
        if line == self._drawn:
            return
        same = self._drawn is not None and line.cell_len == self._drawn.cell_len
        self._drawn = line
        self.update(line, layout=not same)
