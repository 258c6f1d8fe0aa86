"""Injectable time for the simulator: the real clock, or a fake one tests move by hand.

Both give ``now()`` in epoch seconds and ``async sleep(s)``. ``FakeClock.sleep``
moves the fake time forward at once, so a scenario that takes 90 s of driver
teardown runs in microseconds under test.
"""
from __future__ import annotations

import asyncio
import time

#: 2025-11-29T09:53:20Z, a fixed starting point for fake time.
DEFAULT_FAKE_EPOCH = 1764410000.0


class RealClock:
    def now(self) -> float:
        return time.time()

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(max(0.0, seconds))


class FakeClock:
    def __init__(self, start: float = DEFAULT_FAKE_EPOCH) -> None:
        self._now = float(start)

    def now(self) -> float:
        return self._now

    def advance(self, seconds: float) -> None:
        self._now += max(0.0, float(seconds))

    async def sleep(self, seconds: float) -> None:
        self.advance(seconds)
        await asyncio.sleep(0)
