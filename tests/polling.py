"""Bounded polling for tests: wait for a condition, never for a fixed time.

The bound is generous (a busy 2-core CI machine); a condition that never comes fails the test
with the caller's message instead of hanging it.
"""
from __future__ import annotations

import asyncio
import time
from typing import Callable

BOUND_S = 20.0


async def eventually(predicate: Callable[[], object], bound_s: float = BOUND_S, step_s: float = 0.02) -> bool:
    """True as soon as ``predicate()`` is; False when it is still false after ``bound_s``."""
    deadline = time.monotonic() + bound_s
    while not predicate():
        if time.monotonic() > deadline:
            return False
        await asyncio.sleep(step_s)
    return True


def until(predicate: Callable[[], object], bound_s: float = BOUND_S, step_s: float = 0.01) -> bool:
    """eventually(), for code that is not async."""
    deadline = time.monotonic() + bound_s
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(step_s)
    return True
