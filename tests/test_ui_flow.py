"""The flow of long work on the console: a check says how far it is in the status line while it
runs, and its result never opens over a prompt the operator is typing in (Textual pilot)."""
from __future__ import annotations

import asyncio

import pytest

pytest.importorskip("textual")

from console.clock import FakeClock  # noqa: E402
from console.probe import QUERY_MEMORY  # noqa: E402
from console.sources.sim import SimSource  # noqa: E402
from console.ui.app import IncidentApp  # noqa: E402
from conftest import wait_for  # noqa: E402


class GatedSim(SimSource):
    """The seed node, whose memory reads after the first wait for the test to let them through."""

    def __init__(self, name: str = "demo") -> None:
        super().__init__(name=name, scenario="seed", clock=FakeClock())
        self.gate = asyncio.Event()
        self.reads = 0

    async def run(self, command, timeout=30.0):
        if command == QUERY_MEMORY:
            self.reads += 1
            if self.reads > 1:
                await self.gate.wait()
        return await super().run(command, timeout)


def status(app) -> str:
    """The status line at the top and the activity line above the footer."""
    return "\n".join(str(app.query_one(w).render()) for w in ("#status", "#activity") if app.query(w))


async def test_a_running_wait_shows_its_progress_and_its_result_waits_for_the_open_prompt(incident_dir):
    from console.incident import timeline
    from console.ui.details import DetailScreen
    from console.ui.prompts import TextPrompt
    from textual.widgets import Input
    source = GatedSim()
    tl = timeline.open_incident(incident_dir, "flow")
    app = IncidentApp([source], timeline=tl, autostart=False)
    async with app.run_test(size=(120, 36)) as pilot:
        await app.monitors[0].poll_once()
        await wait_for(pilot, lambda: "demo" in app.snapshots)
        await pilot.press("w")                               # wait-and-reread, 5 s
        await wait_for(pilot, lambda: "wait-and-reread: 0 of 5 s, nothing back yet" in status(app))
        await pilot.press("n")                               # a note, half written
        await wait_for(pilot, lambda: isinstance(app.screen, TextPrompt))
        await pilot.press(*"half a note")
        source.gate.set()                                    # the wait ends while the prompt is open
        await wait_for(pilot, lambda: "shown when this window closes" in status(app))
        assert isinstance(app.screen, TextPrompt)            # not covered, not robbed of its keys
        assert app.screen.query_one(Input).value == "half a note"
        assert "⏳" not in status(app)
        await pilot.press("enter")                           # the note is kept ...
        await wait_for(pilot, lambda: isinstance(app.screen, DetailScreen))   # ... then the result
        assert [e.text for e in tl.entries if e.kind == "note"][-1] == "half a note"
        assert [e for e in tl.entries if e.kind == "check"][-1].text.startswith(
            "wait-and-reread: no memory came back within 5 s")
        # the top status line no longer holds it (the activity line keeps what was said)
        assert "shown when this window closes" not in str(app.query_one("#status").render())
        await pilot.press("escape")
    tl.close()


async def test_a_result_with_no_prompt_open_shows_at_once(incident_dir):
    from console.ui.details import DetailScreen
    source = GatedSim()
    source.gate.set()
    app = IncidentApp([source], autostart=False)
    async with app.run_test(size=(80, 24)) as pilot:
        await app.monitors[0].poll_once()
        await wait_for(pilot, lambda: "demo" in app.snapshots)
        await pilot.press("w")
        await wait_for(pilot, lambda: isinstance(app.screen, DetailScreen))


async def test_the_holders_and_states_results_lead_with_their_summary_and_show_commands_as_lines():
    """No literal \\x0a in a multi-line command; a line per holder and the threads in D first."""
    from console.checks.registry import run_check
    from console.ui.details import DetailScreen
    source = SimSource(name="demo", scenario="seed", clock=FakeClock())
    app = IncidentApp([source], autostart=False)
    async with app.run_test(size=(120, 36)) as pilot:
        snap = await app.monitors[0].poll_once()
        app.checks.show(await run_check(source, "holders", snap), 7)
        await wait_for(pilot, lambda: isinstance(app.screen, DetailScreen) and "holders on demo" in app.screen.text)
        text = app.screen.text
        assert "\\x0a" not in text and "\n  echo '::gi-check:: begin fds'" in text
        lines = text.splitlines()
        holder = next(i for i, line in enumerate(lines) if line.startswith("  PID 72230 root: sglang::scheduler_TP0"))
        assert holder < next(i for i, line in enumerate(lines) if line.startswith("$ "))
        await pilot.press("escape")
        await wait_for(pilot, lambda: not isinstance(app.screen, DetailScreen))
        app.checks.show(await run_check(source, "states", snap, pids=(72230,)), 8)
        # the new window, whole (not the one closing, nor one with only its key line yet)
        await wait_for(pilot, lambda: isinstance(app.screen, DetailScreen) and "states on demo" in app.screen.text)
        assert "  PID 72230 sglang::schedul: S, 64 threads (64 S)" in app.screen.text


