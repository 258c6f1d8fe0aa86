"""`gpu-incident replay` and `gpu-incident follow`, driven as a user would (pilot at 80x24)."""
import os

import pytest

import conftest
from hypothesis import given
from hypothesis import strategies as st

pytest.importorskip("textual")

from tests.fuzzing import examples
from console.incident import timeline
from console.model import TimelineEntry  # noqa: E402
from console.incident.timeline import entry_to_json  # noqa: E402
from console.ui.timeline_view import (FollowApp, ReplayApp, detail, row_cells, run_follow,  # noqa: E402
                                      run_replay)

EVIL = "[bold red]boom[/] \x1b[31mred\x1b[0m"


def entry(seq: int, second: int, kind: str, text: str = "", **fields) -> TimelineEntry:
    fields.setdefault("node", "gpu07")
    return TimelineEntry(ts=f"2026-11-29T11:{second // 60:02d}:{second % 60:02d}.000Z", seq=seq,
                         by="alice@bastion", kind=kind, text=text, **fields)


INCIDENT = [
    entry(1, 0, "note", "console started watching gpu07"),
    entry(2, 5, "hypothesis", "a zombie child holds the memory"),
    entry(3, 20, "check", "look for zombies", hypothesis=2, command="ps -eo pid,ppid,stat,cmd", rc=0,
          output="72170 72169 Z python3 <defunct>"),
    entry(4, 40, "action", "SIGKILL the parent", hypothesis=2, command="kill -s KILL 72169", rc=0,
          gpu_memory_before={"0": 76109}, gpu_memory_after={"0": 310}, freed_mib=75799,
          seconds_to_free=26.4),
    entry(5, 70, "verdict", "memory came back", hypothesis=2, verdict="confirmed"),
]


def write_incident(path, entries, tail: bytes = b"") -> str:
    path.write_bytes(b"".join((entry_to_json(e) + "\n").encode() for e in entries) + tail)
    return str(path)


def screen(app) -> str:
    """The 80x24 terminal as the user sees it, as plain text."""
    return "\n".join("".join(seg.text for seg in strip) for strip in app.screen._compositor.render_strips())


def list_row(app, index: int) -> str:
    return " ".join(c.plain for c in app.table.get_row_at(index))


async def wait_for(pilot, predicate, tries=500):
    await conftest.wait_for(pilot, predicate, tries, describe=screen)


# ---------------------------------------------------------------- replay
async def test_replay_steps_forward_and_back_and_verdicts_hold_as_of_the_step(tmp_path):
    app = ReplayApp.from_file(write_incident(tmp_path / "inc.jsonl", INCIDENT))
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        assert "step 1/5" in screen(app) and "T+0:00:00" in screen(app)
        assert app.table.row_count == 1
        await pilot.press("right")
        await pilot.pause()
        assert "step 2/5" in screen(app) and "[open] H1 a zombie child" in list_row(app, 1)
        assert "verdict as of this step: open" in screen(app)
        await pilot.press("space", "n")
        await pilot.pause()
        text = screen(app)
        assert "step 4/5" in text and "T+0:00:40" in text and "H1 open" in text
        assert "$ kill -s KILL 72169   rc 0" in text and "freed 74.0 GiB in 26.4 s" in text
        assert "memory before: GPU0 76109 MiB" in text and "memory after:  GPU0 310 MiB" in text
        await pilot.press("n")
        await pilot.pause()
        text = screen(app)
        assert "step 5/5" in text and "T+0:01:10" in text and "H1 confirmed" in text
        assert "[confirmed] H1 a zombie child" in list_row(app, 1) and app.table.row_count == 5
        await pilot.press("n")                     # past the end: stays
        await pilot.press("left")
        await pilot.pause()
        assert "step 4/5" in screen(app) and app.table.row_count == 4
        assert "[open] H1 a zombie child" in list_row(app, 1)   # the verdict has not happened yet
        await pilot.press("p", "p")
        await pilot.pause()
        assert "step 2/5" in screen(app)
        assert "verdict as of this step: open" in screen(app)
        await pilot.press("end")
        await pilot.pause()
        assert "step 5/5" in screen(app) and app.table.cursor_row == 4
        await pilot.press("home")
        await pilot.pause()
        assert "step 1/5" in screen(app) and app.table.row_count == 1
        await pilot.press("q")
    assert app.return_code == 0


