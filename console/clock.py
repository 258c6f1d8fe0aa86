"""Time, injectable: the one clock type every part of the console takes (``clock=``).

A clock gives ``now()`` (epoch seconds, for timestamps), ``monotonic()`` (for deadlines and
back-off) and ``async sleep(s)``. ``RealClock`` is the machine's; ``FakeClock`` is moved by
hand (``advance``) or by its own ``sleep``, so a scenario that takes 90 s of driver teardown
runs in microseconds under test. A source's clock is ``Source.clock`` (the simulated node's
for a simulated source), and the action layer times its verification with it.
"""
from __future__ import annotations

import asyncio
import time
from typing import Protocol

#: 2025-11-29T09:53:20Z, a fixed starting point for fake time.
DEFAULT_FAKE_EPOCH = 1764410000.0


class Clock(Protocol):
    def now(self) -> float: ...
    def monotonic(self) -> float: ...
    async def sleep(self, seconds: float) -> None: ...


class RealClock:
    def now(self) -> float:
        return time.time()

    def monotonic(self) -> float:
        return time.monotonic()

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(max(0.0, seconds))


REAL_CLOCK = RealClock()


class FakeClock:
    def __init__(self, start: float = DEFAULT_FAKE_EPOCH) -> None:
        self._now = float(start)

    def now(self) -> float:
        return self._now

    def monotonic(self) -> float:
        return self._now

    def advance(self, seconds: float) -> None:
        self._now += max(0.0, float(seconds))

    async def sleep(self, seconds: float) -> None:
        self.advance(seconds)
        await asyncio.sleep(0)
