"""Two people, one incident: the driving console writes its live state, `follow ID --live` shows
the same panels read-only beside the incident's entries, and no key there changes anything."""
from __future__ import annotations

import hashlib
import os
import string

import pytest

pytest.importorskip("textual")

from console.clock import FakeClock  # noqa: E402
from console.incident import timeline  # noqa: E402
from console.incident.mirror import (WANT_SUFFIX, ask_for_state, read_state, read_states, state_path,  # noqa: E402
                                     want_path)
from console.sources.sim import SimSource  # noqa: E402
from console.ui.app import IncidentApp  # noqa: E402
from console.ui.mirror_view import LiveFollowApp  # noqa: E402
from conftest import screen_text, wait_for  # noqa: E402


async def drive(incident_dir, scenario="seed", *, act=None):
    """A driving console on a simulated node: one poll, its live state written; ``act`` (the
    pilot, the app) does something first. Returns the incident file and the node."""
    tl = timeline.open_incident(incident_dir, "pair", by="alice@bastion")
    source = SimSource(name="demo", scenario=scenario, clock=FakeClock())
    app = IncidentApp([source], timeline=tl, autostart=False)
    async with app.run_test(size=(120, 36)) as pilot:
        await app.monitors[0].poll_once()
        await wait_for(pilot, lambda: "demo" in app.snapshots)
        if act is not None:
            await act(pilot, app)
        await pilot.press("q")             # quitting writes the last state, marked stopped
    tl.close()
    return tl.path, source


def files(directory) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(directory.iterdir())}


async def test_the_driving_console_writes_its_live_state_beside_the_incident(incident_dir):
    path, _ = await drive(incident_dir)
    state = read_states(state_path(path))
    assert state.incident == "pair" and state.by == "alice@bastion" and state.viewing == "demo"
    node = state.node("demo")
    assert [g.memory_used_mib for g in node.gpus][:2] == [76109, 76113]
    assert {f.kind for f in node.findings} >= {"holder", "reset-blocker"}
    assert state.memory["demo"]["points"], "the memory trail travels with it"


async def test_follow_live_shows_the_same_panels_and_entries_read_only(incident_dir):
    async def hypothesis(pilot, app):
        app.incident.hypothesis("demo", "SIGKILL of the schedulers frees GPUs 0-7")
    path, _ = await drive(incident_dir, act=hypothesis)
    app = LiveFollowApp(str(path), str(state_path(path)), poll_interval=0.05)
    async with app.run_test(size=(120, 36)) as pilot:
        await wait_for(pilot, lambda: app.query_one("#gpus").row_count == 8 and app.table.row_count >= 2)
        text = screen_text(app)
        assert "76109MiB / 97887MiB" in text                                  # the GPU table
        assert "sglang::scheduler_TP0" in text                                # the process tree
        assert "reset blockers: persistence mode on GPUs 0-7" in text         # the findings
        assert "[open] H1 SIGKILL of the schedulers frees GPUs 0-7" in text   # the incident's entries
        assert "live: alice@bastion's console" in str(app.query_one("#live-status").render())
        assert "stopped at" in str(app.query_one("#live-status").render())    # the driver has quit


def typed(app, keys) -> None:
    """Keys as a terminal sends them, in one burst (a person mashing the keyboard, or a paste):
    through the driver, as Textual's pilot does, without waiting for each to be handled."""
    from textual import events
    from textual.keys import _character_to_key
    chars = {"enter": "\r", "tab": "\t", "escape": "\x1b", "space": " ", "backspace": "\x7f"}
    for key in keys:
        if len(key) == 1:
            char, key = key, (key if key.isalnum() else _character_to_key(key))
        elif key.startswith("ctrl+") and len(key) == 6:
            char = chr(ord(key[-1]) - 96)
        else:
            char = chars.get(key)
        app._driver.send_message(events.Key(key, char))


