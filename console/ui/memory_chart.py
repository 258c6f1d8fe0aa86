"""A per-GPU memory sparkline over the incident, beside the GPU table, with the actions marked.

The data is console/output/memory_series.py's (one row per GPU, on a fixed 0-to-total scale,
so a GPU stuck at 76 GiB all along is a tall bar, not an empty baseline — Textual's Sparkline
scales each line to its own min and max, which would draw it flat); this widget only lays it
out: a header row with the key letter of each action at its moment (k SIGKILL, B blockers,
R reset …), then one row per GPU, the columns of actions highlighted.
"""
from __future__ import annotations

from rich.text import Text
from textual.widget import Widget

from console.output.memory_series import Mark, MemorySeries, columns, spark
from console.ui import keys


class MemoryChart(Widget):
    """Sits beside the GPU table; its rows line up with the table's (header, then GPU 0, 1, …)."""

    DEFAULT_CSS = """
    MemoryChart {
        height: auto;
        width: 30%;
        min-width: 14;
        max-width: 64;
        padding: 0 1 0 0;
    }
    """

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.series = MemorySeries()
        self.first = 0          # the first GPU row shown: the GPU table's scroll (rows stay in line)

    def show(self, series: MemorySeries) -> None:
        """A new layout only when the number of GPUs changed (the chart is a row a GPU): a
        hidden chart's height is 0, and asking for one at every poll laid out the whole screen."""
        layout = len(series.gpus) != len(self.series.gpus) or (self.display and not self.size.height)
        self.series = series
        self.refresh(layout=layout)

    def scroll_to_row(self, first: int) -> None:
        """Start at the table's first visible GPU row, as the GPU table scrolled."""
        first = max(0, int(first))
        if first != self.first:
            self.first = first
            self.refresh()

    def letter(self, mark: Mark) -> str:
        """The action's letter on the chart: the key that sends it here, a ``[keys]`` remap
        applied (one character; else the rung's own letter)."""
        remap = getattr(self.app, "keymap", {}) or {}
        if mark.rung in remap:
            shown = keys.key_of(mark.rung, remap)
            if len(shown) == 1:
                return shown
        return mark.letter

    def get_content_height(self, container, viewport, width: int) -> int:
        return len(self.series.gpus) + 1

    def render(self) -> Text:
        series = self.series
        width = max(4, self.size.width - 1 - 3)
        out = Text(no_wrap=True, overflow="crop")
        if not series.points:
            out.append("memory over time: waiting for a reading", style="dim")
            return out
        per, marks = columns(series, width)
        marked = {i for i, m in enumerate(marks) if m}
        out.append("mem", style="bold")
        for i, m in enumerate(marks):
            out.append(self.letter(m[-1]) if m else "─", style="bold reverse" if m else "dim")
        for gpu in series.gpus[self.first:]:
            out.append(f"\n{gpu:>2} ")
            line = spark(per[gpu], series.scale(gpu))
            for i, ch in enumerate(line):
                out.append(ch, style="reverse" if i in marked else "")
        return out