RECORDED_FIRST = [
    entry(1, 0, "hypothesis", "a zombie child holds the memory"),
    entry(2, 40, "action", "SIGKILL 1 process", hypothesis=1, command="kill -s KILL 72169",
          gpu_memory_before={"0": 76109}, targets=[{"pid": 72169, "start_ticks": 4711, "create_time": None,
                                                     "name": "python3"}]),
    entry(3, 50, "observation", "SIGKILL 1 process: sent to 1 of 1; GPU 0 freed 74 GiB in 9 s", action=2,
          outcome=True, rc=0, output="sent SIGKILL to 1 of 1", gpu_memory_before={"0": 76109},
          gpu_memory_after={"0": 310}, freed_mib=75799, seconds_to_free=9.0),
]


async def test_replay_shows_the_action_when_sent_and_its_outcome_when_seen(tmp_path):
    app = ReplayApp.from_file(write_incident(tmp_path / "inc.jsonl", RECORDED_FIRST))
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("right")
        await pilot.pause()
        text = screen(app)
        assert "step 2/3" in text and "targets: 72169 (python3)" in text
        assert "outcome: not recorded yet" in text               # as of this step, only the send
        await pilot.press("right")
        await pilot.pause()
        text = screen(app)
        assert "step 3/3" in text and "outcome of action #2: kill -s KILL 72169" in text
        assert "outcome" in list_row(app, 2) and "of #2" in list_row(app, 2) and "(rc 0)" in list_row(app, 2)
        assert "freed 74.0 GiB in 9.0 s" in text
    # a view that has both (follow, or the last step) shows the outcome in the action's detail too
    body = detail(RECORDED_FIRST, 1, 3).plain
    assert "outcome #3" in body and "rc 0" in body and "memory after:  GPU0 310 MiB" in body


async def test_g_toggles_between_all_so_far_and_this_step_only(tmp_path):
    app = ReplayApp.from_file(write_incident(tmp_path / "inc.jsonl", INCIDENT))
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("end", "left")
        await pilot.pause()
        assert "all so far" in screen(app) and "console started watching" in screen(app)
        await pilot.press("g")
        await pilot.pause()
        text = screen(app)
        assert "this step" in text and "step 4/5" in text
        assert "console started watching" not in text           # only the current entry
        assert "$ kill -s KILL 72169" in text
        await pilot.press("p")
        await pilot.pause()
        assert "step 3/5" in screen(app) and "72170 72169 Z python3 <defunct>" in screen(app)
        await pilot.press("g")
        await pilot.pause()
        assert "all so far" in screen(app) and "console started watching" in screen(app)
        assert app.table.row_count == 3


async def test_replay_of_a_crashed_incident_warns_about_the_torn_line_and_shows_the_rest(tmp_path):
    path = write_incident(tmp_path / "inc.jsonl", INCIDENT[:3], tail=entry_to_json(INCIDENT[3]).encode()[:30])
    app = ReplayApp.from_file(path)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("end")
        await pilot.pause()
        text = screen(app)
        assert "inc.jsonl: torn last line skipped" in text and "step 3/3" in text
        assert [list_row(app, i).split()[0] for i in range(3)] == ["1", "2", "3"]


async def test_markup_and_escape_codes_in_entries_render_literally(tmp_path):
    evil = [entry(1, 0, "check", EVIL, command="echo '[b]hi[/b]'", rc=1, output=EVIL + "\nsecond [i]line[/i]",
                  node="[red]gpu07[/red]")]
    app = ReplayApp.from_file(write_incident(tmp_path / "inc.jsonl", evil))
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        text = screen(app)
        assert "[bold red]boom[/] \\x1b[31mred\\x1b[0m" in text      # detail: text and output
        assert text.count("[bold red]boom[/]") >= 3                   # list, text, output
        assert "$ echo '[b]hi[/b]'   rc 1" in text and "second [i]line[/i]" in text
        assert "\x1b" not in text
        assert "[red]gpu…" in list_row(app, 0)


