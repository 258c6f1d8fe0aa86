"""Garbage collection for a console that keeps a lot in memory and must answer keys.

Polling 256 real-size nodes (2,000 processes each) keeps some gigabyte of objects alive, and
every poll makes containers of thousands of entries (a node's table, its process list). A
collection walks every entry of every container younger than what it collects, and each entry
is a read of an object somewhere in that gigabyte: measured there, CPython's automatic young
collections took up to 150 ms of CPU each and its middle ones up to 250 ms, in both threads,
each holding the interpreter. They were most of the key→frame p99 (250 ms; 100 ms with the
collector off). And what they looked for is hardly there: a node polled 40 times leaves no
cyclic garbage at all (reference counting frees what a poll drops); a failed poll leaves ~76
objects (an exception's traceback), a frame of the screen a few.

So the automatic collector is off. Every COLLECT_EVERY_S, once the operator has typed nothing
for QUIET_S, one collection frees the cycles made since the last one, and what survives it is
moved out of the collector's sight (``gc.freeze``): the next one walks only what is younger.
Measured at 256 real-size nodes with a collection every 10 s: 0.4-0.7 s of CPU each (~1 M
objects walked), one pause instead of several a second; key→frame p99 ~85 ms. Its cost hardly
depends on how often it runs (what it walks is the nodes' live tables, rebuilt every poll), so it
runs rarely: every 30 s, the fan-out bench's windows met it, one key in ~60 waiting 0.8-0.95 s
(three runs of 60 keys, 2026-12-02); every 300 s and after 3 s without a key, none did (max
123 ms). What it leaves meanwhile is the screen's cycles, ~2,000-20,000 objects per 10 s. A
cycle that was still in use when frozen and became garbage later is freed by the full
collection every FULL_EVERY_S (it walks everything: seconds at that size, so rarely).
"""
from __future__ import annotations

import gc
import time

from console.turns import KEYS_FIRST

#: how often the cycles made since the last time are collected (and the survivors frozen)
COLLECT_EVERY_S = 300.0
#: ... once no key has been typed for this long (a person typing gets no pause between keys);
#: put off longer than MAX_DEFER_S, it runs at the first moment no key is being answered
QUIET_S = 3.0
MAX_DEFER_S = 600.0
#: how often everything, frozen or not, is collected once: one long pause
FULL_EVERY_S = 3600.0
#: a collection due while a key is being answered is tried again this much later
RETRY_S = 0.25


def collect_young() -> int:
    """Collect what is not frozen yet, then freeze what survived (the number of objects found
    unreachable)."""
    found = gc.collect()
    gc.freeze()
    return found


def collect_all() -> int:
    gc.unfreeze()
    return collect_young()


def pause_automatic() -> None:
    """The automatic collector off, and what exists now frozen (what the start built)."""
    gc.disable()
    gc.freeze()


def start(app) -> None:
    """The automatic collector off (pause_automatic); then collect on a schedule, never while a
    key is being answered."""
    pause_automatic()

    def when_free(collect):
        def run(due: float | None = None) -> None:
            if gc.isenabled():            # the screen is gone (stop): the collector is CPython's again
                return
            due = time.monotonic() if due is None else due
            overdue = time.monotonic() - due > MAX_DEFER_S
            # a key being answered (its frame first: console/turns.py), or one typed just now
            if KEYS_FIRST.holding or (KEYS_FIRST.idle_s < QUIET_S and not overdue):
                app.set_timer(RETRY_S, lambda: run(due))
            else:
                collect()
        return run

    app.set_interval(COLLECT_EVERY_S, when_free(collect_young), name="gc young")
    app.set_interval(FULL_EVERY_S, when_free(collect_all), name="gc full")


class Paced:
    """The same pacing for a loop with no screen (the benches that stand for the console):
    ``with Paced() as paced:`` … ``paced.tick()`` once per round."""

    def __enter__(self) -> "Paced":
        pause_automatic()
        self._last = time.monotonic()
        return self

    def tick(self) -> None:
        if time.monotonic() - self._last >= COLLECT_EVERY_S:
            collect_young()
            self._last = time.monotonic()

    def __exit__(self, *exc) -> None:
        stop()


def stop() -> None:
    """The automatic collector back on (the console's screen is gone)."""
    gc.unfreeze()
    gc.enable()
