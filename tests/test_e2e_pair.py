"""Pair-debugging end to end: one person drives `gpu-incident demo --incident pair` in one
terminal, a second follows the same incident by its ID with `follow pair --live` in another
(two tmux servers, 80x24, one user, one state dir).

Heavy (the second pass of .ci/run): three consoles in real terminals; budget 60 s. The follower's
view is tested in-process in tests/test_ui_mirror.py, an unknown ID in tests/test_cli.py."""
from __future__ import annotations

import shutil

import pytest

from test_e2e_tmux import Tmux

pytestmark = [pytest.mark.heavy,
              pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed (.ci/run installs it)")]


@pytest.fixture
def pair(tmp_path):
    driver, follower, later = Tmux(tmp_path), Tmux(tmp_path), Tmux(tmp_path)
    yield driver, follower, later
    for t in (driver, follower, later):
        t.stop()


def test_a_second_person_follows_the_incident_by_its_id_and_sees_the_same_panels(pair):
    driver, follower, later = pair
    driver.start("demo", "--incident", "pair")
    assert driver.shows("sglang::scheduler_TP0"), driver.screen()
    follower.start("follow", "pair", "--live")
    assert follower.shows("76109MiB / 97887MiB"), follower.screen()          # the driver's GPU table
    assert follower.shows("live: "), follower.screen()
    assert follower.shows("console started watching demo"), follower.screen()
    driver("send-keys", "h")
    assert driver.shows("State a hypothesis"), driver.screen()               # the prompt is open: type
    driver("send-keys", "-l", "memory needs more time")
    driver("send-keys", "Enter")
    assert follower.shows("[open] H1 memory needs"), follower.screen()        # the entry, numbered
    driver("send-keys", "q")
    assert driver.shows("EXITED 0"), driver.screen()
    assert follower.shows("stopped at"), follower.screen()                    # what it saw last, said so
    follower("send-keys", "q")
    assert follower.shows("EXITED 0"), follower.screen()
    later.start("replay", "pair")                                             # afterwards: replay by ID
    assert later.shows("step 1/"), later.screen()
    assert "console started watching demo" in later.screen()


def test_follow_of_an_unknown_id_says_so_in_one_line(pair):
    _, follower, _ = pair
    follower.start("follow", "nope")
    assert follower.shows("EXITED 2"), follower.screen()
    assert "no incident 'nope'" in follower.screen()


def test_both_ways_the_followers_words_reach_the_driver_and_the_drivers_confirm_the_follower(pair):
    """Issue 34 as a pair tried it: the follower's note shows on the driver's screen with who wrote
    it; the driver's open Confirm shows on the follower's, then that it was cancelled; each person
    is named by --as; the driver's hint is the command that shows the same panels."""
    driver, follower, _ = pair
    driver.start("demo", "--incident", "both", "--as", "alice")
    assert driver.shows("sglang::scheduler_TP0"), driver.screen()
    assert driver.shows("a second person: gpu-incident follow both --live"), driver.screen()
    follower.start("follow", "both", "--live", "--as", "bob")
    assert follower.shows("you: bob@"), follower.screen()
    assert follower.shows("following incident both · demo"), follower.screen()
    follower("send-keys", "n")
    assert follower.shows("recorded in the incident as bob@"), follower.screen()     # the prompt is open
    follower("send-keys", "-l", "watching GPU 3")
    follower("send-keys", "Enter")
    assert driver.shows("noted on demo: watching GPU 3"), driver.screen()
    assert "bob@" in driver.screen()
    driver("send-keys", "k")                               # the process panel has focus at start
    assert driver.shows("y: run it"), driver.screen()
    assert follower.shows("CONFIRM OPEN"), follower.screen()
    assert "kill -s KILL" in follower.screen()
    driver("send-keys", "n")
    assert follower.shows("cancelled SIGKILL"), follower.screen()
    assert "CONFIRM OPEN" not in follower.screen()
    driver("send-keys", "q")
    assert driver.shows("EXITED 0"), driver.screen()
    follower("send-keys", "q")
    assert follower.shows("EXITED 0"), follower.screen()