@pytest.mark.heavy      # several seconds: the second pass of .ci/run
async def test_no_key_in_the_mirror_changes_anything(incident_dir):
    """Every key a person might press, on every panel: no Confirm, no prompt ever opens, nothing is
    written, the node is untouched; enter shows the details, never with the next step's x."""
    path, source = await drive(incident_dir)
    before_files = files(incident_dir)
    before_node = [(p.pid, p.phase) for p in source.node.procs.values()]
    app = LiveFollowApp(str(path), str(state_path(path)), poll_interval=0.5)
    # h and n add the follower's own words (test_a_follower_adds_a_note_and_a_hypothesis_...): not here
    # ? opens the follower's help (tests/test_pair_both_ways.py), which would take the rest of the burst
    keys = [c for c in string.ascii_letters + string.digits + string.punctuation if c not in "qhn?"]
    keys += ["enter", "escape", "tab", "shift+tab", "up", "down", "left", "right", "home", "end", "pageup",
             "pagedown", "space", "backspace", "delete", "insert"] + [f"f{i}" for i in range(1, 13)]
    keys += [f"ctrl+{c}" for c in "abdefghijklnoprstuvwxy"]
    opened: list[str] = []
    async with app.run_test(size=(120, 36)) as pilot:
        await wait_for(pilot, lambda: app.query_one("#gpus").row_count == 8)
        app.screen_change_signal.subscribe(app, lambda screen: opened.append(type(screen).__name__), immediate=True)
        for focus in ("#gpus", "#procs", "#findings", "#tv-list"):     # every key, on each panel
            app.query_one(focus).focus()
            typed(app, keys)
            for _ in range(5):
                await pilot.pause()
            while len(app.screen_stack) > 1:
                await pilot.press("escape")
        assert "DetailScreen" in opened and set(opened) <= {"Screen", "DetailScreen"}, opened   # keys arrived
        for focus in ("#gpus", "#procs", "#findings"):                # enter: details, never the step
            app.query_one(focus).focus()
            await pilot.press("down", "enter")
            assert type(app.screen).__name__ == "DetailScreen"
            assert "x: do this next step" not in screen_text(app)
            await pilot.press("x", "y", "escape")
        assert set(opened) <= {"Screen", "DetailScreen"}, opened
        assert not hasattr(app, "monitors") and not hasattr(app, "policy")   # nothing here could act
    after = files(incident_dir)
    assert {n: h for n, h in after.items() if not n.endswith(WANT_SUFFIX)} == before_files
    assert [n for n in after if n not in before_files] == ["pair" + WANT_SUFFIX], "only the follower's ask"
    assert [(p.pid, p.phase) for p in source.node.procs.values()] == before_node


async def test_the_live_state_is_written_only_while_someone_follows(incident_dir):
    """Nobody following, the driving console writes no state (it costs a tenth of a core at 256
    nodes); a follower's ask has it written within seconds, and it is written at the stop."""
    import time
    tl = timeline.open_incident(incident_dir, "alone", by="alice@bastion")
    app = IncidentApp([SimSource(name="demo", scenario="seed", clock=FakeClock())], timeline=tl, autostart=False)
    state = state_path(tl.path, driver=str(os.getpid()))      # this console's own state file
    async with app.run_test(size=(120, 36)) as pilot:
        await app.monitors[0].poll_once()
        await wait_for(pilot, lambda: "demo" in app.snapshots)
        flushed = time.monotonic() + 2.5                     # two of the feed's 1 s turns
        while time.monotonic() < flushed:
            await pilot.pause(0.1)
        assert not state.exists(), "nobody follows: nothing written"
        ask_for_state(want_path(tl.path))
        await wait_for(pilot, state.exists)
        assert read_state(state).running and read_state(state).node("demo").gpus
        await pilot.press("q")
    tl.close()
    assert not read_state(state).running, "the stop is written"


