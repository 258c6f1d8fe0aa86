"""Keys first: the operator's key is answered before the engine's next poll is worked on.

One event loop runs the screen and the engine (SSH reads, parsing, diagnosis). At 256 nodes
polled every second the engine's work arrives as hundreds of small steps a second; a key
that lands among them waits behind every step already queued, then its frame waits behind
the next ones. So a key *holds* the engine (``KEYS_FIRST.hold``, called by the UI when a key
or click arrives): the engine's heavy steps wait at ``turn()`` until the UI has drawn the
frame that answers it (``release``), and never longer than HOLD_MAX_S. What is in flight
keeps flowing (replies are read off the sockets; only parsing waits), so a hold costs a poll
tens of milliseconds, never its deadline (the poll deadlines do not count a stalled loop:
clock.timeout_ignoring_stalls). Between two holds the engine runs at least REOPEN_MIN_S,
so a held-down key cannot starve the polls.

No Textual here: the UI calls ``hold``/``release``; the sources and the monitor call ``turn``.
"""
from __future__ import annotations

import asyncio
import time
import weakref

#: the longest one key holds the engine (a frame that never comes releases it here)
HOLD_MAX_S = 0.1
#: after a release, the engine runs at least this long before a key holds it again
REOPEN_MIN_S = 0.05


class KeysFirst:
    def __init__(self) -> None:
        self._open: asyncio.Event | None = None        # a new one per hold, set by its release
        self._loop: asyncio.AbstractEventLoop | None = None   # the loop of the hold
        self._timer: asyncio.TimerHandle | None = None
        self._released_at = float("-inf")

    @property
    def holding(self) -> bool:
        """A hold of this loop is on (a hold left by a loop that is gone holds nothing)."""
        if self._open is None or self._open.is_set():
            return False
        try:
            return asyncio.get_running_loop() is self._loop
        except RuntimeError:
            return False

    def hold(self) -> bool:
        """Hold the engine until ``release`` (or HOLD_MAX_S). Call on the event loop. False
        when it did not hold: already holding, or released less than REOPEN_MIN_S ago."""
        if self.holding or time.monotonic() - self._released_at < REOPEN_MIN_S:
            return False
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return False
        self._open, self._loop = asyncio.Event(), loop
        self._timer = loop.call_later(HOLD_MAX_S, self.release)
        return True

    def release(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._open is not None and not self._open.is_set():
            self._released_at = time.monotonic()
            self._open.set()

    async def turn(self) -> None:
        """Wait while a key holds the engine (no wait at all when none does)."""
        if self.holding:
            assert self._open is not None
            await self._open.wait()


#: the one gate of the console's event loop
KEYS_FIRST = KeysFirst()


# ---------------------------------------------------------------- where heavy work runs
_OWN_THREAD_LOOPS: "weakref.WeakSet[asyncio.AbstractEventLoop]" = weakref.WeakSet()


def own_thread(loop: asyncio.AbstractEventLoop) -> None:
    """``loop`` is the engine's own (console/session/engine.py): no screen is drawn on it."""
    _OWN_THREAD_LOOPS.add(loop)


def offload() -> bool:
    """Should heavy work (a big probe's parse, a big node's diagnosis) go to a worker thread?
    Yes on a loop that also draws the screen (keys would wait on it); no on the engine's own
    thread, where a worker would only be one more thread contending for the interpreter (at 256
    real-size nodes six parse workers left the screen's thread a sixth of it: keys took 0.5 s)."""
    try:
        return asyncio.get_running_loop() not in _OWN_THREAD_LOOPS
    except RuntimeError:
        return True
