"""Keys belong to the panel they act on (console/ui/keys.py scopes), and the habits of htop,
btop and k9s hold: Home/End, F10, F9's signal menu, space that tags and moves down. Driven as
a user would (Textual pilot) against the simulator."""
import pytest

import conftest

pytest.importorskip("textual")

from console.clock import FakeClock  # noqa: E402
from console.incident import timeline  # noqa: E402
from console.sources.sim import SimSource  # noqa: E402
from console.ui import keys, tables  # noqa: E402
from console.ui.app import IncidentApp  # noqa: E402


wait_for = conftest.wait_for


def said(app) -> str:
    latest = app.activity.latest
    return latest.text if latest else ""


def seed_app(scenario="seed", **kw) -> IncidentApp:
    return IncidentApp([SimSource(name="demo", scenario=scenario, clock=FakeClock())], **kw)


async def test_k_on_the_findings_panel_acts_on_nothing_and_says_where_it_belongs(incident_dir):
    from console.ui.confirm import ConfirmScreen
    tl = timeline.open_incident(incident_dir)
    app = seed_app(timeline=tl)
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_for(pilot, lambda: app.query_one("#procs").row_count > 3 and app.query_one("#findings").row_count)
        app.query_one("#findings").focus()
        for key, where in (("k", "process panel"), ("t", "process panel"), ("space", "process panel"),
                           ("F", "GPU panel"), ("R", "GPU panel"), ("B", "GPU panel")):
            await pilot.press(key)
            await pilot.pause()
            assert not isinstance(app.screen, ConfirmScreen), key
            assert f"works on the {where}: tab there first. Nothing was sent." in said(app), (key, said(app))
        assert not app.tagged and not any(e.kind == "action" for e in tl.entries)
        # GPU keys on the process panel say so too; on the GPU panel they plan (Confirm names the targets)
        app.query_one("#procs").focus()
        await pilot.press("F")
        await pilot.pause()
        assert not isinstance(app.screen, ConfirmScreen) and "works on the GPU panel" in said(app)
        app.query_one("#gpus").focus()
        await pilot.press("F")
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmScreen))
        assert "SIGKILL 1 holder of GPU 0" in app.screen.text and "72230" in app.screen.text
        await pilot.press("escape")


async def test_the_footer_shows_the_keys_of_the_panel_in_focus():
    from textual.widgets._footer import FooterKey
    app = seed_app()
    async with app.run_test(size=(120, 36)) as pilot:
        await wait_for(pilot, lambda: app.query_one("#procs").row_count > 0)

        def footer() -> set[str]:
            return {fk.description for fk in app.screen.query(FooterKey)}
        await wait_for(pilot, lambda: {"TERM", "KILL", "Tag"} <= footer())
        assert "Kill holders" not in footer()
        app.query_one("#gpus").focus()
        await wait_for(pilot, lambda: {"Kill holders", "Reset GPU", "Clear blockers"} <= footer())
        assert "TERM" not in footer()
        app.query_one("#findings").focus()
        await wait_for(pilot, lambda: "Next step" in footer() and "TERM" not in footer())


async def test_a_window_opened_and_closed_leaves_the_footer_as_it_was_without_composing_it_again():
    """Textual composes a footer again whenever its screen's keys are announced, and a window
    opened over the screen and closed announces them twice: each time every key was mounted
    anew and the whole screen laid out (about half of what opening the check picker cost). The
    footer now composes only when what it shows changes; a focus move still changes it."""
    from textual.widgets import OptionList
    from textual.widgets._footer import FooterKey
    app = seed_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_for(pilot, lambda: app.query_one("#procs").row_count > 0 and app.screen.query(FooterKey))
        await pilot.pause()
        before = list(app.screen.query(FooterKey))
        for _ in range(2):
            await pilot.press("c")
            await wait_for(pilot, lambda: app.screen.query(OptionList))
            await pilot.press("escape")
            await wait_for(pilot, lambda: not app.screen.query(OptionList) and app.screen.query(FooterKey))
            await pilot.pause()
        assert list(app.screen.query(FooterKey)) == before          # the same widgets: not composed again
        app.query_one("#gpus").focus()
        await wait_for(pilot, lambda: "Reset GPU" in {fk.description for fk in app.screen.query(FooterKey)})


async def test_x_on_the_findings_panel_does_the_highlighted_findings_step_through_confirm():
    from console.ui.confirm import ConfirmScreen
    app = seed_app("renamed-workers")
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_for(pilot, lambda: "demo" in app.snapshots and app.query_one("#findings").row_count)
        app.query_one("#findings").focus()
        await pilot.press("home", "x")
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmScreen))
        assert "$ kill -s TERM 41388 41403 41451 41499 41547" in app.screen.text
        await pilot.press("n")


