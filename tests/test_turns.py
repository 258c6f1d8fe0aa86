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
