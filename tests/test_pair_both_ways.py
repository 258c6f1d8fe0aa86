"""Two people, one incident, both ways (issue 34, items 1-7): the driver is told what the
follower adds, the follower sees the driver's open Confirm and how it ended, the hint gives the
command that shows the same panels, `--as NAME` names the person, the follower fits a split pane,
and continuing an incident says so and draws the memory it already holds."""
from __future__ import annotations

import os

import pytest

pytest.importorskip("textual")

from console.clock import FakeClock  # noqa: E402
from console.incident import timeline  # noqa: E402
from console.incident.mirror import read_state, state_path  # noqa: E402
from console.incident.timeline import Timeline  # noqa: E402
from console.sources.sim import SimSource  # noqa: E402
from console.ui.app import IncidentApp  # noqa: E402
from console.ui.mirror_view import LiveFollowApp  # noqa: E402
from conftest import screen_text, wait_for  # noqa: E402


def driver(incident_dir, ident="pair", by="alice@bastion"):
    tl = timeline.open_incident(incident_dir, ident, by=by)
    app = IncidentApp([SimSource(name="demo", scenario="seed", clock=FakeClock())], timeline=tl, autostart=False)
    return tl, app


async def polled(pilot, app) -> None:
    await app.monitors[0].poll_once()
    await wait_for(pilot, lambda: "demo" in app.snapshots)


def activity(app) -> str:
    return str(app.query_one("#activity").render())


async def messages(pilot, app) -> str:
    """m: what the console said, whole."""
    await pilot.press("m")
    await wait_for(pilot, lambda: type(app.screen).__name__ == "DetailScreen")
    text = screen_text(app)
    await pilot.press("escape")
    return text


# ---------------------------------------------------------------- 1, 3: the driver's screen
async def test_the_driver_is_told_what_the_follower_adds_naming_who(incident_dir):
    tl, app = driver(incident_dir)
    async with app.run_test(size=(100, 30)) as pilot:
        await polled(pilot, app)
        follower = Timeline(tl.path, by="[bold]bob@laptop")      # a name is untrusted text: shown as typed
        follower.append("hypothesis", "the launcher ignores SIGTERM", node="demo")
        await wait_for(pilot, lambda: "the launcher ignores SIGTERM" in activity(app))
        assert "[bold]bob@laptop: hypothesis H1 on demo" in activity(app), activity(app)
        follower.append("note", "watching GPU 3", node="demo")
        follower.close()
        await wait_for(pilot, lambda: "watching GPU 3" in activity(app))
        said = await messages(pilot, app)
        assert "[bold]bob@laptop: hypothesis H1 on demo — the launcher ignores SIGTERM" in said, said
        assert "[bold]bob@laptop noted on demo: watching GPU 3" in said
        assert "console joined" not in said and "✎ alice@bastion" not in said, "the driver's own entries are no news"
        await pilot.press("q")
    tl.close()


async def test_the_hint_is_the_command_that_shows_the_same_panels_and_names_who_drives(incident_dir):
    tl, app = driver(incident_dir, by="[b]alice@bastion")         # --as "[b]alice": shown as typed
    async with app.run_test(size=(100, 30)) as pilot:
        await polled(pilot, app)
        assert str(app.query_one("#status").render()).rstrip().endswith("incident pair as [b]alice@bastion")
        said = await messages(pilot, app)
        assert f"gpu-incident follow pair --live --incident-dir {incident_dir}" in said, said
        assert "as [b]alice@bastion" in said
        await pilot.press("q")
    tl.close()