async def test_home_and_end_go_to_the_first_and_last_row():
    app = seed_app()
    async with app.run_test(size=(80, 24)) as pilot:
        procs = app.query_one("#procs")
        await wait_for(pilot, lambda: procs.row_count == 10)
        await pilot.press("end")
        await pilot.pause()
        assert procs.cursor_row == 9 and app.selected_process_key == "demo:1563"
        await pilot.press("home")
        await pilot.pause()
        assert procs.cursor_row == 0 and app.selected_process_key == "demo:72169"
        app.query_one("#gpus").focus()
        await pilot.press("end")
        await pilot.pause()
        assert app.selected_gpu == 7


async def test_f10_quits():
    app = seed_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_for(pilot, lambda: "demo" in app.snapshots)
        await pilot.press("f10")
        await wait_for(pilot, lambda: not app.is_running)
    assert app.return_code == 0


async def test_space_tags_moves_down_and_says_so():
    app = seed_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_for(pilot, lambda: app.query_one("#procs").row_count == 10)
        await pilot.press("home", "space")
        await pilot.pause()
        assert app.tagged == {"demo:72169"} and app.selected_process_key == "demo:72230"
        assert said(app) == ("tagged PID 72169 (1 tagged: t, k and F9 act on them); "
                             "the cursor moved down to PID 72230")
        await pilot.press("up", "space")
        await pilot.pause()
        assert not app.tagged and said(app).startswith("untagged PID 72169 (0 tagged")


async def test_f9_offers_every_signal_sigterm_first_and_sends_the_choice_through_confirm(incident_dir):
    from textual.widgets import OptionList

    from console.actions.ladder import SIGNALS
    from console.ui.confirm import ConfirmScreen
    from console.ui.signal_menu import SignalMenu
    tl = timeline.open_incident(incident_dir)
    src = SimSource(name="demo", scenario="graceful", clock=FakeClock())
    app = IncidentApp([src], timeline=tl)
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_for(pilot, lambda: app.selected_process_key == "demo:65163")     # the top holder
        await pilot.press("f9")
        await wait_for(pilot, lambda: isinstance(app.screen, SignalMenu))
        menu = app.screen.query_one(OptionList)
        offered = [menu.get_option_at_index(i).id for i in range(menu.option_count)]
        assert offered == list(SIGNALS) and offered[0] == "TERM" and menu.highlighted == 0
        await pilot.press("down", "down", "enter")                                    # SIGHUP
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmScreen))
        assert "SIGHUP 1 process on demo" in app.screen.text and "$ kill -s HUP 65163" in app.screen.text
        await pilot.press("y")
        await wait_for(pilot, lambda: any(e.outcome for e in tl.entries), tries=1000)
        action = [e for e in tl.entries if e.kind == "action"][-1]
        assert action.command == "kill -s HUP 65163" and action.targets[0]["start_ticks"]
        assert any("kill -s HUP 65163" in script or "kill -HUP" in script for _, script in src.node.history)
        # escape in the menu sends nothing
        await pilot.press("f9")
        await wait_for(pilot, lambda: isinstance(app.screen, SignalMenu))
        await pilot.press("escape")
        await pilot.pause()
        assert len([e for e in tl.entries if e.kind == "action"]) == 1


def test_every_key_is_declared_once_and_help_lists_each_with_its_scope():
    ids = [k.id for k in keys.KEYS]
    assert len(ids) == len(set(ids))
    rows = keys.help_rows()
    headings = [what for key, what in rows if not key]
    assert headings[:5] == ["on the process panel", "on the GPU panel", "on the findings panel", "everywhere",
                            "on every table"]
    listed = [key for key, _ in rows if key]
    main = [k for k in keys.KEYS if k.scope in keys.MAIN_SCOPES]        # the other screens' keys: on those
    for k in main:
        assert ((keys.key_of(k.id), k.help) in rows) != k.fleet_only     # the fleet's keys: in fleet mode only
    assert "q/F10" in listed and "F9" in listed and "home" in listed
    fleet = keys.help_rows(fleet=True)
    assert [what for key, what in fleet if not key][:2] == ["on the fleet table", "on the process panel"]
    for k in main:
        assert (keys.key_of(k.id), k.help) in fleet


def test_the_footer_keeps_help_and_quit_and_drops_the_least_important_first():
    from console.ui.footer import fitted
    items = [(1, 8), (1, 8), (2, 11), (3, 14), (0, 8), (0, 8)]
    assert fitted(items, 200) == set(range(6))
    assert fitted(items, 43) == {0, 1, 2, 4, 5} and fitted(items, 42) == {0, 1, 4, 5}
    assert fitted(items, 10) == {4, 5}                     # help and quit, however narrow


