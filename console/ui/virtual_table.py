"""A table that draws only the rows on screen: the process panel of a real-size node.

Textual's DataTable builds, measures and keeps every row it is given: putting 500 of a
2,000-process node's rows into it took ~250 ms on this machine class (adding them, measuring
every cell on the next idle, rendering), and the key that asked for them (``a``) waited that
long. This table keeps the rows as tuples of ``Text`` cells and renders only the lines in view
(Textual's Line API, ``render_line``): a frame costs what the screen shows, whatever the
table holds. Every row is one line (process rows are: ``literal`` escapes newlines).

What the console needs of a table, and no more: columns, rows by key (``set_rows``: the cursor
stays on the same key), a row cursor (up/down/page/home/end, a click; Enter or a click on the
cursor row selects it), and the same messages' meaning as DataTable's ``RowHighlighted`` and
``RowSelected``. Cells are shown literally (console/ui/text.py ``cells``), never as markup.
"""
from __future__ import annotations

from typing import Any, Callable

from rich.cells import cell_len
from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual import events
from textual.geometry import Size
from textual.message import Message
from textual.scroll_view import ScrollView
from textual.strip import Strip

from console.ui.text import cell, cells as literal_cells
from console.ui import keys

#: blank cells either side of every cell (DataTable's cell padding)
PAD = 1
#: rendered rows kept (scrolling back and forth renders nothing twice)
ROW_CACHE = 512


def cell_width(value: Any) -> int:
    """The cells a value takes on its widest line."""
    text = value.plain if isinstance(value, Text) else str(value)
    return max((cell_len(line) for line in text.split("\n")), default=0)