# ---------------------------------------------------------------- 2: the driver's open Confirm
async def test_the_follower_sees_the_drivers_open_confirm_then_that_it_was_cancelled(incident_dir):
    tl, app = driver(incident_dir)
    mine = state_path(tl.path, driver=str(os.getpid()))
    async with app.run_test(size=(120, 36)) as pilot:
        await polled(pilot, app)
        app.query_one("#procs").focus()
        await pilot.press("k")
        await wait_for(pilot, lambda: type(app.screen).__name__ == "ConfirmScreen")
        await app._flush_feed(force=True)
        asked = mine.read_bytes()                      # the state while Confirm waits for y/n
        await pilot.press("n")
        await wait_for(pilot, lambda: len(app.screen_stack) == 1)
        await app._flush_feed(force=True)
        answered = mine.read_bytes()
        await pilot.press("q")
    tl.close()
    assert read_state(mine).confirm is None, "a console that stopped has no Confirm open"

    mine.write_bytes(asked)                            # the follower reads it as the driver wrote it
    follower = LiveFollowApp(str(tl.path), str(state_path(tl.path)), poll_interval=0.05)
    said: list[str] = []
    notify = follower.notify
    follower.notify = lambda message, **kw: (said.append(str(message)), notify(message, **kw))
    async with follower.run_test(size=(100, 16)) as pilot:
        panel = follower.query_one("#live-confirm")
        await wait_for(pilot, lambda: panel.display and "kill -s KILL" in str(panel.render()))
        shown = str(panel.render())
        assert "alice@bastion is about to run SIGKILL 1 process on demo" in shown, shown
        assert "1 target: 72294 root" in shown and "sglang::scheduler_TP1" in shown, shown
        assert all(len(line) <= 98 for line in shown.splitlines()), "each line cut to the pane"
        mine.write_bytes(answered)
        status = follower.query_one("#live-status")
        await wait_for(pilot, lambda: not panel.display and "cancelled" in str(status.render()))
        assert "alice@bastion cancelled SIGKILL 1 process on demo" in str(status.render())
        assert any("cancelled SIGKILL 1 process on demo" in s and "nothing ran" in s for s in said), said


# ---------------------------------------------------------------- 4: who wrote what
async def test_as_name_is_who_the_follower_writes_as_shown_literally(incident_dir):
    from textual.widgets import Input

    from console.incident.pairing import person
    tl, app = driver(incident_dir)
    async with app.run_test(size=(100, 30)) as pilot:
        await polled(pilot, app)
        await pilot.press("q")
    tl.close()
    follower = LiveFollowApp(str(tl.path), str(state_path(tl.path)), poll_interval=0.05,
                             by=person("[red]bob", host="laptop"))
    async with follower.run_test(size=(80, 24)) as pilot:
        await wait_for(pilot, lambda: "you: [red]bob@laptop" in str(follower.query_one("#tv-header").render()))
        await pilot.press("n")
        await wait_for(pilot, lambda: bool(follower.screen.query(Input)))
        assert "recorded in the incident as [red]bob@laptop" in screen_text(follower)
        follower.screen.query_one(Input).value = "GPU 3 is mine"
        await pilot.press("enter")
        await wait_for(pilot, lambda: any(e.text == "GPU 3 is mine" for e in timeline.load(tl.path)[0]))
    note = next(e for e in timeline.load(tl.path)[0] if e.text == "GPU 3 is mine")
    assert note.by == "[red]bob@laptop"


def test_as_takes_one_line_of_text_on_the_command_line_and_in_the_config(tmp_path, capsys):
    from console.cli import main
    from console.config import load_config
    assert main(["--as", "bob\x1b[2J", "demo"]) == 2
    assert "--as" in capsys.readouterr().err
    good = tmp_path / "good.toml"
    good.write_text('[defaults]\nas = "alice"\n')
    assert load_config(str(good)).defaults["as"] == "alice"
    bad = tmp_path / "bad.toml"
    bad.write_text('[defaults]\nas = ""\n')
    with pytest.raises(ValueError, match=r"\[defaults\] as"):
        load_config(str(bad))


