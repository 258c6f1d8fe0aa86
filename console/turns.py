"""Keys first: the operator's key is answered before the engine's next poll is worked on.

The screen and the engine (SSH reads, parsing, diagnosis) share one interpreter, on one
loop or (console/session/engine.py) on two threads whose turns the interpreter's lock decides. At 256 nodes
polled every second the engine's work arrives as hundreds of small steps a second; a key
that lands among them waits behind every step already queued, then its frame waits behind
the next ones. So a key *holds* the engine (``KEYS_FIRST.hold``, called by the UI when a key
or click arrives): the engine waits until the UI has drawn the frame that answers it
(``release``), and never longer than HOLD_MAX_S. Between two holds the engine runs at least
REOPEN_MIN_S, so a held-down key cannot starve the polls.

Where the engine waits, all through public asyncio and threading calls:

- ``turn()`` (await): at the steps of a poll that can wait for the loop (before a probe's parse);
- ``pause()``: inside one long step, on the engine's own thread only (at the start of a poll,
  between the phases of a real-size probe's parse, between diagnosis rules, before a poll's
  result is published): the whole thread waits there, so the screen's thread answers the key
  with the interpreter to itself rather than every other millisecond (the lock's switch
  interval);
- and on a loop of the engine's own thread (``own_thread``), a hold also queues one wait on that
  loop (``call_soon_threadsafe``): the loop stops there, at the latest after the steps already
  due, if no ``pause`` stopped it first.

It used to stop the engine's loop between any two of its steps by replacing asyncio's private
queue of due callbacks (``loop._ready``) with one that waited on every take (CPython 3.11-3.13
only, silently off elsewhere); these cooperative points replace it. A hold costs a poll tens of
milliseconds, never its deadline (the poll deadlines do not count a stalled loop:
clock.timeout_ignoring_stalls).

No Textual here: the UI calls ``hold``/``release``; the sources and the monitor call ``turn`` and
``pause``.
"""
from __future__ import annotations

import asyncio
import threading
import time
import weakref

#: the longest one key holds the engine (a frame that never comes releases it here)
HOLD_MAX_S = 0.1
#: after a release, the engine runs at least this long before a key holds it again
REOPEN_MIN_S = 0.05


