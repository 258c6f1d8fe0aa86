"""Keys first (console/turns.py): a key holds the engine's parsing until its frame is drawn,
never longer than HOLD_MAX_S, and a held-down key cannot starve the polls."""
from __future__ import annotations

import asyncio
import time

from console import turns
from console.turns import KeysFirst


async def test_a_hold_keeps_the_engine_waiting_until_it_is_released():
    gate = KeysFirst()
    await asyncio.wait_for(gate.turn(), 1)           # nobody holds: no wait
    assert gate.hold() and gate.holding
    waiter = asyncio.create_task(gate.turn())
    await asyncio.sleep(0.02)
    assert not waiter.done(), "the engine waits while a key is answered"
    gate.release()
    await asyncio.wait_for(waiter, 1)
    assert not gate.holding


async def test_a_frame_that_never_comes_releases_the_engine_after_hold_max(monkeypatch):
    monkeypatch.setattr(turns, "HOLD_MAX_S", 0.05)
    gate = KeysFirst()
    assert gate.hold()
    t0 = time.monotonic()
    await asyncio.wait_for(gate.turn(), 5)
    assert time.monotonic() - t0 < 5 and not gate.holding


async def test_a_held_down_key_leaves_the_engine_its_turn(monkeypatch):
    monkeypatch.setattr(turns, "REOPEN_MIN_S", 10.0)
    gate = KeysFirst()
    assert gate.hold()
    gate.release()
    assert not gate.hold(), "right after a release the engine runs before the next hold"
    await asyncio.wait_for(gate.turn(), 1)


def test_a_hold_left_by_a_finished_loop_holds_nothing():
    gate = KeysFirst()

    async def left_holding():
        assert gate.hold()
    asyncio.run(left_holding())

    async def later():
        assert not gate.holding
        await asyncio.wait_for(gate.turn(), 1)
    asyncio.run(later())


async def test_a_key_on_the_screens_loop_holds_the_engine_on_its_own_thread():
    """The engine thread (console/session/engine.py): the hold is taken on the screen's loop and
    waited on at the engine's; its release wakes the engine's loop."""
    import threading
    gate = KeysFirst()
    engine_loop = asyncio.new_event_loop()
    thread = threading.Thread(target=engine_loop.run_forever, daemon=True)
    thread.start()
    try:
        assert gate.hold()
        waiting = asyncio.run_coroutine_threadsafe(gate.turn(), engine_loop)
        await asyncio.sleep(0.03)
        assert not waiting.done(), "the engine's turn waits while the screen answers a key"
        gate.release()
        await asyncio.wait_for(asyncio.wrap_future(waiting), 2)
    finally:
        engine_loop.call_soon_threadsafe(engine_loop.stop)
        thread.join(5)
        engine_loop.close()


async def test_a_key_stops_the_engines_whole_loop_after_the_steps_already_due_not_only_its_parses():
    """The engine's loop of its own thread waits while a key is answered, not only the parses
    that ask for their turn: at 256 real-size nodes its SSH reads and diagnoses took the
    interpreter half the time and a key's frame waited behind them (key→frame p99 250 ms). The
    hold queues a wait on that loop (a public call_soon_threadsafe, not its private queue)."""
    import threading
    engine_loop = asyncio.new_event_loop()
    turns.own_thread(engine_loop)
    steps = [0]

    def step() -> None:              # a busy engine: one step after another, never awaiting a turn
        steps[0] += 1
        engine_loop.call_soon(step)
    thread = threading.Thread(target=engine_loop.run_forever, daemon=True)
    thread.start()
    try:
        engine_loop.call_soon_threadsafe(step)
        while steps[0] < 100:
            await asyncio.sleep(0.005)
        assert turns.KEYS_FIRST.hold()
        await asyncio.sleep(0.01)    # the step in flight ends
        held_at = steps[0]
        await asyncio.sleep(0.05)
        assert steps[0] - held_at <= 1, "the engine's loop went on while a key was answered"
        turns.KEYS_FIRST.release()
        while steps[0] < held_at + 100:
            await asyncio.sleep(0.005)
    finally:
        turns.KEYS_FIRST.release()
        engine_loop.call_soon_threadsafe(engine_loop.stop)
        thread.join(5)
        engine_loop.close()


async def test_a_key_holds_the_engine_from_its_arrival_until_the_frame_that_answers_it(monkeypatch):
    """The App takes every key in its public ``on_event`` (console/ui/app.py): the hold starts as
    the key comes, and ends after the frame drawn once its binding ran, not at HOLD_MAX_S."""
    from console.sources.sim import SimSource
    from console.ui import app as app_module
    from console.ui.app import IncidentApp

    monkeypatch.setattr(turns, "REOPEN_MIN_S", 0.0)
    monkeypatch.setattr(turns, "HOLD_MAX_S", 120.0)      # only the frame releases it
    seen: list[str] = []

    class Gate(KeysFirst):
        def hold(self, loop=None) -> bool:
            seen.append("hold")
            return super().hold(loop)

        def release(self) -> None:
            if self.holding:
                seen.append("release")
            super().release()
    gate = Gate()
    monkeypatch.setattr(app_module, "KEYS_FIRST", gate)
    app = IncidentApp([SimSource(name="solo", scenario="seed")], autostart=False, engine_thread=False)
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot.pause()
        seen.clear()
        await pilot.press("down")                      # the process table's cursor: a binding
        for _ in range(50):
            if not gate.holding:
                break
            await pilot.pause(0.02)
        assert seen == ["hold", "release"], seen
        assert not gate.holding, "the frame that answered the key released the engine"


def test_the_engine_thread_waits_at_a_pause_while_a_key_is_held_and_no_other_thread_does(monkeypatch):
    """``pause`` inside a long step (a real-size parse, a diagnosis) stops the engine's thread
    while a key is held, until the release; the screen's thread never waits there."""
    import threading

    monkeypatch.setattr(turns, "REOPEN_MIN_S", 0.0)
    gate = KeysFirst()
    monkeypatch.setattr(turns, "KEYS_FIRST", gate)
    loop = asyncio.new_event_loop()
    try:
        assert gate.hold(loop)
        t0 = time.monotonic()
        turns.pause()                          # not the engine's thread: no wait at all
        assert gate.holding, "the screen's thread went straight on"
        passed = threading.Event()

        def engine() -> None:
            turns.stalls_here()
            try:
                turns.pause()
                passed.set()
            finally:
                turns.stalls_end()
        t = threading.Thread(target=engine)
        t.start()
        assert not passed.wait(0.03), "the engine went on while the key was held"
        gate.release()
        assert passed.wait(5), "the release lets the engine go on"
        t.join()
        assert time.monotonic() - t0 < 5
    finally:
        loop.close()
