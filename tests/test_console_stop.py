"""The console stops as q does on SIGHUP and SIGTERM (in-process: the App's handlers on its own
loop, the record they leave, the handlers given back), and a cancel that meets a finished read
is not lost (the outcome of an action in flight is written when the console stops).

In a real terminal, with an action in flight, a terminal that hangs up and the alternate
screen: tests/test_e2e_signals.py (heavy)."""
from __future__ import annotations

import asyncio
import os
import signal

import pytest

from console.actions import run
from tests.polling import eventually

pytest.importorskip("textual")

from console.clock import FakeClock  # noqa: E402
from console.incident import timeline  # noqa: E402
from console.sources.sim import SimSource  # noqa: E402
from console.ui.app import IncidentApp  # noqa: E402
from conftest import wait_for  # noqa: E402


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP])
async def test_a_stop_signal_stops_the_console_as_q_does(incident_dir, signum):
    before = signal.getsignal(signum)
    tl = timeline.open_incident(incident_dir, "sig")
    app = IncidentApp([SimSource(name="demo", scenario="seed", clock=FakeClock())], timeline=tl, autostart=False,
                      stop_signals=True)
    async with app.run_test(size=(80, 24)) as pilot:
        await app.monitors[0].poll_once()
        await wait_for(pilot, lambda: "demo" in app.snapshots)
        if signal.getsignal(signum) in (before, signal.SIG_DFL):      # never send it unhandled: it ends the test run
            pytest.skip("the test does not run on the main thread: its loop takes no signals")
        os.kill(os.getpid(), signum)
        assert await eventually(lambda: app.return_code is not None), "the console did not stop"
    tl.close()
    name = signal.Signals(signum).name
    assert app.stopped_by == name and app.return_code == 0
    entries = timeline.load(tl.path)[0]
    assert [e.text for e in entries][-2:] == ["demo when the console stopped: GPUs 0-7 still hold 594.6 GiB",
                                              f"console stopped ({name})"]
    start, stop = entries[0], entries[-1]
    assert start.text == "console started watching demo"
    assert start.console["pid"] == stop.console["pid"] == os.getpid()       # who started is who stopped
    assert start.console["host"] and start.console == stop.console
    assert signal.getsignal(signum) == before, "the handler is given back when the console stops"


async def test_q_names_the_console_that_stops_too(incident_dir):
    tl = timeline.open_incident(incident_dir, "q")
    app = IncidentApp([SimSource(name="demo", scenario="seed", clock=FakeClock())], timeline=tl, autostart=False)
    async with app.run_test(size=(80, 24)) as pilot:
        await app.monitors[0].poll_once()
        await wait_for(pilot, lambda: "demo" in app.snapshots)
        await pilot.press("q")
    tl.close()
    stop = timeline.load(tl.path)[0][-1]
    assert stop.text == "console stopped" and stop.console["pid"] == os.getpid()
    assert app.stopped_by is None


async def test_a_cancel_that_meets_a_finished_read_is_not_lost():
    """Python 3.11's wait_for returns a read that finished as its caller was cancelled and drops
    the cancel: the action's verification went on for its whole window (15 s after a SIGTERM)
    and the console stopped before the outcome was written. Every interleaving is tried."""
    lost = []
    for spins in range(6):
        gate = asyncio.Event()

        async def read():
            await gate.wait()
            return None

        task = asyncio.create_task(run._read(read, 5.0))
        await asyncio.sleep(0)
        gate.set()
        for _ in range(spins):
            await asyncio.sleep(0)
        asked = task.cancel()
        try:
            await task
        except asyncio.CancelledError:
            continue
        if asked:
            lost.append(spins)
    assert lost == [], f"a cancel was lost after {lost} loop steps"
