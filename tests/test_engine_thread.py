"""The session on a thread and loop of its own (console/session/engine.py), as `gpu-incident`
runs it: polls, checks and actions on the engine's loop, events drawn on the screen's, quitting
ends the thread. Simulated nodes; the app at 80x24."""
from __future__ import annotations

import asyncio
import threading

from console.clock import FakeClock
from console.incident import timeline
from console.session import Session
from console.session.engine import Engine, Mailbox
from console.sources.sim import SimSource
from console.ui.app import IncidentApp
from conftest import wait_for


async def test_events_from_another_thread_arrive_in_order_on_the_loop():
    loop = asyncio.get_running_loop()
    got: list[tuple[int, bool]] = []
    box = Mailbox(loop, lambda n: got.append((n, threading.current_thread() is threading.main_thread())))

    def produce():
        for i in range(500):
            box.put(i)
    t = threading.Thread(target=produce)
    t.start()
    t.join()
    for _ in range(200):
        if len(got) == 500:
            break
        await asyncio.sleep(0.01)
    assert [n for n, _ in got] == list(range(500)) and all(on_loop for _, on_loop in got)


async def test_background_events_wait_for_one_batch_and_an_urgent_one_takes_them_along():
    """Another node's poll does not wake the screen by itself: the polls that came within
    BATCH_S are drawn together; the node on screen (urgent) wakes it at once, in order."""
    loop = asyncio.get_running_loop()
    got: list[str] = []
    wakes: list[int] = []
    box = Mailbox(loop, got.append, urgent=lambda e: e.startswith("urgent"))
    real_call_soon = loop.call_soon_threadsafe

    def counting(*args):
        wakes.append(1)
        return real_call_soon(*args)
    loop.call_soon_threadsafe = counting
    try:
        t = threading.Thread(target=lambda: [box.put(f"bg{i}") for i in range(300)])
        t.start()
        t.join()
        assert len(wakes) == 1, "300 background events must cost one wake-up of the screen's loop"
        for _ in range(200):
            if len(got) == 300:
                break
            await asyncio.sleep(0.01)
        assert got == [f"bg{i}" for i in range(300)]
        got.clear()
        t = threading.Thread(target=lambda: (box.put("bg-a"), box.put("urgent"), box.put("bg-b")))
        t.start()
        t.join()
        for _ in range(200):
            if len(got) >= 2:
                break
            await asyncio.sleep(0.001)
        assert got[:2] == ["bg-a", "urgent"]
        for _ in range(200):
            if len(got) == 3:
                break
            await asyncio.sleep(0.01)
        assert got == ["bg-a", "urgent", "bg-b"]
    finally:
        loop.call_soon_threadsafe = real_call_soon


async def test_call_runs_on_the_engine_loop_and_cancelling_the_caller_cancels_it_there():
    engine = Engine(Session([]), threaded=True)
    engine.start()
    try:
        where = await engine.call(lambda: _thread_name())
        assert where == "engine"
        started, cancelled = threading.Event(), threading.Event()

        async def long():
            started.set()
            try:
                await asyncio.sleep(60)
            except asyncio.CancelledError:
                cancelled.set()
                raise
        task = asyncio.create_task(engine.call(long))
        await asyncio.to_thread(started.wait, 5)
        task.cancel()
        assert await asyncio.to_thread(cancelled.wait, 5), "the engine's coroutine was not cancelled"
    finally:
        await engine.close()
    assert not engine.running


async def test_close_cancels_what_is_left_on_the_engine_loop_and_waits_for_it():
    """A task still running on the engine's loop when the console quits (a node connection's
    clean-up, a poll asked for a moment before) is cancelled and finishes before the thread ends:
    left pending when the loop stopped, Python said "coroutine … was never awaited" at exit."""
    engine = Engine(Session([]), threaded=True)
    engine.start()
    started, cleaned = threading.Event(), threading.Event()

    async def lingering():
        started.set()
        try:
            await asyncio.sleep(60)
        finally:
            cleaned.set()
    engine.do(lambda: asyncio.get_running_loop().create_task(lingering()))
    assert await asyncio.to_thread(started.wait, 5)
    await engine.close()
    assert not engine.running and cleaned.is_set()


async def _thread_name() -> str:
    return threading.current_thread().name


async def test_the_console_with_its_engine_thread_polls_acts_and_quits(tmp_path):
    clock = FakeClock()
    source = SimSource(name="demo", scenario="graceful", clock=clock)
    tl = timeline.open_incident(tmp_path, "thread")
    app = IncidentApp([source], timeline=tl, interval=0.2, engine_thread=True, clock=clock)
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_for(pilot, lambda: "demo" in app.snapshots, tries=1000)   # a poll made on the engine thread
        assert app.engine.running and app.engine.loop is not asyncio.get_running_loop()
        await pilot.press("home", "space", "t")                       # SIGTERM the launcher: Confirm
        await wait_for(pilot, lambda: type(app.screen).__name__ == "ConfirmScreen", tries=1000)
        await pilot.press("y")
        await wait_for(pilot, lambda: any(e.kind == "observation" and e.outcome for e in tl.refresh()), tries=1000)
        outcome = next(e for e in tl.refresh() if e.kind == "observation" and e.outcome)
        assert "freed" in outcome.text, outcome.text
        # a check through the door, its result recorded on the engine; a hypothesis typed here lands there
        await pilot.press("w")
        await wait_for(pilot, lambda: any(e.kind == "check" for e in tl.refresh()), tries=2000)
        await pilot.press("escape")
        await pilot.press("h")
        await wait_for(pilot, lambda: type(app.screen).__name__ == "TextPrompt", tries=500)
        await pilot.press(*"the job exits on SIGTERM", "enter")
        await wait_for(pilot, lambda: any(e.kind == "hypothesis" for e in tl.refresh()), tries=1000)
        # the chart of the node in view comes with its readings, made on the engine's thread
        await wait_for(pilot, lambda: app.memory_series("demo").points, tries=1000)
        await pilot.press("q")
        # an action still being verified (a busy machine): the first q says so, a second quits
        await wait_for(pilot, lambda: not app.is_running or "q again to quit" in (app.activity.latest.text
                                                                                 if app.activity.latest else ""))
        if app.is_running:
            await pilot.press("q")
    assert not app.engine.running, "quitting ends the engine's thread"
    assert [e.text for e in timeline.load(tl.path)[0]][-1] == "console stopped"
    tl.close()