async def test_a_key_the_driver_acts_with_says_who_drives_instead_of_nothing(incident_dir):
    path, _source = await drive(incident_dir)
    app = LiveFollowApp(str(path), str(state_path(path)), poll_interval=0.05)
    said: list[str] = []
    real_notify = app.notify

    def notify(message, **kw):
        said.append(str(message))
        real_notify(message, **kw)
    app.notify = notify
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_for(pilot, lambda: app.state is not None)
        app.query_one("#procs").focus()
        await pilot.press("t")
        await pilot.pause()
        assert said and "read-only" in said[-1] and "alice@bastion drives this incident" in said[-1], said
        await pilot.press("F")
        await pilot.pause()
        assert "Kill holders" in said[-1] and len(app.screen_stack) == 1, "a message, never a Confirm"


async def test_the_mirror_at_80x24_shows_the_gpu_holders_rows(incident_dir):
    """The follower's panels share the rows as the driver's do (panels.fit_main_panels): at 80x24
    the process panel keeps its rows (once: "processes: 9 GPU-related" over no row at all)."""
    path, _source = await drive(incident_dir)
    app = LiveFollowApp(str(path), str(state_path(path)), poll_interval=0.05)
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_for(pilot, lambda: app.state is not None and app.query_one("#procs").row_count > 3)
        await wait_for(pilot, lambda: app.query_one("#procs").size.height >= 4)
        text = screen_text(app)
        assert "sglang::scheduler_TP0" in text and "reset blockers" in text, text


async def test_the_mirror_fits_the_gpu_panel_as_the_driver_does(incident_dir):
    """As the driver's GPU panel does (tables.gpu_layout): at 100 columns "NVIDIA RTX…" beside
    the health, never "NVIDIA RTX P"; at 80 the names give way to the temperature and power, header
    and all (no "Na" cut at the chart)."""
    path, _source = await drive(incident_dir)
    app = LiveFollowApp(str(path), str(state_path(path)), poll_interval=0.05)
    async with app.run_test(size=(100, 30)) as pilot:
        gpus = app.query_one("#gpus")

        def names() -> list[str]:
            return [str(gpus.get_row(r.key)[-1]) for r in gpus.ordered_rows]
        await wait_for(pilot, lambda: gpus.row_count == 8 and all(n.endswith("…") for n in names()))
        assert all(n.startswith("NVIDIA") and len(n) < 30 for n in names()), names()
        assert all("°C" in str(gpus.get_row(r.key)[4]) for r in gpus.ordered_rows)
        await pilot.resize_terminal(80, 24)
        await wait_for(pilot, lambda: not any(names()))
        assert [c.label.plain for c in gpus.ordered_columns][-2:] == ["Health", ""]
        assert all(str(gpus.get_row(r.key)[4]).endswith("W") for r in gpus.ordered_rows)


async def test_the_mirror_findings_wrap_to_the_panel_and_rewrap_when_the_pane_changes(incident_dir):
    """A finding is wrapped at the findings panel's width: never cut into 20-cell shreds by a draw
    that came before the first layout (CI caught "INFO PID 72169" over "(python3 -m" once), and
    drawn again when the pane is widened or narrowed."""
    path, _source = await drive(incident_dir)
    app = LiveFollowApp(str(path), str(state_path(path)), poll_interval=0.05)
    async with app.run_test(size=(80, 24)) as pilot:
        findings = app.query_one("#findings")

        def first_line() -> str:
            return str(findings.get_row_at(0)[0]).split("\n")[0] if findings.row_count else ""
        await wait_for(pilot, lambda: "PID 72169 (python3" in first_line())
        assert 70 <= len(first_line()) <= 78, first_line()
        await pilot.resize_terminal(60, 24)
        await wait_for(pilot, lambda: len(first_line()) <= 58 and "PID" in first_line())
        await pilot.resize_terminal(100, 16)
        await wait_for(pilot, lambda: len(first_line()) > 90)


