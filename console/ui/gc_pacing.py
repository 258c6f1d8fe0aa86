"""Garbage collection for a console that keeps a lot in memory and must answer keys.

Polling 256 real-size nodes (2,000 processes each) keeps some gigabyte of objects alive, and
every poll makes containers of thousands of entries (a node's table, its process list). A
collection walks every entry of every container in the generations it collects, and each entry
is a read of an object somewhere in that gigabyte. With CPython's default thresholds (700, 10,
10) the middle and full collections came several times a second and walked most of the heap:
measured there, up to 150 ms of CPU for a young one and 250 ms for a middle one, each holding the
interpreter, most of the key→frame p99 (250 ms; 100 ms with the collector off). And what they
look for is hardly there: a node polled 40 times leaves no cyclic garbage at all (reference
counting frees what a poll drops); a failed poll leaves ~76 objects (an exception's traceback), a
frame of the screen a few.

So the collector stays on (it was switched off for the whole process before, ``gc.disable``:
every library in the process then kept its cycles until the schedule below, and a test or a
bench had to remember to switch it back) but is tuned, through its public thresholds:

- the youngest generation is collected every YOUNG_THRESHOLD new containers instead of 700: a
  collection walks only what is young, so it stays short, and comes tens rather than thousands
  of times a second;
- the middle one every MIDDLE_THRESHOLD young ones (what it walks is bounded by their product);
- the oldest, the one that walks the whole heap, effectively never on its own (FULL_THRESHOLD
  middle collections; in CPython 3.11-3.13 also only once the long-lived objects grew by a
  quarter): that pause is taken on purpose, below.

What the start built (the interpreter, Textual, the app) is frozen (``gc.freeze``): no automatic
collection walks it again. Every COLLECT_EVERY_S, once the operator has typed nothing for
QUIET_S, one full collection frees the cycles that reached the oldest generation, and what
survives it is frozen too: the next one walks only what is younger. Measured at 256 real-size
nodes with the collector off and that collection every 10 s: 0.4-0.7 s of CPU each (~1 M objects
walked); every 300 s and after 3 s without a key, no key of the fan-out bench's windows met one.
A cycle that was still in use when frozen and became garbage later is freed by the collection of
everything every FULL_EVERY_S (seconds at that size, so rarely, and never while keys come).
"""
from __future__ import annotations

import gc
import time

from console.turns import KEYS_FIRST

#: new containers (allocations less frees) between two collections of the youngest generation
YOUNG_THRESHOLD = 20_000
#: young collections between two of the middle generation
MIDDLE_THRESHOLD = 5
#: middle collections between two automatic full ones: effectively never (the schedule does it)
FULL_THRESHOLD = 1_000_000

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

#: the thresholds before ``tune`` (None: not tuned, the collector is CPython's as it was)
_before: tuple[int, ...] | None = None


def collect_young() -> int:
    """Collect what is not frozen yet, then freeze what survived (the number of objects found
    unreachable)."""
    found = gc.collect()
    gc.freeze()
    return found


def collect_all() -> int:
    gc.unfreeze()
    return collect_young()


def tune() -> None:
    """The collector on with the console's thresholds, and what exists now frozen (what the start
    built)."""
    global _before
    if _before is None:
        _before = gc.get_threshold()
    gc.set_threshold(YOUNG_THRESHOLD, MIDDLE_THRESHOLD, FULL_THRESHOLD)
    gc.freeze()


def tuned() -> bool:
    return _before is not None


def start(app) -> None:
    """The collector tuned (``tune``); then collect fully on a schedule, never while a key is
    being answered."""
    tune()

    def when_free(collect):
        def run(due: float | None = None) -> None:
            if not tuned():               # the screen is gone (stop): the collector is CPython's again
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
        tune()
        self._last = time.monotonic()
        return self

    def tick(self) -> None:
        if time.monotonic() - self._last >= COLLECT_EVERY_S:
            collect_young()
            self._last = time.monotonic()

    def __exit__(self, *exc) -> None:
        stop()


def stop() -> None:
    """The collector as it was before ``tune`` (the console's screen is gone)."""
    global _before
    gc.unfreeze()
    if _before is not None:
        gc.set_threshold(*_before)
        _before = None
