"""Time, injectable: the one clock type every part of the console takes (``clock=``).

A clock gives ``now()`` (epoch seconds, for timestamps), ``monotonic()`` (for deadlines and
back-off) and ``async sleep(s)``. ``RealClock`` is the machine's; ``FakeClock`` is moved by
hand (``advance``) or by its own ``sleep``, so a scenario that takes 90 s of driver teardown
runs in microseconds under test. A source's clock is ``Source.clock`` (the simulated node's
for a simulated source), and the action layer times its verification with it.

Deadlines on a probe use ``timeout_ignoring_stalls``: measured on the work, not on loop lag,
so a stalled event loop never turns into a false "timed out" node.
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


#: how often a stall-proof timeout looks at the loop's clock (at most)
STALL_TICK_S = 0.25


class timeout_ignoring_stalls:
    """``async with timeout_ignoring_stalls(s):`` -- asyncio.timeout(s), charged only with time
    the event loop could have worked on the body.

    The deadline is measured on the work, not on loop lag: a synchronous callback or a long
    render elsewhere that holds the loop for 30 s does not make a 1 s probe "time out" the
    moment the loop comes back (its answer is usually sitting in a buffer by then). Every
    ``tick`` (≤ STALL_TICK_S) a callback charges the time since it last ran, but never more than
    two ticks: a longer gap is the loop stalled, not the work. Raises TimeoutError on expiry,
    like asyncio.timeout; ``charged`` is what the body was charged.
    """

    def __init__(self, seconds: float, tick: float | None = None) -> None:
        self.seconds = float(seconds)
        self.tick = tick if tick is not None else min(STALL_TICK_S, max(self.seconds / 4, 0.005))
        self.charged = 0.0
        self.expired = False
        self._handle: asyncio.TimerHandle | None = None

    async def __aenter__(self) -> "timeout_ignoring_stalls":
        self._loop = asyncio.get_running_loop()
        self._timeout = asyncio.timeout(None)
        await self._timeout.__aenter__()
        self._last = self._loop.time()
        self._handle = self._loop.call_at(self._last + min(self.tick, self.seconds), self._check)
        return self

    def _check(self) -> None:
        now = self._loop.time()
        self.charged += min(now - self._last, 2 * self.tick)
        self._last = now
        left = self.seconds - self.charged
        if left <= 0:
            self.expired = True
            self._handle = None
            self._timeout.reschedule(now)        # asyncio.timeout cancels the body now
        else:
            self._handle = self._loop.call_at(now + min(self.tick, left), self._check)

    async def __aexit__(self, exc_type, exc, tb) -> bool | None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
        return await self._timeout.__aexit__(exc_type, exc, tb)
