"""A DataTable whose columns widen the moment a wider cell arrives, not on the next idle.

Textual 8's DataTable widens a column on idle, after the cell was put in, but its cell and line
caches are keyed without the column's width: a frame drawn between ``update_cell`` (or
``add_row``) and that idle keeps the cell as it was wrapped at the old width. On screen, a
finding rewrapped for a wider pane stayed cut over two lines, its next step pushed out of the
row ("INFO PID 72169 (python3 -m sglang.launch_server --model-path" over "moonshotai/K…"),
until something else changed in the table.

Here the column is widened first, through its public ``Column.content_width``, measured as
Textual measures it (``textual.render.measure`` of the cell, which DataTable draws as given
when it is a renderable: every LiteralTable cell is a ``Text``); then the cell goes in, and
that bumps the caches' key, so the next frame draws it at the new width. The idle then measures
the same width and changes nothing. Columns widen, never narrow, on an update (as
console/ui/tables.py ``_wider`` asks): Textual narrows only after measuring the whole column on
idle, which is again a width change behind a drawn frame. tests/test_ui_widening.py draws such
a frame and reads the line afterwards.
"""
from __future__ import annotations

from typing import Any

from rich.protocol import is_renderable
from textual.render import measure
from textual.widgets import DataTable
from textual.widgets.data_table import Column


def measured_here(value: Any) -> bool:
    """A cell DataTable draws as given (a renderable), so measured here as Textual will; a
    string is markup, and a number or None is formatted: Textual measures those itself."""
    return not isinstance(value, str) and is_renderable(value)


class WideningTable(DataTable):
    def widen_for(self, column: Column | None, value: Any) -> bool:
        """Widen the column to ``value``'s width when it is wider. True when it widened."""
        if column is None or not column.auto_width or not measured_here(value):
            return False
        width = measure(self.app.console, value, 1)
        if width <= column.content_width:
            return False
        column.content_width = width
        return True

    def update_cell(self, row_key: Any, column_key: Any, value: Any, *, update_width: bool = False) -> None:
        if update_width and measured_here(value):
            # Textual re-measures the cell on idle only where it widened (for the table's size):
            # a narrower value keeps the column's width
            update_width = self.widen_for(self.columns.get(column_key), value)
        super().update_cell(row_key, column_key, value, update_width=update_width)

    def add_row(self, *cells: Any, height: int | None = 1, key: str | None = None,
                label: Any = None) -> Any:
        for column, value in zip(self.ordered_columns, cells):
            self.widen_for(column, value)
        return super().add_row(*cells, height=height, key=key, label=label)
