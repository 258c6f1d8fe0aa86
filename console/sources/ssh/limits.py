"""How many SSH handshakes may be in flight: per sshd (its MaxStartups) and overall."""
from __future__ import annotations

import asyncio
import contextlib
import weakref

#: SSH handshakes in flight at once to one sshd (stock MaxStartups starts dropping at 10)
MAX_HANDSHAKES_PER_SSHD = 8
#: and across every node (CPU, file descriptors)
MAX_HANDSHAKES_TOTAL = 64


class ConnectLimiter:
    """Bounds SSH handshakes in flight: at most ``per_endpoint`` to one sshd (a node, or the
    jump host every node behind it goes through) so its MaxStartups never drops one, and
    ``total`` overall. A node that does not answer holds only its own endpoint's slots, so
    dead nodes never delay the connects of live ones. One limiter per event loop."""

    _by_loop: "weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, ConnectLimiter]" = \
        weakref.WeakKeyDictionary()

    def __init__(self, per_endpoint: int = MAX_HANDSHAKES_PER_SSHD,
                 total: int = MAX_HANDSHAKES_TOTAL) -> None:
        self.per_endpoint = per_endpoint
        self._total = asyncio.Semaphore(total)
        self._per: dict[object, asyncio.Semaphore] = {}
        self._active: dict[object, int] = {}
        self.peak = 0                   # most handshakes seen in flight to one endpoint

    @classmethod
    def for_loop(cls) -> "ConnectLimiter":
        loop = asyncio.get_running_loop()
        limiter = cls._by_loop.get(loop)
        if limiter is None:
            limiter = cls._by_loop[loop] = cls()
        return limiter

    @contextlib.asynccontextmanager
    async def slot(self, endpoint: object):
        sem = self._per.setdefault(endpoint, asyncio.Semaphore(self.per_endpoint))
        async with sem, self._total:
            self._active[endpoint] = n = self._active.get(endpoint, 0) + 1
            self.peak = max(self.peak, n)
            try:
                yield
            finally:
                self._active[endpoint] -= 1
