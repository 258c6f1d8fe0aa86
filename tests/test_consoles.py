"""A console that died without a word is not a console attached: its start entry names its
process (PID, host, start time), and `timeline list`, the live state and the follower tell a
process that is gone from one still there (console/incident/consoles.py). Real processes: a
child killed with SIGKILL, a zombie, a PID whose start time is not the console's."""
from __future__ import annotations

import datetime as dt
import json
import os
import signal
import socket
import subprocess
import sys

import pytest

from console.incident import consoles, timeline
from console.incident.mirror import StateFeed, read_states, state_path
from console.incident.summary import incident_rows, summarize


@pytest.fixture
def child():
    """A process of our own, to kill."""
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    yield proc
    if proc.poll() is None:
        proc.kill()
    proc.wait()


def ident_of(pid: int, host: str | None = None) -> dict:
    return {"pid": pid, "host": host or socket.gethostname(), "start_ticks": consoles.start_ticks(pid)}


def killed(proc: subprocess.Popen, reap: bool = True) -> None:
    proc.send_signal(signal.SIGKILL)
    if reap:
        proc.wait()
    else:                           # a zombie: dead, its PID still in the table
        os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOWAIT)


def test_this_process_names_itself_and_is_alive():
    me = consoles.identity()
    assert me["pid"] == os.getpid() and me["host"] == socket.gethostname()
    assert isinstance(me["start_ticks"], int)
    assert consoles.process_alive(me["pid"], me["start_ticks"])
    assert not consoles.process_alive(me["pid"], me["start_ticks"] + 1), "a PID taken by another process is gone"


def test_a_killed_process_is_gone_and_so_is_a_zombie(child):
    ticks = consoles.start_ticks(child.pid)
    assert consoles.process_alive(child.pid, ticks)
    killed(child, reap=False)
    assert not consoles.process_alive(child.pid, ticks), "a zombie is not a console"
    child.wait()
    assert not consoles.process_alive(child.pid, ticks)
    assert not consoles.process_alive(0) and not consoles.process_alive(-1)


def write_incident(directory, ident: str, who: dict | None, *, stop: dict | None | bool = False):
    """An incident a console started (``who`` in its start entry), read a node, and — ``stop`` —
    said it stopped (True: the legacy line with no console named)."""
    tl = timeline.open_incident(directory, ident)
    tl.append("note", "console started watching demo", **({"console": who} if who else {}))
    tl.append("observation", "first reading of demo: GPUs 0-7 hold 594.6 GiB", node="demo",
              gpu_memory_before={"0": 76109})
    if stop is True:
        tl.append("note", "console stopped")
    elif stop:
        tl.append("note", "console stopped (SIGTERM)", console=stop)
    tl.close()
    return tl.path


def listed(path) -> str:
    return incident_rows([(path.stem, timeline.load(path)[0])])


def test_timeline_list_says_gone_since_the_last_entry_of_a_console_killed_without_a_word(tmp_path, child):
    path = write_incident(tmp_path, "k", ident_of(child.pid))
    assert "open, console attached" in listed(path)
    killed(child)
    last = dt.datetime.fromisoformat(timeline.load(path)[0][-1].ts.replace("Z", "+00:00"))
    row = listed(path)
    assert f"open, console gone since {last:%H:%M}" in row, row         # UTC, as the list's other times
    assert "attached" not in row
    assert summarize(timeline.load(path)[0]).console_running, "the entries alone still say a console started"


def test_what_stays_attached_and_what_is_not_a_console_at_all(tmp_path, child):
    dead = ident_of(child.pid)
    killed(child)
    here = consoles.identity()
    cases = {
        "elsewhere": (dict(dead, host="another-host"), False),      # cannot be checked from here
        "legacy": (None, False),                                    # written before the field
        "alive": (here, False),
        "stopped": (here, here),                                    # said it stopped (a signal)
        "stopped-legacy": (None, True),
    }
    rows = {name: listed(write_incident(tmp_path, name, who, stop=stop)) for name, (who, stop) in cases.items()}
    for name in ("elsewhere", "legacy", "alive"):
        assert "console attached" in rows[name], rows[name]
    for name in ("stopped", "stopped-legacy"):
        assert "console" not in rows[name].splitlines()[1], rows[name]


def test_several_consoles_each_stop_closes_its_own(tmp_path, child):
    """Two consoles on one incident: the one that stopped closes its own start (not the other's);
    the other killed, the incident shows gone; one still alive keeps it attached."""
    here = consoles.identity()
    tl = timeline.open_incident(tmp_path, "two")
    tl.append("note", "console started watching demo", console=ident_of(child.pid))
    tl.append("note", "console started watching demo", console=here)
    tl.append("note", "console stopped", console=here)
    tl.close()
    assert "console attached" in listed(tl.path)
    killed(child)
    assert "console gone since" in listed(tl.path)
    tl = timeline.Timeline(tl.path)
    tl.append("note", "console started watching demo", console=here)
    tl.close()
    assert "console attached" in listed(tl.path)


def test_the_console_field_is_kept_in_the_file_and_a_wrong_one_is_refused(tmp_path):
    path = write_incident(tmp_path, "f", consoles.identity())
    first = json.loads(path.read_text().splitlines()[0])
    assert first["console"] == consoles.identity()
    assert timeline.load(path)[0][0].console == consoles.identity()
    with pytest.raises(ValueError):
        timeline.entry_from_dict({**first, "console": "pid 1"})


def live_state(path, who: dict, *, running: bool = True) -> None:
    feed = StateFeed(state_path(path, driver=str(who["pid"])), incident_id=path.stem, by="alice@bastion",
                     interval=1.0, console=who)
    feed.write(feed.document({}, [], running=running))


def test_a_live_state_left_by_a_killed_console_is_gone_and_a_live_one_wins(tmp_path, child):
    path = write_incident(tmp_path, "st", ident_of(child.pid))
    live_state(path, ident_of(child.pid))
    state = read_states(state_path(path))
    assert state.console["pid"] == child.pid and not state.gone()
    killed(child)
    assert read_states(state_path(path)).gone()
    live_state(path, consoles.identity())               # another console, alive, on the incident
    merged = read_states(state_path(path))
    assert merged.console["pid"] == os.getpid() and not merged.gone()
    assert not read_states(state_path(path)).stale()


# ---------------------------------------------------------------- the follower

async def follower_status(path):
    pytest.importorskip("textual")
    from conftest import wait_for
    from console.ui.mirror_view import LiveFollowApp
    app = LiveFollowApp(str(path), str(state_path(path)), poll_interval=0.05)
    async with app.run_test(size=(120, 36)) as pilot:
        await wait_for(pilot, lambda: "gone since" in str(app.query_one("#live-status").render())
                       and "console gone since" in str(app.query_one("#tv-header").render()))
        return str(app.query_one("#live-status").render()), str(app.query_one("#tv-header").render())


async def test_the_follower_says_a_killed_console_is_gone_instead_of_no_update(tmp_path, child):
    path = write_incident(tmp_path, "fl", ident_of(child.pid))
    live_state(path, ident_of(child.pid))
    killed(child)
    status, header = await follower_status(path)
    assert "alice@bastion's console gone since" in status and f"PID {child.pid} died without" in status, status
    assert "no update" not in status


async def test_the_follower_says_gone_where_the_console_died_before_writing_any_live_state(tmp_path, child):
    path = write_incident(tmp_path, "none", ident_of(child.pid))
    killed(child)
    status, _header = await follower_status(path)
    assert status.startswith("console gone since") and f"PID {child.pid} on " in status, status
    assert "no live state yet" not in status
