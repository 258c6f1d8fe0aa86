"""Blocking network reads in threads of their own, never in the event loop's default pool.

A read that a hostile or stuck server holds keeps its thread; in the loop's shared pool it would
take a place that a signal, a parse or a DNS lookup waits for, and at exit the interpreter joins
that pool's threads (quitting would wait on the server). ``in_daemon_thread`` runs each call in
a daemon thread (not joined at exit), at most ``limit`` at once per pool, and hands the result
back to the loop; the call itself must be bounded (console/sources/prometheus/client.py cuts
its socket at the answer's deadline).
"""
from __future__ import annotations

import asyncio
import threading
from typing import Any, Callable, TypeVar

T = TypeVar("T")


class DaemonPool:
    def __init__(self, name: str, limit: int = 8) -> None:
        self.name = name
        self.limit = limit
        self._running = 0
        self._lock = threading.Lock()

    @property
    def running(self) -> int:
        return self._running

    async def run(self, fn: Callable[..., T], *args: Any) -> T:
        """``fn(*args)`` in a daemon thread; RuntimeError when ``limit`` calls are still running
        (the reads before it have not come back: a stuck server, said as such)."""
        with self._lock:
            if self._running >= self.limit:
                raise RuntimeError(f"{self._running} earlier {self.name} reads have not come back")
            self._running += 1
        loop = asyncio.get_running_loop()
        future: asyncio.Future = loop.create_future()

        def deliver(ok: bool, value: Any) -> None:
            if not future.done():
                (future.set_result if ok else future.set_exception)(value)

        def work() -> None:
            try:
                result, ok = fn(*args), True
            except BaseException as exc:  # noqa: BLE001 - handed to the awaiting side
                result, ok = exc, False
            finally:
                with self._lock:
                    self._running -= 1
            try:
                loop.call_soon_threadsafe(deliver, ok, result)
            except RuntimeError:          # the loop is closed: nobody waits any more
                pass
        threading.Thread(target=work, name=self.name, daemon=True).start()
        return await future