async def test_replay_refuses_what_it_cannot_show_before_any_ui(tmp_path):
    with pytest.raises(FileNotFoundError, match="no such timeline file"):
        run_replay(str(tmp_path / "missing.jsonl"))
    with pytest.raises(ValueError, match="is a directory"):
        run_replay(str(tmp_path))
    garbage = tmp_path / "syslog"
    garbage.write_bytes(b"Nov 29 11:00:00 gpu07 kernel: NVRM: Xid 79\n")
    with pytest.raises(ValueError, match="not an incident timeline"):
        run_replay(str(garbage))
    with pytest.raises(ValueError, match="unknown theme"):
        run_replay(write_incident(tmp_path / "inc.jsonl", INCIDENT), "nope")
    with pytest.raises(FileNotFoundError, match="no such timeline file"):
        run_follow(str(tmp_path / "missing.jsonl"))
    with pytest.raises(ValueError, match="is a directory"):
        run_follow(str(tmp_path))
    with pytest.raises(ValueError, match="unknown theme"):
        run_follow(str(tmp_path / "inc.jsonl"), "nope")


# ---------------------------------------------------------------- follow
async def test_follow_shows_entries_another_console_appends_while_it_runs(incident_dir):
    tl = timeline.open_incident(incident_dir, "live", by="alice@bastion")
    tl.append("note", "console started watching gpu07", node="gpu07")
    app = FollowApp(str(tl.path), poll_interval=0.05, theme_name="daylight")
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_for(pilot, lambda: "console started watching" in screen(app))
        assert "following" in screen(app) and "— read-only" in screen(app)
        h = tl.append("hypothesis", "buffers need time", node="gpu07")
        await wait_for(pilot, lambda: "[open] H1 buffers need time" in screen(app))
        tl.append("verdict", "memory unchanged after 30 s", node="gpu07", hypothesis=h.seq, verdict="refuted")
        await wait_for(pilot, lambda: "[refuted] H1 buffers need" in screen(app))
        assert "refuted on H1 memory" in screen(app)
        assert app.table.cursor_row == 2                          # followed the newest entry
        assert "3 entries" in screen(app)
    tl.close()


async def test_follow_scrolls_with_new_entries_unless_the_user_scrolled_up(incident_dir):
    tl = timeline.open_incident(incident_dir, "busy", by="alice@bastion")
    app = FollowApp(str(tl.path), poll_interval=0.05)
    async with app.run_test(size=(80, 24)) as pilot:
        for i in range(30):
            tl.append("check", f"probe number {i}", node="gpu07")
        await wait_for(pilot, lambda: "probe number 29  " in screen(app).split("───")[0]
                       and app.table.cursor_row == 29)
        assert app.table.scroll_y == app.table.max_scroll_y > 0
        await pilot.press("up", "up", "up")
        for i in range(30, 35):
            tl.append("check", f"probe number {i}", node="gpu07")
        await wait_for(pilot, lambda: app.table.row_count == 35)
        await pilot.pause()
        text = screen(app)
        assert app.table.cursor_row == 26 and "probe number 34" not in text and "5 new" in text
        await pilot.press("end")
        await wait_for(pilot, lambda: "probe number 34" in screen(app))
        assert "new ↓" not in screen(app) and app.table.cursor_row == 34
        tl.append("check", "probe number 35", node="gpu07")       # following again
        # the table scrolls its cursor into view after the refresh that lays the new row out: the
        # user's scroll below comes after that (a scroll within that frame is undone by the table)
        await wait_for(pilot, lambda: "probe number 35" in screen(app) and app.table.cursor_row == 35
                       and app.table.virtual_size.height >= 37 and app.table.scroll_y == app.table.max_scroll_y)
        app.table.scroll_to(y=0, animate=False)    # what the mouse wheel does; the cursor stays
        # the scroll lands after the next refresh: wait until the user sees the top before appending
        await wait_for(pilot, lambda: app.table.scroll_y == 0 and "probe number 0 " in screen(app))
        tl.append("check", "probe number 36", node="gpu07")
        await wait_for(pilot, lambda: app.table.row_count == 37)
        # the repaint may trail the row count on a loaded machine: wait for what the user sees
        await wait_for(pilot, lambda: "1 new ↓" in screen(app) and "probe number 0 " in screen(app))
        assert app.table.scroll_y == 0
    tl.close()


