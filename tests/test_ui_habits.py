"""Keys people already know (htop's F-keys, k9s's `:`) work here, and a key another tool taught
that is no key here says in one line which key does that job; under --read-only, `x` says its
step would be refused instead of offering to run it, and tagging is not offered. Driven as a
person would (Textual pilot) on the simulator."""
import pytest

import conftest

pytest.importorskip("textual")

from console.clock import FakeClock  # noqa: E402
from console.incident import timeline  # noqa: E402
from console.sources.sim import SimSource  # noqa: E402
from console.ui.app import IncidentApp  # noqa: E402

wait_for = conftest.wait_for


def said(app) -> str:
    latest = app.activity.latest
    return latest.text if latest else ""


def seed_app(**kw) -> IncidentApp:
    return IncidentApp([SimSource(name="demo", scenario="seed", clock=FakeClock())], **kw)


def pids(app) -> list[int]:
    procs = app.query_one("#procs")
    return [int(k.rsplit(":", 1)[1]) for k in procs._keys if ":" in k]


async def test_htops_f_keys_help_filter_tree_order_and_ks9s_colon_palette():
    from console.ui.app import HelpScreen
    from console.ui.order_menu import OrderMenu
    from console.ui.prompts import TextPrompt
    app = seed_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_for(pilot, lambda: app.query_one("#procs").row_count > 3)
        await pilot.press("f1")
        await wait_for(pilot, lambda: isinstance(app.screen, HelpScreen))
        await pilot.press("escape")
        for key in ("f3", "f4"):
            await pilot.press(key)
            await wait_for(pilot, lambda: isinstance(app.screen, TextPrompt))
            await pilot.press("escape")
            await wait_for(pilot, lambda: not isinstance(app.screen, TextPrompt))
        tree = pids(app)
        await pilot.press("f5")                  # the tree is the start: F5 goes flat, by GPU memory
        await wait_for(pilot, lambda: app.proc_sort == "memory" and pids(app) != tree)
        await pilot.press("f5")
        await wait_for(pilot, lambda: app.proc_sort == "tree" and pids(app) == tree)
        await pilot.press("f6")
        await wait_for(pilot, lambda: isinstance(app.screen, OrderMenu))
        await pilot.press("down", "down", "down", "down", "enter")   # tree, memory, -memory, pid, -pid
        await wait_for(pilot, lambda: app.proc_sort == "-pid")
        assert pids(app) == sorted(pids(app), reverse=True) and "by PID, reversed" in said(app)
        assert "by PID, reversed (o, F6)" in str(app.query_one("#procs").border_title)
        await pilot.press("colon")
        await wait_for(pilot, lambda: "CommandPalette" in type(app.screen).__name__)
        await pilot.press("escape")


async def test_a_key_another_tool_taught_says_which_key_does_that_job_here():
    app = seed_app(keymap={"filter": "u,slash"})          # a remap: the hints name the key as remapped
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_for(pilot, lambda: app.query_one("#procs").row_count > 3)
        for key, line in (("j", "j (vim's down): here ↓ moves down (k is SIGKILL on the process panel)"),
                          ("backslash", "\\ (htop's filter): here u filters the table in focus"),
                          ("f2", "F2 (htop's setup): no setup screen: remap keys in the config file's [keys]"),
                          ("M", "M (htop's order by memory): here F6 chooses the order: GPU memory first")):
            await pilot.press(key)
            await wait_for(pilot, lambda: said(app).startswith(line), describe=lambda a: said(a))
            assert app.screen is app.screen_stack[0]            # nothing opened, nothing acted on
        from console.ui.prompts import TextPrompt
        await pilot.press("u")                   # bound now (the remap): it filters, says nothing of htop
        await wait_for(pilot, lambda: isinstance(app.screen, TextPrompt))
        await pilot.press("escape")


async def test_read_only_x_says_the_step_would_be_refused_and_space_is_not_offered(incident_dir):
    from textual.widgets._footer import FooterKey

    from console.ui.app import HelpScreen
    from console.ui.confirm import ConfirmScreen
    tl = timeline.open_incident(incident_dir)
    app = seed_app(timeline=tl, read_only=True)
    async with app.run_test(size=(100, 30)) as pilot:
        await wait_for(pilot, lambda: app.query_one("#procs").row_count > 3 and "demo" in app.snapshots)
        await wait_for(pilot, lambda: app.screen.query(FooterKey))
        assert "Tag" not in {fk.description for fk in app.screen.query(FooterKey)}
        await pilot.press("space")
        await pilot.pause()
        assert not app.tagged
        await pilot.press("x")
        await wait_for(pilot, lambda: said(app).startswith("READ-ONLY: the next step would be refused"))
        assert "$ kill -s TERM 72169 72230" in said(app) and "nothing runs" in said(app)
        assert not isinstance(app.screen, ConfirmScreen) and not any(e.kind == "action" for e in tl.entries)
        await pilot.press("question_mark")
        await wait_for(pilot, lambda: isinstance(app.screen, HelpScreen))
        assert "tag/untag" not in conftest.screen_text(app)
