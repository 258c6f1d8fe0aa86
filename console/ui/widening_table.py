"""A DataTable whose cells are drawn again when a column widens.

Textual 8's DataTable widens a column on idle (``_update_column_widths`` for an updated cell,
``_update_dimensions`` for a new row), but its cell cache is keyed without the column's width:
a frame drawn between ``update_cell`` and that idle keeps the cell as it was wrapped at the
old width. On screen, a finding rewrapped for a wider pane stayed cut over two lines, its next
step pushed out of the row ("INFO PID 72169 (python3 -m sglang.launch_server --model-path" over
"moonshotai/K…"), until something else changed in the table. Here, when the widths come out
of an idle different, the caches go and the rows of measured height are measured again.
tests/test_ui_widening.py draws such a frame and reads the line afterwards.
"""
from __future__ import annotations

from typing import Any, Iterable

from textual.widgets import DataTable


class WideningTable(DataTable):
    _widths_before: tuple[int, ...] | None = None

    def _widths(self) -> tuple[int, ...]:
        return tuple(c.content_width for c in self.columns.values())

    def _update_column_widths(self, updated_cells: Any) -> None:
        if self._widths_before is None:
            self._widths_before = self._widths()
        super()._update_column_widths(updated_cells)

    def _update_dimensions(self, new_rows: Iterable[Any]) -> None:
        before = self._widths_before if self._widths_before is not None else self._widths()
        self._widths_before = None
        super()._update_dimensions(new_rows)
        if self._widths() == before:
            return
        self._clear_caches()
        self._update_count += 1                 # the row and line caches are keyed by it
        measured = [key for key, row in self.rows.items() if row.auto_height]
        if measured:
            super()._update_dimensions(measured)
        self.refresh()
