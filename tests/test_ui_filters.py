"""`/` filters the table in focus (the node table's nodes, else the processes, as on the fleet
table); a filter that hides what matters says so in its panel's title; `esc` clears the filter of
the panel in focus, or, where that has none, the one that is set. Driven as a person would."""
import pytest

import conftest

pytest.importorskip("textual")

from console.clock import FakeClock  # noqa: E402
from console.sources.sim import SimSource  # noqa: E402
from console.ui.app import IncidentApp  # noqa: E402

wait_for = conftest.wait_for


def nodes_app() -> IncidentApp:
    sources = [SimSource(name=f"gpu{i:02d}", scenario="seed" if i < 4 else "graceful", clock=FakeClock())
               for i in range(1, 7)]
    return IncidentApp(sources)


def plain(title) -> str:
    """A border title as the screen shows it (Textual keeps it as markup)."""
    from rich.text import Text
    return Text.from_markup(str(title)).plain if title is not None else ""


async def type_filter(pilot, text: str) -> None:
    from console.ui.prompts import TextPrompt
    await pilot.press("slash")
    await wait_for(pilot, lambda: isinstance(pilot.app.screen, TextPrompt))
    await pilot.press(*text, "enter")
    await wait_for(pilot, lambda: not isinstance(pilot.app.screen, TextPrompt))


async def test_slash_on_the_node_table_filters_nodes_and_esc_there_clears_it():
    app = nodes_app()
    async with app.run_test(size=(100, 30)) as pilot:
        await wait_for(pilot, lambda: len(app.snapshots) == 6)
        assert app.focused is app.query_one("#nodes")
        await type_filter(pilot, "gpu0")         # gpu01 … gpu06 all match: nothing hidden
        await type_filter(pilot, "05")
        await wait_for(pilot, lambda: app.query_one("#nodes").row_count == 1)
        assert app.proc_filter == "" and app.node_filter == "05"     # the processes are not filtered
        assert app.current_node == "gpu05"
        sub = plain(app.query_one("#nodes").border_subtitle)
        assert "nodes: 1 of 6 match “05” — 5 hidden, 5 with a next step (esc clears)" == sub, sub
        await pilot.press("escape")
        await wait_for(pilot, lambda: app.query_one("#nodes").row_count == 6)
        assert app.node_filter == "" and app.query_one("#nodes").border_subtitle is None
        assert "node filter cleared" in app.activity.latest.text


async def test_a_process_filter_that_hides_the_holders_says_so_and_esc_elsewhere_clears_it():
    app = nodes_app()
    async with app.run_test(size=(100, 30)) as pilot:
        await wait_for(pilot, lambda: len(app.snapshots) == 6 and app.query_one("#procs").row_count > 3)
        app.query_one("#procs").focus()
        await type_filter(pilot, "sshd")         # none of the seed's holders is sshd
        procs = app.query_one("#procs")
        await wait_for(pilot, lambda: "hides" in plain(procs.border_title))
        assert plain(procs.border_title).startswith("processes: filter “sshd” hides 9 GPU holders (esc clears) · 0 GPU-related")
        # esc on the node table, which has no filter of its own: the one set goes
        app.query_one("#nodes").focus()
        await pilot.press("escape")
        await wait_for(pilot, lambda: app.proc_filter == "" and "hides" not in plain(procs.border_title))
        assert "process filter cleared" in app.activity.latest.text