class VirtualTable(ScrollView, can_focus=True):
    DEFAULT_CSS = """
    VirtualTable {
        background: $surface;
        color: $foreground;
        height: auto;
        max-height: 100%;
        &:focus {
            background-tint: $foreground 5%;
            & > .virtual-table--cursor {
                background: $block-cursor-background;
                color: $block-cursor-foreground;
                text-style: $block-cursor-text-style;
            }
            & > .virtual-table--header {
                background-tint: $foreground 5%;
            }
        }
        & > .virtual-table--header {
            text-style: bold;
            background: $panel;
            color: $foreground;
        }
        &:ansi > .virtual-table--header {
            background: ansi_bright_blue;
            color: ansi_default;
        }
        & > .virtual-table--cursor {
            background: $block-cursor-blurred-background;
            color: $block-cursor-blurred-foreground;
            text-style: $block-cursor-blurred-text-style;
        }
    }
    """
    COMPONENT_CLASSES = {"virtual-table--header", "virtual-table--cursor"}
    BINDINGS = keys.bindings("table-moves") + keys.bindings("tables")

    class RowHighlighted(Message):
        """The cursor came to the row of ``key``."""

        def __init__(self, table: "VirtualTable", key: str) -> None:
            super().__init__()
            self.table = table
            self.key = key

        @property
        def control(self) -> "VirtualTable":
            return self.table

    class RowSelected(RowHighlighted):
        """Enter on the cursor's row (or a click on it)."""

    def __init__(self, *, show_header: bool = True, name: str | None = None, id: str | None = None,
                 classes: str | None = None, disabled: bool = False) -> None:
        super().__init__(name=name, id=id, classes=classes, disabled=disabled)
        self.show_header = show_header
        self._columns: list[tuple[str, Text, int | None]] = []      # (key, label, width)
        #: columns shown only while the last one keeps at least ``last_least`` cells beside them
        self._optional: set[str] = set()
        self.last_least = 0
        self._keys: list[str] = []
        self._payloads: list[Any] = []
        self._make: Callable[[Any], tuple] = tuple
        self._index: dict[str, int] = {}
        self._made: dict[int, tuple] = {}            # row -> its cells, made when first drawn
        self._rendered: dict[tuple, Strip] = {}
        self.cursor_row = 0

    # ------------------------------------------------------------------ what the table holds
    @property
    def header_height(self) -> int:
        return 1 if self.show_header else 0

    @property
    def row_count(self) -> int:
        return len(self._keys)

    @property
    def row_keys(self) -> list[str]:
        """The rows' keys, in order."""
        return list(self._keys)

    @property
    def column_keys(self) -> list[str]:
        return [key for key, _, _ in self._columns]

    def add_column(self, label: Any, *, key: str, width: int | None = None, optional: bool = False) -> str:
        """A column of ``width`` cells (its label's width when None); the last column takes
        what its cells need, cut at the table's edge. ``optional``: shown only while the last
        column keeps ``last_least`` cells with it (``shown_columns``)."""
        label = cell(label)
        self._columns.append((key, label, width if width is not None else cell_width(label)))
        if optional:
            self._optional.add(key)
        self._rendered.clear()
        return key

    def shown_columns(self, width: int | None = None) -> list[int]:
        """The positions of the columns drawn at ``width`` cells (the table's own when None):
        every column, less the optional ones when with them the last column would keep fewer
        than ``last_least`` cells."""
        if width is None:
            width = self.scrollable_content_region.width
        every = list(range(len(self._columns)))
        if not self._optional:
            return every
        used = sum(w + 2 * PAD for _key, _label, w in self._columns[:-1]) + PAD
        if width - used >= self.last_least:
            return every
        return [i for i in every if self._columns[i][0] not in self._optional]

    def get_row_index(self, key: str) -> int:
        return self._index[key]

    def get_row(self, key: str) -> list:
        return list(self._row_cells(self._index[key]))

    def get_cell(self, key: str, column: str) -> Any:
        return self._row_cells(self._index[key])[self.column_keys.index(column)]

    @property
    def selected_key(self) -> str | None:
        return self._keys[self.cursor_row] if 0 <= self.cursor_row < len(self._keys) else None

    def content_lines(self) -> int:
        """Lines that show the whole table: its header and every row."""
        return self.header_height + len(self._keys)

    def set_rows(self, rows: list[tuple[str, Any]], make: Callable[[Any], tuple] = tuple,
                 widths: dict[str, int] | None = None) -> None:
        """The rows, in order: (key, payload) each; ``make(payload)`` gives a row's cells, and
        is called only for the rows drawn; ``widths``: the columns' widths for these rows (at
        least their labels'; the others keep theirs). The cursor stays on its row's key when
        that stays, else keeps its place."""
        if widths:
            self._columns = [(key, label, max(cell_width(label), widths[key]) if key in widths else w)
                             for key, label, w in self._columns]
        selected = self.selected_key
        self._keys = [key for key, _ in rows]
        self._payloads = [payload for _, payload in rows]
        self._make = make
        self._index = {key: i for i, key in enumerate(self._keys)}
        self._made.clear()
        self._rendered.clear()
        self._resize_content(Size(self.scrollable_content_region.width, self.content_lines()))
        row = self._index.get(selected, min(self.cursor_row, max(0, len(self._keys) - 1))) \
            if selected is not None else 0
        self.cursor_row = row
        self._keep_cursor_in_view()
        self.refresh()
        if self.selected_key is not None and self.selected_key != selected:
            self.post_message(self.RowHighlighted(self, self.selected_key))

    def clear(self) -> None:
        self.set_rows([])

    def _resize_content(self, size: Size) -> None:
        """The rows' new extent. Textual lays out the whole screen again for a new virtual size
        (a scroll bar may come or go) and then renders every widget on it, not only this one:
        ~15 ms of a key's frame at 120x36, each time ``a`` turns 20 rows into 2,000. When the
        panel's height is fixed (console/ui/panels.py fits it) and its vertical scroll bar stays
        as it is, nothing else can move: only the scroll bar's thumb changes."""
        if size == self.virtual_size:
            return
        height = self.container_size.height
        bar_stays = (self.show_vertical_scrollbar == (size.height > height)
                     and not self.show_horizontal_scrollbar and size.width == self.virtual_size.width)
        fixed = self.styles.height is not None and self.styles.height.is_cells
        if not (bar_stays and fixed and height > 0):
            self.virtual_size = size
            return
        self.set_reactive(ScrollView.virtual_size, size)
        if self.show_vertical_scrollbar:
            bar = self.vertical_scrollbar
            bar.window_virtual_size = size.height
            bar.refresh()
        self.scroll_y = self.validate_scroll_y(self.scroll_y)

    def _row_cells(self, row: int) -> tuple:
        made = self._made.get(row)
        if made is None:
            made = literal_cells(self._make(self._payloads[row]))
            self._made[row] = made
        return made

    # ------------------------------------------------------------------ the cursor
    def _rows_in_view(self) -> int:
        return max(1, self.scrollable_content_region.height - self.header_height)

    def move_cursor(self, *, row: int, animate: bool = False) -> None:
        if not self._keys:
            self.cursor_row = 0
            return
        row = max(0, min(row, len(self._keys) - 1))
        moved = row != self.cursor_row
        self.cursor_row = row
        self._keep_cursor_in_view()
        self.refresh()
        if moved:
            self.post_message(self.RowHighlighted(self, self._keys[row]))

    def _keep_cursor_in_view(self) -> None:
        top = round(self.scroll_y)
        shown = self._rows_in_view()
        if self.cursor_row < top:
            self.scroll_to(y=self.cursor_row, animate=False, immediate=True)
        elif self.cursor_row >= top + shown:
            self.scroll_to(y=self.cursor_row - shown + 1, animate=False, immediate=True)

    def action_cursor_up(self) -> None:
        self.move_cursor(row=self.cursor_row - 1)

    def action_cursor_down(self) -> None:
        self.move_cursor(row=self.cursor_row + 1)

    def action_page_up(self) -> None:
        self.move_cursor(row=self.cursor_row - self._rows_in_view())

    def action_page_down(self) -> None:
        self.move_cursor(row=self.cursor_row + self._rows_in_view())

    def action_scroll_top(self) -> None:
        self.move_cursor(row=0)

    def action_scroll_bottom(self) -> None:
        self.move_cursor(row=len(self._keys) - 1)

    def action_select_cursor(self) -> None:
        if self.selected_key is not None:
            self.post_message(self.RowSelected(self, self.selected_key))

    async def on_click(self, event: events.Click) -> None:
        offset = event.get_content_offset(self)
        if offset is None or offset.y < self.header_height:
            return
        row = round(self.scroll_y) + offset.y - self.header_height
        if not 0 <= row < len(self._keys):
            return
        if row == self.cursor_row:
            self.action_select_cursor()
        else:
            self.move_cursor(row=row)

    def on_focus(self) -> None:
        self._rendered.clear()
        self.refresh()

    def on_blur(self) -> None:
        self._rendered.clear()
        self.refresh()

    def on_resize(self) -> None:
        self._keep_cursor_in_view()

    # ------------------------------------------------------------------ drawing
    def render_line(self, y: int) -> Strip:
        width = self.scrollable_content_region.width
        base = self.rich_style
        if y < self.header_height:
            return self._strip(tuple(label for _, label, _ in self._columns), width,
                               base + self.get_component_rich_style("virtual-table--header"), ("header",))
        row = round(self.scroll_y) + y - self.header_height
        if not 0 <= row < len(self._keys):
            return Strip.blank(width, base)
        cursor = row == self.cursor_row
        over = self.get_component_rich_style("virtual-table--cursor") if cursor else None
        return self._strip(self._row_cells(row), width, base, (row, cursor), over)

    def _strip(self, values: tuple, width: int, style: Style, key: tuple, over: Style | None = None) -> Strip:
        cache_key = (*key, width, self.has_focus)
        hit = self._rendered.get(cache_key)
        if hit is not None:
            return hit
        console = self.app.console
        segments: list[Segment] = []
        pad = Segment(" " * PAD, style)
        shown = self.shown_columns(width)
        columns = [self._columns[i] for i in shown]
        values = tuple(values[i] for i in shown if i < len(values))
        last = len(columns) - 1
        used = sum(w + 2 * PAD for _key, _label, w in columns[:last]) + PAD
        for j, (value, (_key, _label, w)) in enumerate(zip(values, columns)):
            text = value if isinstance(value, Text) else cell(value)
            if j == last and text.cell_len > width - used > 0:
                # cut at the table's edge with "…", so a cut line says it was cut
                text = text.copy()
                text.truncate(width - used, overflow="ellipsis")
            if text.spans:
                line = list(Segment.apply_style(text.render(console), style))
            else:                   # Text.render leaves out the text's own style when it has no spans
                line = [Segment(text.plain, style + console.get_style(text.style, default=Style.null()))]
            segments.append(pad)
            if j < last:
                segments.extend(Segment.adjust_line_length(line, w, style=style))
                segments.append(pad)
            else:
                segments.extend(line)
        if over is not None:
            segments = list(Segment.apply_style(segments, post_style=over))
        strip = Strip(segments).crop_extend(0, width, over if over is not None else style)
        if len(self._rendered) >= ROW_CACHE:
            self._rendered.clear()
        self._rendered[cache_key] = strip
        return strip
