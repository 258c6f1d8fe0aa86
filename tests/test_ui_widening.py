"""A cell rewrapped for a wider column shows at the new width, even when a frame was drawn
between the update and the widening (console/ui/widening_table.py)."""
from __future__ import annotations

import pytest

pytest.importorskip("textual")

from rich.text import Text  # noqa: E402
from textual.app import App, ComposeResult  # noqa: E402

from console.ui.text import LiteralTable  # noqa: E402

NARROW = "INFO     PID 72169 (python3 -m sglang…)\n       → SIGTERM PID 72169"
WIDE = ("INFO     PID 72169 (python3 -m sglang.launch_server --model-path moonshotai/K…)\n"
        "       → SIGTERM PID 72169 and its 8 GPU processes if this memory must come back")


class OneTable(App):
    def compose(self) -> ComposeResult:
        yield LiteralTable(id="t", show_header=False)


def lines(table, n: int) -> list[str]:
    return [table.render_line(y).text.strip() for y in range(n)]


async def rewrapped(pilot, *, more: str | None = None) -> list[str]:
    """The narrow finding drawn, then rewrapped wider (and ``more`` added), a frame drawn before
    the idle that widens the column; the first lines on screen after that idle."""
    table = pilot.app.query_one(LiteralTable)
    table.add_column("Finding", key="f")
    table.add_row(Text(NARROW), key="a", height=None)
    table.add_row(Text("LOW      reset blockers"), key="b", height=None)
    await pilot.pause()
    assert lines(table, 3)[0].endswith("sglang…)")
    table.update_cell("a", "f", Text(WIDE), update_width=True)
    if more is not None:
        table.add_row(Text(more), key="c", height=None)
    lines(table, 3)
    await pilot.pause()
    await pilot.pause()
    return lines(table, 4)


async def test_a_finding_rewrapped_wider_is_not_left_cut_at_the_old_width():
    async with OneTable().run_test(size=(120, 10)) as pilot:
        shown = await rewrapped(pilot)
        assert shown[0].endswith("moonshotai/K…)"), shown
        assert shown[1].endswith("must come back"), shown
        assert shown[2].startswith("LOW"), shown


async def test_a_new_wider_row_widens_what_was_drawn_before_it():
    async with OneTable().run_test(size=(120, 10)) as pilot:
        shown = await rewrapped(pilot, more="x" * 100)
        assert shown[0].endswith("moonshotai/K…)") and shown[1].endswith("must come back"), shown
        assert shown[3] == "x" * 100, shown
