"""The console's garbage collection (console/ui/gc_pacing.py): the automatic collector is off
while the screen runs (its collections held a key's frame up to 250 ms at 256 real-size nodes),
cycles are still freed on a schedule, never while a key is being answered, and the collector is
back as it was once the console is gone."""
from __future__ import annotations

import gc
import time
import weakref

from console import turns
from console.sources.sim import SimSource
from console.ui import gc_pacing
from console.ui.app import IncidentApp
from tests.polling import eventually


class _Cycle:
    def __init__(self) -> None:
        self.me = self


def _garbage_cycle() -> weakref.ref:
    return weakref.ref(_Cycle())


async def test_cycles_are_freed_on_the_schedule_not_while_a_key_is_answered(monkeypatch):
    monkeypatch.setattr(gc_pacing, "COLLECT_EVERY_S", 0.1)
    monkeypatch.setattr(gc_pacing, "QUIET_S", 1.0)
    monkeypatch.setattr(turns, "HOLD_MAX_S", 120.0)        # a busy CI machine never lets the hold lapse
    assert gc.isenabled()
    app = IncidentApp([SimSource(name="solo", scenario="seed")], autostart=False)
    try:
        async with app.run_test(size=(80, 24)) as pilot:
            assert not gc.isenabled(), "the automatic collector runs while the screen does"
            assert turns.KEYS_FIRST.hold()
            held = _garbage_cycle()
            await pilot.pause(0.4)                       # several collections come due meanwhile
            assert held() is not None, "a collection ran while a key was being answered"
            turns.KEYS_FIRST.release()
            released = time.monotonic()
            await pilot.pause(0.2)
            if time.monotonic() - released < gc_pacing.QUIET_S:    # (a busy machine may take longer)
                assert held() is not None, "a collection ran right after a key (the operator may type the next)"
            assert await eventually(lambda: held() is None), "the cycle was never freed"
            later = _garbage_cycle()
            assert await eventually(lambda: later() is None)
    finally:
        turns.KEYS_FIRST.release()
    assert gc.isenabled() and gc.get_freeze_count() == 0, "the collector is given back as it was"
