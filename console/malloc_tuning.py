"""The C allocator's thresholds, fixed, for a process that polls many nodes for hours.

glibc's malloc serves a big block (a probe's output: 0.1-2 MB of text, then its lines) from
mmap, until the first such block is freed: from then on its "dynamic mmap threshold" has grown
to that size, and blocks up to it come from the heap, between the small objects parsed out of
them. Freed, they leave holes the heap cannot give back while a later object lives above them.
Measured on the engine alone over 64 real-size nodes (console/bench/heap.py, 2,000 processes
each, 40 s): 183 MiB resident with glibc's defaults, 151 MiB with the mmap and trim thresholds
fixed at 128 KiB (the same objects: 76.6 MiB of structures both times), the per-node slope
0.45 MiB lower. Limiting the arenas keeps the engine's and the screen's threads from each
growing a heap of their own for the same kind of work.

These are mallopt(3)'s documented parameters, set through ctypes; where the C library is not
glibc (musl, macOS) or has no ``mallopt``, nothing changes. Called once, before the threads
start (``tune``); the environment's MALLOC_*_ variables, when set, win (glibc reads them at
start, and a person who set them meant them).
"""
from __future__ import annotations

import ctypes
import os
import sys

#: mallopt(3) parameter numbers (glibc's malloc.h)
M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
M_ARENA_MAX = -8

#: blocks from this size up are mmap'ed, and given back whole when freed; the heap's top is
#: given back from this much free
THRESHOLD_BYTES = 128 * 1024
#: the main arena and one more (the engine's thread, the screen's)
ARENA_MAX = 2

_SETTINGS = ((M_MMAP_THRESHOLD, THRESHOLD_BYTES, "MALLOC_MMAP_THRESHOLD_"),
             (M_TRIM_THRESHOLD, THRESHOLD_BYTES, "MALLOC_TRIM_THRESHOLD_"),
             (M_ARENA_MAX, ARENA_MAX, "MALLOC_ARENA_MAX"))


def tune() -> list[str]:
    """Fix the thresholds (see the module's doc); the names of those set (none off glibc)."""
    if not sys.platform.startswith("linux"):
        return []
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return []
    mallopt.argtypes, mallopt.restype = (ctypes.c_int, ctypes.c_int), ctypes.c_int
    done = []
    for param, value, env in _SETTINGS:
        if env not in os.environ and mallopt(param, value) == 1:
            done.append(env.strip("_"))
    return done