async def test_v_after_a_sigterm_that_freed_the_gpus_suggests_confirmed_for_h1(incident_dir):
    from textual.widgets import DataTable

    from console.incident import timeline
    from console.ui.prompts import VerdictScreen
    tl = timeline.open_incident(incident_dir, "v")
    app = IncidentApp([SimSource(name="demo", scenario="graceful", clock=FakeClock())], timeline=tl, autostart=False)
    async with app.run_test(size=(120, 36)) as pilot:
        await app.monitors[0].poll_once()
        await wait_for(pilot, lambda: "demo" in app.snapshots)
        await pilot.press("h", *"SIGTERM to the launcher frees GPUs 0-1", "enter")
        procs = app.query_one("#procs")
        procs.move_cursor(row=procs.get_row_index("demo:65102"))
        await pilot.press("t")
        await wait_for(pilot, lambda: type(app.screen).__name__ == "ConfirmScreen")
        await pilot.press("y")
        await wait_for(pilot, lambda: any(e.outcome for e in tl.entries))
        await pilot.press("v")
        await wait_for(pilot, lambda: isinstance(app.screen, VerdictScreen))
        assert app.screen.suggested == "confirmed"
        text = app.screen.text
        assert "H1: SIGTERM to the launcher frees GPUs 0-1" in text and "freed 138.7 GiB on GPUs 0-1" in text
        await pilot.press("enter")
        await wait_for(pilot, lambda: tl.entries[-1].kind == "verdict")
        assert tl.entries[-1].verdict == "confirmed"
    tl.close()


async def test_the_status_line_says_a_check_ended_and_what_it_found_never_its_framing(incident_dir):
    """A check's notice is words ("holders running"), and once it ended the line says what it
    found: never "running …" left behind, never the probe's framing."""
    from console.ui.details import DetailScreen
    source = GatedSim()
    source.gate.set()
    app = IncidentApp([source], autostart=False)
    async with app.run_test(size=(80, 24)) as pilot:
        await app.monitors[0].poll_once()
        await wait_for(pilot, lambda: "demo" in app.snapshots)
        app.checks.run("holders", {})
        assert "::gi-check::" not in status(app) and "holders running" in status(app)
        await wait_for(pilot, lambda: isinstance(app.screen, DetailScreen))
        await pilot.press("escape")
        await wait_for(pilot, lambda: "demo: holders: " in status(app))
        assert "running" not in status(app) and "::gi-" not in status(app)


async def test_w_waits_as_long_as_memory_usually_takes_here_after_what_was_done(incident_dir):
    """Three SIGTERMs on this node came back within 20-26 s: after a SIGTERM, w waits that
    long (not 5 s) and says why. (A real node's name: a demo's timings never size a wait.)"""
    from console.incident import freetimes, timeline
    from console.model import ActionRecord
    tl = timeline.open_incident(incident_dir, "waits")
    for s in (20, 24, 26):
        freetimes.record(incident_dir, "gpu07", "sigterm", s)
    source = GatedSim("gpu07")
    source.gate.set()
    app = IncidentApp([source], timeline=tl, autostart=False)
    async with app.run_test(size=(120, 36)) as pilot:
        await app.monitors[0].poll_once()
        await wait_for(pilot, lambda: "gpu07" in app.snapshots)
        app.monitors[0].actions.append(ActionRecord(rung="sigterm", ts=source.clock.now(), node="gpu07",
                                                    pids=(72169,), gpus=(0,)))
        await app.monitors[0].poll_once()       # the next reading brings what was done with it
        await pilot.press("w")
        said = lambda: "\n".join(s.text for s in app.activity.history())  # noqa: E731
        await wait_for(pilot, lambda: "memory usually comes back within" in said())
        assert "(after SIGTERM, 3 times): waiting 26 s" in said()
        await wait_for(pilot, lambda: "no memory came back within 26 s" in said())
        from console.ui.details import DetailScreen
        await wait_for(pilot, lambda: isinstance(app.screen, DetailScreen))     # the wait's result window
    tl.close()
