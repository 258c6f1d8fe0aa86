"""The console's garbage collection (console/ui/gc_pacing.py): the collector stays on, with the
console's thresholds, while the screen runs (CPython's defaults walked the whole heap several
times a second at 256 real-size nodes and held a key's frame up to 250 ms); the full collections
come on a schedule, never while a key is being answered; and the collector is back as it was once
the console is gone."""
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


async def test_full_collections_come_on_the_schedule_not_while_a_key_is_answered(monkeypatch):
    monkeypatch.setattr(gc_pacing, "COLLECT_EVERY_S", 0.1)
    monkeypatch.setattr(gc_pacing, "QUIET_S", 1.0)
    monkeypatch.setattr(turns, "HOLD_MAX_S", 120.0)        # a busy CI machine never lets the hold lapse
    collected: list[float] = []
    collect = gc_pacing.collect_young
    monkeypatch.setattr(gc_pacing, "collect_young", lambda: (collected.append(time.monotonic()), collect())[1])
    before = gc.get_threshold()
    app = IncidentApp([SimSource(name="solo", scenario="seed")], autostart=False)
    try:
        async with app.run_test(size=(80, 24)) as pilot:
            assert gc.isenabled(), "the collector stays on under the screen"
            assert gc.get_threshold() == (gc_pacing.YOUNG_THRESHOLD, gc_pacing.MIDDLE_THRESHOLD,
                                          gc_pacing.FULL_THRESHOLD)
            assert gc.get_freeze_count() > 0, "what the start built is frozen"
            assert turns.KEYS_FIRST.hold()
            await pilot.pause(0.4)                       # several collections come due meanwhile
            assert not collected, "a scheduled collection ran while a key was being answered"
            turns.KEYS_FIRST.release()
            released = time.monotonic()
            await pilot.pause(0.2)
            if time.monotonic() - released < gc_pacing.QUIET_S:    # (a busy machine may take longer)
                assert not collected, "a collection ran right after a key (the operator may type the next)"
            assert await eventually(lambda: bool(collected)), "the schedule never collected"
            assert collected[0] - released >= gc_pacing.QUIET_S * 0.9
            cycle = _garbage_cycle()
            assert await eventually(lambda: cycle() is None), "a cycle made meanwhile was never freed"
    finally:
        turns.KEYS_FIRST.release()
    assert gc.isenabled() and gc.get_freeze_count() == 0, "the collector is given back as it was"
    assert gc.get_threshold() == before


def test_the_benches_pacing_tunes_the_collector_and_gives_it_back():
    before = gc.get_threshold()
    with gc_pacing.Paced() as paced:
        assert gc.isenabled() and gc.get_threshold()[0] == gc_pacing.YOUNG_THRESHOLD
        paced.tick()
    assert gc.get_threshold() == before and gc.get_freeze_count() == 0