async def test_follow_says_when_the_file_is_deleted_or_truncated_and_keeps_running(incident_dir):
    tl = timeline.open_incident(incident_dir, "gone", by="alice@bastion")
    tl.append("note", "first entry", node="gpu07")
    path = tl.path
    app = FollowApp(str(path), poll_interval=0.05)
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_for(pilot, lambda: "first entry" in screen(app))
        os.truncate(path, 0)
        tl.append("note", "after truncation", node="gpu07")
        await wait_for(pilot, lambda: "after truncation" in screen(app))
        # the notice line appears with the next layout, which may trail the row on a loaded machine
        await wait_for(pilot, lambda: "gone.jsonl was truncated" in screen(app))
        assert "first entry" in screen(app)
        tl.close()
        os.unlink(path)
        await wait_for(pilot, lambda: "gone.jsonl was deleted" in screen(app))
        assert "after truncation" in screen(app)                  # what was read stays
        await pilot.press("up")
        await pilot.pause()
        assert app.is_running and app.table.cursor_row == 0
        with timeline.Timeline(path, by="bob@gpu07") as again:
            again.append("note", "a new file")
        await wait_for(pilot, lambda: "a new file" in screen(app))
        assert "gone.jsonl is back" in screen(app)


async def test_follow_writes_nothing_whatever_the_keys(incident_dir, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    tl = timeline.open_incident(incident_dir, "ro", by="alice@bastion")
    h = tl.append("hypothesis", "a zombie holds GPU 0", node="gpu07")
    tl.close()
    before = (tl.path.read_bytes(), os.stat(tl.path).st_mtime_ns, sorted(os.listdir(incident_dir)),
              sorted(os.listdir(tmp_path)))
    app = FollowApp(str(tl.path), poll_interval=0.05)
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_for(pilot, lambda: "a zombie holds GPU 0" in screen(app))
        await pilot.press("t", "k", "F", "R", "B", "w", "c", "h", "v", "c", "n", "e", "space", "enter",
                          "slash", "x", "ctrl+s", "ctrl+p")
        await pilot.pause(0.2)
        assert "CommandPalette" not in type(app.screen).__name__
        assert app.is_running and h.text in screen(app)
    after = (tl.path.read_bytes(), os.stat(tl.path).st_mtime_ns, sorted(os.listdir(incident_dir)),
             sorted(os.listdir(tmp_path)))
    assert after == before


# ---------------------------------------------------------------- rendering never fails
json_values = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
                           lambda kids: st.lists(kids, max_size=3) | st.dictionaries(st.text(max_size=5), kids,
                                                                                      max_size=3),
                           max_leaves=6)


@examples(150)
@given(st.dictionaries(st.sampled_from(["node", "text", "hypothesis", "action", "command", "rc", "output",
                                        "gpu_memory_before", "gpu_memory_after", "freed_mib",
                                        "seconds_to_free", "verdict", "targets", "outcome"]), json_values),
       json_values, json_values, st.sampled_from(["hypothesis", "verdict", "action", "observation", "x"]))
def test_any_entry_from_a_file_renders_without_error(fields, seq, ts, kind):
    """Whatever a (hand-edited, corrupted) file holds in a parseable line, the views draw it."""
    e = TimelineEntry(ts=ts, seq=seq, by="x", kind=kind, **fields)
    others = [TimelineEntry(ts="2026-11-29T11:00:00Z", seq=1, by="a", kind="hypothesis"), e]
    for i in range(2):
        assert detail(others, i, 2).plain is not None
        assert "\x1b" not in "".join(c.plain for c in row_cells(others[i], "open", 30))


async def test_the_plain_follower_has_help_naming_the_command_that_shows_the_panels(incident_dir):
    """34, what was left of item 5: `?` in `follow ID` (no --live) lists its keys and says how to
    see the driver's panels."""
    from console.ui.app import HelpScreen
    tl = timeline.open_incident(incident_dir, "plain", by="alice@bastion")
    tl.append("note", "watching gpu07", node="gpu07")
    app = FollowApp(str(tl.path), poll_interval=0.05)
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_for(pilot, lambda: "watching gpu07" in screen(app))
        await pilot.press("question_mark")
        await wait_for(pilot, lambda: isinstance(app.screen, HelpScreen))
        text = " ".join(str(w.render()) for w in app.screen.query("*"))
        assert "gpu-incident follow plain --live" in text, text
    tl.close()