def test_the_node_tables_finding_names_the_next_step_and_its_gib():
    import asyncio

    from console.monitor import diagnosed
    snap = diagnosed(asyncio.run(SimSource(name="demo", scenario="seed", clock=FakeClock()).poll()))
    assert [f.kind for f in snap.findings][:1] == ["reset-blocker"]           # the most severe is low…
    assert str(tables.finding_cell(snap)) == "info holder 594.6 GiB → sigterm"   # …the step is the holder's


async def test_help_scrolls_with_page_keys_home_and_end_at_80x24():
    from console.ui.app import HelpScreen
    app = seed_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_for(pilot, lambda: "demo" in app.snapshots)
        await pilot.press("question_mark")
        await wait_for(pilot, lambda: isinstance(app.screen, HelpScreen))
        box = app.screen.query_one("#help-box")
        await wait_for(pilot, lambda: box.max_scroll_y > 0)          # taller than 24 lines
        await pilot.press("pagedown")
        await wait_for(pilot, lambda: box.scroll_y > 0)
        await pilot.press("end")
        await wait_for(pilot, lambda: box.scroll_y == box.max_scroll_y)
        await pilot.press("pageup", "home")
        await wait_for(pilot, lambda: box.scroll_y == 0)
        await pilot.press("escape")


async def test_x_anywhere_takes_the_nodes_next_step_and_the_findings_list_it_first():
    """The first screen of the seed: the process panel has focus; x there offers the node's next
    step (SIGTERM of the job, through Confirm), the same step the findings panel lists first."""
    from console.ui.confirm import ConfirmScreen
    app = seed_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_for(pilot, lambda: app.query_one("#findings").row_count >= 2)
        assert app.focused is app.query_one("#procs")
        first = tables.selected_key(app.query_one("#findings"))
        snap = app.snapshots["demo"]
        assert first == tables.finding_key(next(f for f in snap.findings if f.rung is not None)), \
            "the step x takes is the first finding listed"
        await pilot.press("x")
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmScreen))
        assert "SIGTERM 9 processes" in app.screen.text and "x: the next step of demo: holder" in said(app)
        await pilot.press("n")


async def test_escape_clears_the_process_filter_and_ctrl_c_says_how_to_quit_in_words():
    app = seed_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_for(pilot, lambda: app.query_one("#procs").row_count > 3)
        app.proc_filter = "TP3"
        app.refresh_node_view()
        await pilot.pause()
        assert app.query_one("#procs").row_count < 5
        await pilot.press("escape")
        await wait_for(pilot, lambda: app.proc_filter == "" and app.query_one("#procs").row_count > 3)
        assert "process filter cleared" in said(app)
        await pilot.press("ctrl+c")
        await pilot.pause()
        assert app.is_running and said(app) == "ctrl+c does not quit here: press q (or ctrl+q) to quit"
        assert "[b]" not in said(app)


async def test_brackets_step_through_the_nodes_from_any_panel():
    sources = [SimSource(name=n, scenario="graceful", clock=FakeClock()) for n in ("gpu01", "gpu02", "gpu03")]
    app = IncidentApp(sources)
    async with app.run_test(size=(100, 30)) as pilot:
        await wait_for(pilot, lambda: len(app.snapshots) == 3)
        app.query_one("#procs").focus()
        order = app.query_one("#nodes").row_keys
        start = app.current_node
        await pilot.press("right_square_bracket")
        await wait_for(pilot, lambda: app.current_node != start)
        assert app.current_node == order[(order.index(start) + 1) % 3]
        await pilot.press("left_square_bracket", "left_square_bracket")
        await wait_for(pilot, lambda: app.current_node == order[(order.index(start) - 1) % 3])
        assert app.focused is app.query_one("#procs"), "the panel in use keeps the focus"


def test_every_screens_keys_come_from_the_one_registry():
    """No screen or widget declares a key of its own (console/ui/keys.py is the one table): so a
    [keys] remap reaches Confirm, the prompts, replay and follow too, and each key has an id."""
    import re
    from pathlib import Path
    ui = Path(keys.__file__).parent
    own = {p.name: len(re.findall(r"\bBinding\(", p.read_text())) for p in ui.glob("*.py") if p.name != "keys.py"}
    assert {name: n for name, n in own.items() if n} == {"mirror_view.py": 2}, own   # built from keys.KEYS there
    for scope in ("confirm", "details", "prompt", "verdict", "signal-menu", "help", "replay", "follow",
                  "table-moves"):
        bound = keys.bindings(scope)
        assert bound and all(b.id for b in bound), scope
    assert {"confirm-yes", "confirm-cancel", "replay-next", "follow-tail"} <= keys.ids()
