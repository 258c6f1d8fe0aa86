"""Keys first: the operator's key is answered before the engine's next poll is worked on.

The screen and the engine (SSH reads, parsing, diagnosis) share one interpreter, on one
loop or (console/session/engine.py) on two threads whose turns the interpreter's lock decides. At 256 nodes
polled every second the engine's work arrives as hundreds of small steps a second; a key
that lands among them waits behind every step already queued, then its frame waits behind
the next ones. So a key *holds* the engine (``KEYS_FIRST.hold``, called by the UI when a key
or click arrives): the engine's heavy steps wait at ``turn()`` until the UI has drawn the
frame that answers it (``release``), and never longer than HOLD_MAX_S. On the engine's own
thread (``own_thread``) the hold stops its whole loop, not only the parses: the loop's next
step waits (SSH reads, decryption, diagnosis all pause, the replies wait in the sockets) so
the screen's thread has the interpreter to itself for the key's frame. At 256 real-size nodes
the engine's other steps still took the interpreter half the time and a key's frame p99 was
250 ms. A hold costs a poll tens of milliseconds, never its deadline (the poll deadlines do
not count a stalled loop: clock.timeout_ignoring_stalls). Between two holds the engine runs at
least REOPEN_MIN_S,
so a held-down key cannot starve the polls.

No Textual here: the UI calls ``hold``/``release``; the sources and the monitor call ``turn``.
"""
from __future__ import annotations

import asyncio
import collections
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
        another thread naming it (``loop``: Textual's input thread, the moment a key is read).
        False when it did not hold: already holding, or released less than REOPEN_MIN_S ago."""
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
        """No hold is on (cheap: asked before every step of an engine loop of its own thread)."""
        return self._open.is_set()

    def stall(self) -> None:
        """Wait here, the whole thread, while the hold is on (an engine loop of its own thread, between
        two of its steps: ``own_thread``; the caller saw ``open`` False)."""
        left = self._until - time.monotonic()
        if left > 0:
            self._open.wait(left)

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


def own_thread(loop: asyncio.AbstractEventLoop) -> bool:
    """``loop`` is the engine's own (console/session/engine.py): no screen is drawn on it, and a
    key's hold stops it between any two of its steps (True) or only at ``turn`` (False: a loop
    whose ready queue is not asyncio's own deque)."""
    _OWN_THREAD_LOOPS.add(loop)
    ready = getattr(loop, "_ready", None)
    if type(ready) is not collections.deque:
        return False
    loop._ready = _GatedReady(ready)      # asyncio's queue of the callbacks due (CPython 3.11-3.13)
    return True


class _GatedReady(collections.deque):
    """An event loop's queue of due callbacks whose every take waits while a key holds the engine.
    asyncio runs each callback it takes off the queue with ``popleft``: gating there stops the
    loop between two steps (an SSH packet, a parse, a diagnosis), not only at ``turn``. A
    callback queued from another thread (``call_soon_threadsafe``) waited behind every callback
    already due: at 256 nodes 50 to 200 ms, longer than the key's whole frame."""

    def popleft(self):
        if not KEYS_FIRST.open:
            KEYS_FIRST.stall()
        return super().popleft()


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