class KeysFirst:
    """Thread-safe: the screen's loop holds and releases, the engine's loop (its own thread,
    console/session/engine.py, or the same loop) waits at ``turn``."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._until = 0.0                  # monotonic: a hold is on until then (or its release)
        self._loop: asyncio.AbstractEventLoop | None = None   # the loop of the hold
        self._waiters: list[tuple[asyncio.AbstractEventLoop, asyncio.Event]] = []
        self._released_at = float("-inf")
        self._open = threading.Event()     # set while no hold is on: what a stalled loop waits on
        self._open.set()

    @property
    def holding(self) -> bool:
        """A hold is on: not released, not past HOLD_MAX_S, and its loop still runs (a hold left
        by a loop that is gone holds nothing)."""
        return (time.monotonic() < self._until and self._loop is not None
                and not self._loop.is_closed())

    def hold(self, loop: asyncio.AbstractEventLoop | None = None) -> bool:
        """Hold the engine until ``release`` (or HOLD_MAX_S). Call on the screen's loop, or from
        another thread naming it (``loop``). The engine's own loops (``own_thread``) are each
        queued a wait. False when it did not hold: already holding, or released less than
        REOPEN_MIN_S ago."""
        if loop is None:
            try:
                loop = asyncio.get_running_loop()
            except RuntimeError:
                return False
        with self._lock:
            now = time.monotonic()
            if self._until and now >= self._until:          # the last hold ran out unreleased
                self._released_at, self._until = self._until, 0.0
            if self.holding or now - self._released_at < REOPEN_MIN_S:
                return False
            self._until, self._loop, self._waiters = now + HOLD_MAX_S, loop, []
            self._open.clear()
        for engine in list(_OWN_THREAD_LOOPS):     # their loops wait too, after the steps already due
            if engine is not loop and not engine.is_closed():
                try:
                    engine.call_soon_threadsafe(self.wait_if_held)
                except RuntimeError:           # closed meanwhile
                    pass
        return True

    @property
    def idle_s(self) -> float:
        """Seconds since the last key's hold ended (0 while one is on; inf before the first):
        how long the operator has not been typing."""
        if self.holding:
            return 0.0
        return max(0.0, time.monotonic() - max(self._released_at, self._until or float("-inf")))

    @property
    def open(self) -> bool:
        """No hold is on (cheap: asked at every ``pause``)."""
        return self._open.is_set()

    def stall(self) -> None:
        """Wait here, the whole thread, while the hold is on (the engine's own thread, at a
        ``pause`` or the wait ``hold`` queued; the caller saw ``open`` False)."""
        left = self._until - time.monotonic()
        if left > 0:
            self._open.wait(left)

    def wait_if_held(self) -> None:
        """``stall`` while a hold is on (queued on an engine loop of its own thread by ``hold``)."""
        if not self.open:
            self.stall()

    def release(self) -> None:
        with self._lock:
            if not self._until:
                return
            self._released_at = min(time.monotonic(), self._until)
            self._until = 0.0
            waiters, self._waiters = self._waiters, []
            self._open.set()
        for loop, opened in waiters:
            try:
                loop.call_soon_threadsafe(opened.set)
            except RuntimeError:            # that loop is gone
                pass

    async def turn(self) -> None:
        """Wait while a key holds the engine (no wait at all when none does)."""
        if not self.holding:
            return
        opened = asyncio.Event()
        with self._lock:
            left = self._until - time.monotonic()
            if left <= 0:
                return
            self._waiters.append((asyncio.get_running_loop(), opened))
        try:
            await asyncio.wait_for(opened.wait(), left)
        except TimeoutError:                # the frame never came: HOLD_MAX_S is the bound
            pass


#: the one gate of the console's event loop
KEYS_FIRST = KeysFirst()


# ---------------------------------------------------------------- where heavy work runs
_OWN_THREAD_LOOPS: "weakref.WeakSet[asyncio.AbstractEventLoop]" = weakref.WeakSet()


def own_thread(loop: asyncio.AbstractEventLoop) -> None:
    """``loop`` is the engine's own (console/session/engine.py): no screen is drawn on it, heavy
    work runs inline there (``offload``), and a key's hold queues a wait on it (``hold``)."""
    _OWN_THREAD_LOOPS.add(loop)


#: the threads a key may stop in the middle of a step (the engine's own: never the screen's)
_STALLS: set[int] = set()


def stalls_here() -> None:
    """This thread (the engine's) may wait at ``pause`` while a key is held."""
    _STALLS.add(threading.get_ident())


def stalls_end() -> None:
    """This thread ends (a later thread may get its identifier): it no longer waits at ``pause``."""
    _STALLS.discard(threading.get_ident())


def pause() -> None:
    """A point inside one long step of the engine (between the phases of a real-size probe's
    parse, between diagnosis rules): while a key is held, the engine's thread waits here, so the
    screen's thread answers the key with the interpreter to itself rather than every other
    millisecond (the lock's switch interval). On any other thread, or with no key held: nothing."""
    if not KEYS_FIRST.open and threading.get_ident() in _STALLS:
        KEYS_FIRST.stall()


def offload() -> bool:
    """Should heavy work (a big probe's parse, a big node's diagnosis) go to a worker thread?
    Yes on a loop that also draws the screen (keys would wait on it); no on the engine's own
    thread, where a worker would only be one more thread contending for the interpreter (at 256
    real-size nodes six parse workers left the screen's thread a sixth of it: keys took 0.5 s)."""
    try:
        return asyncio.get_running_loop() not in _OWN_THREAD_LOOPS
    except RuntimeError:
        return True