async def test_a_follower_adds_a_note_and_a_hypothesis_under_their_own_name(incident_dir, monkeypatch):
    """Pair-debugging: h and n in the follower write into the incident, by the follower; the
    driver's keys stay read-only there."""
    from console.incident import timeline
    monkeypatch.setenv("USER", "bob")
    path, _source = await drive(incident_dir)
    app = LiveFollowApp(str(path), str(state_path(path)), poll_interval=0.05)
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_for(pilot, lambda: app.state is not None)
        from textual.widgets import Input
        for key, words in (("h", "the launcher's SIGTERM handler never ran"), ("n", "bob: watching GPU 3")):
            await pilot.press(key)
            await wait_for(pilot, lambda: bool(app.screen.query(Input)))
            app.screen.query_one(Input).value = words      # typed (the prompts' own tests type key by key)
            await pilot.press("enter")
            await wait_for(pilot, lambda w=words: any(e.text == w for e in timeline.load(path)[0]))
        await wait_for(pilot, lambda: "watching GPU 3" in screen_text(app))
    entries = timeline.load(path)[0]
    mine = [e for e in entries if e.text in ("the launcher's SIGTERM handler never ran", "bob: watching GPU 3")]
    assert [e.kind for e in mine] == ["hypothesis", "note"]
    assert all(e.by.startswith("bob@") and e.node == "demo" for e in mine), [(e.by, e.node) for e in mine]
    assert not any(e.by.startswith("bob@") for e in entries if e.kind == "action")


async def test_the_follower_shows_sm_where_the_driver_does_and_enter_on_a_process_gives_its_details(incident_dir):
    """The follower's process panel is the driver's (a VirtualTable with the same columns): a
    worker's SM% is there where the panel has the room (the driver's rule: the process names
    keep 40 cells), gives way at 80 columns, and enter on a process shows its details."""
    import dataclasses

    from console.ui.details import DetailScreen

    async def busy(pilot, app):
        worker = next(p for p in app.snapshots["demo"].processes if p.cmdline.endswith("scheduler_TP0"))
        snap = app.snapshots["demo"]
        procs = tuple(dataclasses.replace(p, gpu_sm_pct=97) if p is worker else p for p in snap.processes)
        await app.session.take_reading(dataclasses.replace(snap, processes=procs))
        await wait_for(pilot, lambda: app.snapshots["demo"].proc(worker.pid).gpu_sm_pct == 97)
    path, _ = await drive(incident_dir, act=busy)
    app = LiveFollowApp(str(path), str(state_path(path)), poll_interval=0.05)
    async with app.run_test(size=(200, 40)) as pilot:
        procs = app.query_one("#procs")
        await wait_for(pilot, lambda: procs.row_count > 3 and procs.size.width > 0)
        tp0 = next(k for k in procs.row_keys if "scheduler_TP0" in str(procs.get_cell(k, "name")))
        assert str(procs.get_cell(tp0, "sm")) == "97"
        assert "sm" in [procs.column_keys[i] for i in procs.shown_columns()]
        procs.focus()
        procs.move_cursor(row=procs.get_row_index(tp0))
        await pilot.press("enter")
        await wait_for(pilot, lambda: isinstance(app.screen, DetailScreen) and "scheduler_TP0" in screen_text(app))
    app = LiveFollowApp(str(path), str(state_path(path)), poll_interval=0.05)
    async with app.run_test(size=(80, 24)) as pilot:
        procs = app.query_one("#procs")
        await wait_for(pilot, lambda: procs.row_count > 3 and procs.size.width > 0)
        assert "sm" not in [procs.column_keys[i] for i in procs.shown_columns()]


async def test_the_followers_findings_fill_the_lines_to_spare_as_the_drivers_do(incident_dir):
    """The follower's findings panel is the driver's (panels.FindingsPanel): at 120x40 the seed's
    first next step, cut at 120 columns, shows whole in the lines the panel has to spare."""
    path, _ = await drive(incident_dir)
    app = LiveFollowApp(str(path), str(state_path(path)), poll_interval=0.05)
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_for(pilot, lambda: "gives them the chance to stop their own workers" in screen_text(app))
        assert app.query_one("#findings").base_lines == 4