# ---------------------------------------------------------------- 5: the follower in a split pane
async def test_the_follower_in_a_split_pane(incident_dir):
    """100x16: the findings say how many are in view and which way the rest are, a cut line ends
    in …; ? lists the follower's keys (none of the driver's acting keys); the title names the
    incident and the node; the entries' "what" takes the pane's width after a resize."""
    long = "the launcher's SIGTERM handler never ran: eight schedulers kept memory"
    tl, app = driver(incident_dir)
    async with app.run_test(size=(100, 30)) as pilot:
        await polled(pilot, app)
        app.incident.hypothesis("demo", long)
        await pilot.press("q")
    tl.close()
    follower = LiveFollowApp(str(tl.path), str(state_path(tl.path)), poll_interval=0.05)
    async with follower.run_test(size=(100, 16)) as pilot:
        findings = follower.query_one("#findings")
        await wait_for(pilot, lambda: "in view (↓)" in str(findings.border_title))
        assert str(findings.border_title).startswith("findings: 2, 1 in view (↓)"), findings.border_title
        room = findings.scrollable_content_region.width - 2          # the cell's padding
        lines = [line for row in findings.ordered_rows for line in str(findings.get_row(row.key)[0]).split("\n")]
        assert lines and all(len(line) <= room for line in lines), (room, lines)
        assert any(line.endswith("…") for line in lines)
        header = str(follower.query_one("#tv-header").render())
        assert "following incident pair · demo" in header and ".jsonl" not in header, header
        await pilot.press("question_mark")
        await wait_for(pilot, lambda: type(follower.screen).__name__ == "HelpScreen")
        help_text = screen_text(follower)
        assert "state a hypothesis" in help_text and "follow new entries" in help_text, help_text
        assert "SIGKILL the selected" not in help_text and "reset the selected GPU" not in help_text
        await pilot.press("escape")
        table = follower.table

        def what() -> str:
            index = next((i for i, e in enumerate(follower.entries) if e.text == long), None)
            return str(table.get_row(f"e{index}")[-1]) if index is not None else ""
        await wait_for(pilot, lambda: long[:20] in what())
        assert what().endswith("…")                     # 100 columns: cut
        await pilot.resize_terminal(140, 24)
        await wait_for(pilot, lambda: what().endswith(long), describe=lambda _app: what())   # whole at 140


# ---------------------------------------------------------------- 7: continuing an incident
async def test_continuing_an_incident_says_what_it_holds_and_draws_its_memory(incident_dir):
    timeline.ensure_dir(incident_dir)
    before = {"0": 76109, "1": 76113}
    with Timeline(incident_dir / "pair.jsonl", by="alice@bastion") as tl:
        h = tl.append("hypothesis", "the schedulers hold the memory", node="demo")
        tl.append("observation", "first reading of demo", node="demo", gpu_memory_before=before)
        a = tl.append("action", "SIGKILL 2 processes", node="demo", gpu_memory_before=before, rung="sigkill")
        tl.append("observation", "freed", node="demo", action=a.seq, outcome=True,
                  gpu_memory_after={"0": 0, "1": 0}, seconds_to_free=4.0)
        tl.append("verdict", "confirmed: freed", node="demo", hypothesis=h.seq, verdict="confirmed")
    tl, app = driver(incident_dir)                     # --incident pair, on an incident that exists
    async with app.run_test(size=(100, 30)) as pilot:
        await wait_for(pilot, lambda: "continuing" in activity(app))
        assert "continuing pair: 5 entries, H1 confirmed, 1 action" in activity(app), activity(app)
        chart = str(app.query_one("#gpu-chart").render())
        assert "waiting for a reading" not in chart and "█" in chart, chart    # before the first poll
        assert "continuing pair: 5 entries" in await messages(pilot, app)
        await pilot.press("q")
    tl.close()


# ---------------------------------------------------------------- 6: a console that is gone
def test_the_postmortem_says_a_console_is_attached_only_of_another_one_alive(tmp_path):
    import subprocess

    from console.incident import consoles
    from console.incident.export import as_markdown

    def markdown(console) -> str:
        with Timeline(tmp_path / f"{console['pid']}.jsonl", by="alice@bastion") as tl:
            tl.append("note", consoles.CONSOLE_STARTED + "demo", console=console)
            tl.append("observation", "first reading of demo", node="demo", gpu_memory_before={"0": 76109})
            return as_markdown(tl.entries, incident_id="pair")

    other = subprocess.Popen(["sleep", "60"])
    try:
        alive = {"pid": other.pid, "host": consoles.identity()["host"], "start_ticks": consoles.start_ticks(other.pid)}
        assert "(a console is still attached)" in markdown(alive)
    finally:
        other.kill()
        other.wait()
    assert "(a console is still attached)" not in markdown(alive), "its process is gone"
    assert "(a console is still attached)" not in markdown(consoles.identity()), "the console exporting it"
