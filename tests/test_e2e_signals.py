"""SIGHUP and SIGTERM stop the console as q does, in a real terminal (tmux, 80x24): a dropped
SSH session, a closed terminal, `tmux kill-server`, `kill`, `systemctl stop` — the action in
flight gets its outcome, "console stopped (SIGNAL)" is written, the process exits and the
terminal leaves the alternate screen. A console that dies without a word (SIGKILL) shows as
gone in `timeline list` and to a follower.

Heavy (the second pass of .ci/run): real terminals and a new interpreter per console; budget
60 s. The pieces are tested in-process in tests/test_consoles.py and tests/test_ui_mirror.py."""
from __future__ import annotations

import datetime as dt
import json
import os
import shutil
import signal
import subprocess
import sys

import pytest

from tests.polling import until
from test_e2e_tmux import Tmux

pytestmark = [pytest.mark.heavy,
              pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed (.ci/run installs it)")]


@pytest.fixture
def terms(tmp_path):
    made: list[Tmux] = []

    def make() -> Tmux:
        made.append(Tmux(tmp_path))
        return made[-1]
    yield make
    for t in made:
        t.stop()


def entries(tmp_path, ident: str) -> list[dict]:
    path = tmp_path / "state" / "gpu-incident" / "incidents" / f"{ident}.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def console_pid(tmp_path, ident: str) -> int:
    """The console's PID, as its start entry records it (and it is that console: its parent is
    the pane's shell)."""
    assert until(lambda: any(e["text"].startswith("console started watching") for e in entries(tmp_path, ident)))
    start = next(e for e in entries(tmp_path, ident) if e["text"].startswith("console started watching"))
    console = start["console"]
    assert console["host"] and isinstance(console["start_ticks"], int)
    return console["pid"]


def exited(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"      # the shell has not reaped it yet
    except (FileNotFoundError, ProcessLookupError):       # gone (also while it was being read)
        return True


def sigterm_in_flight(tmux: Tmux, tmp_path, ident: str) -> dict:
    """SIGTERM one of the seed's schedulers through Confirm: they ignore it, so the action is
    still being verified (its grace is 15 s) when the console is signalled."""
    tmux("send-keys", "t")
    assert tmux.shows("y: run it"), tmux.screen()
    tmux("send-keys", "y")
    assert until(lambda: any(e["kind"] == "action" for e in entries(tmp_path, ident))), entries(tmp_path, ident)
    assert tmux.shows("verifying for up to"), tmux.screen()
    return next(e for e in entries(tmp_path, ident) if e["kind"] == "action")


def stopped_with_outcome(tmp_path, ident: str, action: dict, name: str) -> None:
    assert until(lambda: entries(tmp_path, ident)[-1]["text"] == f"console stopped ({name})"), \
        [e["text"] for e in entries(tmp_path, ident)]
    after = [e for e in entries(tmp_path, ident) if e["seq"] > action["seq"]]
    outcome = next((e for e in after if e.get("outcome") and e["action"] == action["seq"]), None)
    assert outcome is not None, [(e["seq"], e["ts"], e["kind"], e["action"], e.get("outcome"), e["text"])
                                 for e in entries(tmp_path, ident)]
    assert "cancelled after" in outcome["text"] and "what was seen by then" in outcome["text"], outcome["text"]
    stop = after[-1]
    assert stop["console"]["pid"] == action_console(tmp_path, ident)       # the stop names the console


def action_console(tmp_path, ident: str) -> int:
    return next(e for e in entries(tmp_path, ident) if e["text"].startswith("console started"))["console"]["pid"]


def test_sighup_stops_the_console_as_q_does_with_the_action_in_flight_recorded(terms, tmp_path):
    tmux = terms()
    tmux.start("demo", "--incident", "hup")
    assert tmux.shows("sglang::scheduler_TP0"), tmux.screen()
    pid = console_pid(tmp_path, "hup")
    action = sigterm_in_flight(tmux, tmp_path, "hup")
    os.kill(pid, signal.SIGHUP)
    stopped_with_outcome(tmp_path, "hup", action, "SIGHUP")
    assert until(lambda: exited(pid)), "the console is still running after SIGHUP"
    assert tmux.shows("EXITED 0"), tmux.screen()
    assert "stopped by SIGHUP" in tmux.screen()
    assert tmux("display", "-p", "#{alternate_on}").strip() == "0"


def test_sigterm_stops_the_console_records_the_outcome_and_leaves_the_alternate_screen(terms, tmp_path):
    tmux = terms()
    tmux.start("demo", "--incident", "term")
    assert tmux.shows("sglang::scheduler_TP0"), tmux.screen()
    assert tmux("display", "-p", "#{alternate_on}").strip() == "1"           # the console's screen
    pid = console_pid(tmp_path, "term")
    action = sigterm_in_flight(tmux, tmp_path, "term")
    os.kill(pid, signal.SIGTERM)
    stopped_with_outcome(tmp_path, "term", action, "SIGTERM")
    assert until(lambda: exited(pid)), "the console is still running after SIGTERM"
    assert tmux.shows("EXITED 0"), tmux.screen()
    assert tmux("display", "-p", "#{alternate_on}").strip() == "0", "SIGTERM left the terminal in the alternate screen"
    assert "stopped by SIGTERM" in tmux.screen()


def test_a_terminal_that_goes_away_stops_the_console_and_it_exits(terms, tmp_path):
    """`tmux kill-server` (as a closed terminal or a dropped SSH session): the kernel hangs up the
    terminal and sends SIGHUP; the terminal takes no more writes, and the console still records
    its stop and exits."""
    tmux = terms()
    tmux.start("demo", "--incident", "gone-tty")
    assert tmux.shows("sglang::scheduler_TP0"), tmux.screen()
    pid = console_pid(tmp_path, "gone-tty")
    tmux.stop()
    assert until(lambda: entries(tmp_path, "gone-tty")[-1]["text"] == "console stopped (SIGHUP)"), \
        [e["text"] for e in entries(tmp_path, "gone-tty")]
    assert until(lambda: exited(pid)), "the console outlived its terminal"


def timeline_list(tmp_path) -> str:
    env = {**os.environ, "XDG_STATE_HOME": str(tmp_path / "state")}
    return subprocess.run([sys.executable, "-m", "console", "timeline", "list", "--all"],   # demo incidents too
                          capture_output=True, text=True, env=env, timeout=60).stdout


def test_a_console_killed_without_a_word_shows_as_gone_in_timeline_list_and_to_followers(terms, tmp_path):
    driver, follower = terms(), terms()
    driver.start("demo", "--incident", "killed")
    assert driver.shows("sglang::scheduler_TP0"), driver.screen()
    pid = console_pid(tmp_path, "killed")
    follower.start("follow", "killed", "--live")
    assert follower.shows("76109MiB / 97887MiB"), follower.screen()          # the live state came
    assert "open, console attached" in timeline_list(tmp_path)
    os.kill(pid, signal.SIGKILL)
    assert until(lambda: exited(pid))
    assert not any(e["text"].startswith("console stopped") for e in entries(tmp_path, "killed"))
    last = dt.datetime.fromisoformat(entries(tmp_path, "killed")[-1]["ts"].replace("Z", "+00:00"))
    listed = timeline_list(tmp_path)
    assert f"console gone since {last:%H:%M}" in listed, listed               # UTC, as the list's times
    assert "console attached" not in listed
    assert follower.shows(f"PID {pid} died without"), follower.screen()
    assert "'s console gone since" in follower.screen()      # its live status
    later = terms()                                                           # the entries-only follower
    later.start("follow", "killed")
    assert later.shows("console gone since"), later.screen()
