"""Garbage collection paced for a console that keeps a lot in memory and must answer keys.

Polling 256 nodes keeps a few hundred thousand objects alive (each node's latest snapshot and
five minutes of history digests). CPython's full collection walks all of them: 70 to 400 ms
with every thread stopped, every few seconds while the history fills, and each one is a key
that waits. So what has survived a young collection is moved out of the collector's sight
(``gc.freeze()``) every FREEZE_EVERY_S: collections then walk only what is young and take a
few milliseconds. What the console drops (old history, replaced snapshots) holds no reference
cycles and is freed by reference counting all the same; cyclic garbage that was frozen while
still in use (an asyncio future of a poll in flight, say) is collected by one full collection
every FULL_EVERY_S, the one pause left.
"""
from __future__ import annotations

import gc

from console.turns import KEYS_FIRST

#: how often survivors of a young collection are moved out of the collector's sight
FREEZE_EVERY_S = 2.0
#: how often everything is collected once (frozen cyclic garbage freed): one pause
FULL_EVERY_S = 600.0
#: the collector's own thresholds: young collections every GEN0 allocations (CPython's 700 ran
#: ~100 young collections a second at 256 real-size nodes), and no full collection of its own
#: (a full one between two freezes walked every survivor since the last: 11% of the console's
#: CPU at 256 real-size nodes); what a full collection is for, freeing cyclic garbage, is
#: collect_all's
GEN0, GEN1, GEN2 = 10_000, 10, 1 << 30


def freeze_survivors() -> None:
    if KEYS_FIRST.holding:     # a key is being answered: the next turn (console/turns.py)
        return
    gc.collect(1)          # what is young and already garbage goes first
    gc.freeze()


def collect_all() -> int:
    gc.unfreeze()
    found = gc.collect()
    freeze_survivors()
    return found


def start(app) -> None:
    """Freeze now (everything the start built), then pace the collector."""
    gc.set_threshold(GEN0, GEN1, GEN2)
    freeze_survivors()
    app.set_interval(FREEZE_EVERY_S, freeze_survivors, name="gc freeze")
    app.set_interval(FULL_EVERY_S, collect_all, name="gc full")
