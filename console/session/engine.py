"""The session off the screen's loop: its own thread and event loop, and the two doors a client
on another loop uses — ``call`` (await a coroutine that runs on the engine's loop) and ``do`` (a
plain call made there) — plus ``Mailbox``, which hands the session's events to the client's loop
in batches (one wake-up for whatever came since the last).

Why: with 256 nodes polled every second the engine has hundreds of small steps a second (SSH
reads, parsing, diagnosis); on the screen's loop a key waited behind each of them. On a thread
of its own the engine's steps and the screen's frames interleave at the interpreter's switch
interval instead. Unthreaded (``threaded=False``: the tests, the headless clients that have no
screen to keep responsive) both doors call straight through on the caller's loop.

Everything that touches a node's connection (polls, checks, signals, Slurm's SSH client) runs on
the engine's loop: an asyncssh connection belongs to the loop that made it.
"""
from __future__ import annotations

import asyncio
import collections
import logging
import threading
from typing import Any, Awaitable, Callable, TypeVar

from console import turns
from console.session.core import Session

log = logging.getLogger("gpu_incident.engine")
T = TypeVar("T")

#: how long closing waits for the engine's loop to wind down
CLOSE_TIMEOUT_S = 15.0


class Engine:
    def __init__(self, session: Session, *, threaded: bool = True) -> None:
        self.session = session
        self.threaded = threaded
        self.loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Start the engine's thread and loop (unthreaded: nothing to start)."""
        if not self.threaded or self._thread is not None:
            return
        ready = threading.Event()
        loop = self.loop = asyncio.new_event_loop()
        loop.set_exception_handler(_log_exception)
        turns.own_thread(loop)          # heavy work runs inline here, not in more threads; a key stops it

        def run() -> None:
            turns.stalls_here()
            try:
                asyncio.set_event_loop(loop)
                loop.call_soon(ready.set)
                loop.run_forever()
                loop.close()
            finally:
                turns.stalls_end()
        self._thread = threading.Thread(target=run, name="engine", daemon=True)
        self._thread.start()
        ready.wait(CLOSE_TIMEOUT_S)

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def _live(self) -> asyncio.AbstractEventLoop | None:
        """The engine's loop while its thread runs; None unthreaded (or once stopped)."""
        return self.loop if self.running else None

    async def call(self, make: Callable[[], Awaitable[T]]) -> T:
        """``await make()`` on the engine's loop; cancelling the caller cancels it there."""
        loop = self._live()
        if loop is None:
            return await make()
        future = asyncio.run_coroutine_threadsafe(_awaited(make), loop)
        try:
            return await asyncio.wrap_future(future)
        except asyncio.CancelledError:
            future.cancel()
            raise

    def do(self, fn: Callable[..., Any], *args: Any) -> None:
        """``fn(*args)`` on the engine's loop, soon (now, unthreaded)."""
        loop = self._live()
        if loop is not None:
            loop.call_soon_threadsafe(fn, *args)
        else:
            fn(*args)

    def hop(self, fn: Callable[..., Any]) -> Callable[..., None]:
        """A callback the engine may call that runs ``fn`` on the caller's loop (a check's progress)."""
        if not self.running:
            return fn
        loop = asyncio.get_running_loop()

        def hopped(*args: Any) -> None:
            loop.call_soon_threadsafe(fn, *args)
        return hopped

    async def close(self, note: str | None = None) -> None:
        """Stop the session (bounded), what is left on the engine's loop, and its thread."""
        try:
            await self.call(lambda: self.session.stop(note))
        finally:
            if self._live() is not None:
                # tasks the nodes' connections start as they close (12 SSH nodes' clean-ups), or a
                # poll asked for a moment before: cancelled and waited for (bounded), not left
                # pending when the loop stops — Python said "coroutine … was never awaited" at exit
                try:
                    await self.call(_cancel_the_rest)
                except Exception:  # noqa: BLE001 - closing goes on whatever a task did
                    log.exception("closing the engine's tasks")
            loop, thread = self._live(), self._thread
            if loop is not None and thread is not None:
                loop.call_soon_threadsafe(loop.stop)
                await asyncio.to_thread(thread.join, CLOSE_TIMEOUT_S)
            self._thread = None


async def _awaited(make: Callable[[], Awaitable[T]]) -> T:
    return await make()


async def _cancel_the_rest() -> None:
    """Every other task on this loop, cancelled and waited for (at most CLOSE_TIMEOUT_S)."""
    here = asyncio.current_task()
    rest = [t for t in asyncio.all_tasks() if t is not here and not t.done()]
    for task in rest:
        task.cancel()
    if rest:
        await asyncio.wait(rest, timeout=CLOSE_TIMEOUT_S)


def _log_exception(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
    """Never to stderr (the screen is drawn there): to the debug log."""
    exc = context.get("exception")
    log.error("engine loop: %s", context.get("message"), exc_info=exc if isinstance(exc, BaseException) else None)


#: how long a background event (another node's poll) may wait for the client's loop to take it
BATCH_S = 0.1


class Mailbox:
    """Events put from any thread, handled on ``loop`` in order, in batches. An urgent event
    (``urgent(event)`` True: the node on screen, an action's news) wakes the loop at once; the
    rest are taken with it or at most BATCH_S later. At 256 nodes polled every second, waking the
    screen's loop for each poll cost the engine ~9% of its CPU (a write to the loop's wake-up
    socket each) and the screen a wake-up every 4 ms; those rows are drawn twice a second anyway."""

    def __init__(self, loop: asyncio.AbstractEventLoop, handle: Callable[[Any], None],
                 urgent: Callable[[Any], bool] = lambda _event: True) -> None:
        self.loop = loop
        self.handle = handle
        self.urgent = urgent
        self._queue: collections.deque = collections.deque()
        self._woken = False           # a drain is due now (call_soon_threadsafe sent)
        self._timed = False           # a drain is due within BATCH_S

    def put(self, event: Any) -> None:
        self._queue.append(event)
        try:
            if self.urgent(event):
                if not self._woken:
                    self._woken = True
                    self.loop.call_soon_threadsafe(self._drain)
            elif not self._timed and not self._woken:
                self._timed = True
                self.loop.call_soon_threadsafe(self.loop.call_later, BATCH_S, self._drain)
        except RuntimeError:          # the client's loop is gone (shutting down)
            self._woken = self._timed = False

    def _drain(self) -> None:
        self._woken = self._timed = False
        while self._queue:
            event = self._queue.popleft()
            try:
                self.handle(event)
            except Exception:  # noqa: BLE001 - one bad event must not lose the others
                log.exception("handling %s", type(event).__name__)
