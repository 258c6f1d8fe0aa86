"""The process panel's table (console/ui/virtual_table.py): it makes and draws only the rows on
screen, keeps the cursor on its row's key while the rows change, and shows cells literally."""
from __future__ import annotations

from textual.app import App, ComposeResult

from console.ui.virtual_table import VirtualTable


class Holder(App):
    def __init__(self) -> None:
        super().__init__()
        self.made: list[int] = []
        self.selected: list[str] = []
        self.highlighted: list[str] = []

    def compose(self) -> ComposeResult:
        yield VirtualTable(id="t")

    def on_mount(self) -> None:
        table = self.query_one(VirtualTable)
        table.styles.height = 12
        table.add_column("PID", key="pid", width=6)
        table.add_column("Name", key="name")
        table.focus()

    def fill(self, pids, name=lambda pid: f"proc-{pid}") -> None:
        def make(pid):
            self.made.append(pid)
            return (str(pid), name(pid))
        self.query_one(VirtualTable).set_rows([(f"n:{pid}", pid) for pid in pids], make)

    def on_virtual_table_row_selected(self, event: VirtualTable.RowSelected) -> None:
        self.selected.append(event.key)

    def on_virtual_table_row_highlighted(self, event: VirtualTable.RowHighlighted) -> None:
        self.highlighted.append(event.key)


def screen_text(app: App) -> str:
    table = app.query_one(VirtualTable)
    return "\n".join(table.render_line(y).text for y in range(table.size.height))


async def test_twenty_thousand_rows_make_only_the_rows_on_screen():
    app = Holder()
    async with app.run_test(size=(60, 20)) as pilot:
        app.fill(range(1, 20_001))
        await pilot.pause()
        table = app.query_one(VirtualTable)
        assert table.row_count == 20_000 and table.content_lines() == 20_001
        assert 0 < len(set(app.made)) <= 12, "only the rows in view are made"
        assert "proc-1" in screen_text(app) and "proc-500" not in screen_text(app)
        await pilot.press("end")
        await pilot.pause()
        assert table.selected_key == "n:20000" and "proc-20000" in screen_text(app)
        assert len(set(app.made)) <= 30, "the end of the table made only what it shows"
        await pilot.press("pageup")
        await pilot.pause()
        assert table.cursor_row < 19_999 - 5
        await pilot.press("home")
        await pilot.pause()
        assert table.selected_key == "n:1" and app.highlighted[-1] == "n:1"


async def test_the_cursor_stays_on_its_process_when_rows_come_and_go():
    app = Holder()
    async with app.run_test(size=(60, 20)) as pilot:
        app.fill([10, 20, 30, 40])
        await pilot.pause()
        await pilot.press("down", "down")
        table = app.query_one(VirtualTable)
        assert table.selected_key == "n:30"
        app.fill([5, 7, 10, 30, 40])               # two new above it, one gone
        await pilot.pause()
        assert table.selected_key == "n:30" and table.cursor_row == 3
        app.fill([5, 7])                           # its row went: the cursor keeps its place
        await pilot.pause()
        assert table.selected_key == "n:7"
        await pilot.press("enter")
        await pilot.pause()
        assert app.selected == ["n:7"]


async def test_a_click_moves_the_cursor_and_a_click_on_it_selects():
    app = Holder()
    async with app.run_test(size=(60, 20)) as pilot:
        app.fill([1, 2, 3])
        await pilot.pause()
        table = app.query_one(VirtualTable)
        await pilot.click(VirtualTable, offset=(2, 3))        # the header, then rows 1, 2, 3
        await pilot.pause()
        assert table.selected_key == "n:3" and not app.selected
        await pilot.click(VirtualTable, offset=(2, 3))
        await pilot.pause()
        assert app.selected == ["n:3"]


async def test_markup_and_escape_codes_in_a_name_show_literally():
    app = Holder()
    async with app.run_test(size=(60, 20)) as pilot:
        app.fill([1], name=lambda pid: "[bold]x[/bold] [@click=app.quit]q \x1b[31mred")
        await pilot.pause()
        text = screen_text(app)
        assert "[bold]x[/bold] [@click=app.quit]q \\x1b[31mred" in text, text
        app.fill([1], name=lambda pid: "plain")
        await pilot.pause()
        assert app.is_running


async def test_growing_from_a_screenful_to_thousands_lays_out_nothing_and_scrolls_to_the_end():
    """`a` on a real-size node: 40 rows become 2,000. The panel's height is fixed and its scroll
    bar stays, so the screen is not laid out again (a whole-screen render); the scroll bar and
    the end of the table still follow the new rows, and shrinking back keeps the view valid."""
    app = Holder()
    async with app.run_test(size=(60, 20)) as pilot:
        app.fill(range(1, 41))
        await pilot.pause()
        app.fill(range(2, 42))            # the scroll bar took its columns: the rows' width is settled
        await pilot.pause()
        table = app.query_one(VirtualTable)
        assert table.show_vertical_scrollbar
        layouts: list[bool] = []
        real_refresh = table.refresh

        def refresh(*args, layout=False, **kw):
            layouts.append(layout)
            return real_refresh(*args, layout=layout, **kw)
        table.refresh = refresh
        app.fill(range(1, 2001))
        await pilot.pause()
        assert layouts and not any(layouts), "the rows grew without a new layout of the screen"
        assert table.vertical_scrollbar.window_virtual_size == table.content_lines()
        await pilot.press("end")
        await pilot.pause()
        assert table.selected_key == "n:2000" and "proc-2000" in screen_text(app)
        app.fill(range(1, 41))            # back to a screenful and a bit: the end is row 40
        await pilot.pause()
        assert table.selected_key == "n:40" and "proc-40" in screen_text(app)
        assert table.scroll_y <= table.max_scroll_y
        app.fill(range(1, 4))             # the scroll bar goes: laid out as before
        await pilot.pause()
        assert any(layouts) and "proc-1" in screen_text(app) and not table.show_vertical_scrollbar
