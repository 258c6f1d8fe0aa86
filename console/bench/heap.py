"""Where the engine's memory goes: a headless session over simulated real-size nodes.

    python -m console.bench.heap --nodes 32 --seconds 40 [--procs 2000 --threads 10000] [--tracemalloc] [--paced-gc]

``gpu-incident simulate`` serves the nodes (its own process, as in the fan-out bench); this
process runs the engine alone (a ``Session`` over the SSH sources, one node "in view", the
follower's feed on, no screen) for ``--seconds``, then prints a JSON document:

- ``rss_mib``: this process's resident memory (the engine, asyncssh and the interpreter);
- ``structures``: per structure, the bytes of the objects it holds that no structure listed
  before it holds (so the figures add up; ``sizeof`` of each object, as ``gc`` reaches it):
  the latest snapshots, the parse cache per key, the history (digests, streaks), the sources'
  other state, the diagnosis memo, the follower's feed, the SSH connections;
- with ``--tracemalloc``: the live allocations by module and the top lines (the engine runs
  2-3x slower under it: fewer nodes).

Not part of ``bench --quick``: a tool to find where memory goes (docs/performance.md).
"""
from __future__ import annotations

import argparse
import os
import asyncio
import collections
import gc
import json
import shutil
import sys
import tempfile
import time
import tracemalloc
import types
from pathlib import Path

import psutil

_SKIP = (type, types.ModuleType, types.FunctionType, types.BuiltinFunctionType, types.MethodType,
         types.CodeType, types.FrameType)


def retained(roots, seen: set[int]) -> tuple[int, int]:
    """(bytes, objects) reachable from ``roots`` and not in ``seen`` (which then holds them);
    classes, modules, functions and frames are not followed."""
    total = count = 0
    stack = list(roots)
    while stack:
        obj = stack.pop()
        if id(obj) in seen or isinstance(obj, _SKIP):
            continue
        seen.add(id(obj))
        total += sys.getsizeof(obj, 0)
        count += 1
        stack.extend(gc.get_referents(obj))
        if type(obj) is dict:        # gc does not visit a dict's str keys (they cannot make cycles)
            stack.extend(obj.keys())
    return total, count


def breakdown(session, seen: set[int] | None = None) -> dict[str, dict]:
    """Bytes per structure, each exclusive of those before it (see the module's doc)."""
    from console.diagnosis import history as hist
    seen = set() if seen is None else seen
    # what never counts: the modules' own objects (interned names, constants)
    for mod in list(sys.modules.values()):
        seen.add(id(mod))
    out: dict[str, dict] = {}

    def put(name: str, roots) -> None:
        b, n = retained(roots, seen)
        out[name] = {"mib": round(b / (1 << 20), 2), "objects": n}

    mons = session.monitors
    srcs = session.sources
    put("latest snapshots (monitor.latest)", [m.latest for m in mons])
    keys = collections.Counter()
    for s in srcs:
        keys.update(k if isinstance(k, str) else repr(k) for k in getattr(s, "_parse_cache", {}))
    for key in sorted(keys, key=str):
        put(f"parse cache[{key}]", [v for s in srcs for k, v in getattr(s, "_parse_cache", {}).items()
                                     if (k if isinstance(k, str) else repr(k)) == key])
    put("monitor._diagnosed (last diagnosed poll)", [m._diagnosed for m in mons])
    put("history: streak tracks", [m.history._tracks for m in mons])
    put("history: digests", [m.history._polls for m in mons])
    put("history: other", [m.history for m in mons])
    put("sources: _table_snap", [getattr(s, "_table_snap", None) for s in srcs])
    put("sources: probe script text", [getattr(s, "_script_text", None) for s in srcs])
    put("diagnosis memo (history._MEMO)", [hist._MEMO])
    put("feed: memory trails", [session.feed.trails])
    put("feed: follower state", [session.feed.state])
    put("sources: the rest (SSH connection, asyncssh)", [vars(s) for s in srcs])
    put("session: the rest", [vars(session)])
    return out


def by_module(snap: tracemalloc.Snapshot, top: int = 25) -> dict:
    stats = snap.statistics("filename")
    mods = collections.Counter()
    for st in stats:
        name = st.traceback[0].filename
        for marker in ("/console/", "/site-packages/", "/lib/python"):
            if marker in name:
                name = name[name.index(marker) + 1:]
                break
        mods[name] += st.size
    lines = snap.statistics("lineno")[:top]
    return {"by_file_mib": {k: round(v / (1 << 20), 2) for k, v in mods.most_common(top)},
            "top_lines": [f"{round(s.size / (1 << 20), 2)} MiB {s.count} blocks "
                          f"{s.traceback[0].filename.split('/console/')[-1]}:{s.traceback[0].lineno}"
                          for s in lines]}


async def run(nodes: int, seconds: float, size: tuple[int, int], trace: bool, paced: bool = False) -> dict:
    from console.bench.fanout import _start_simulator, _stop, bench_env
    from console.incident.timeline import open_incident
    from console.session.core import Session
    from console.sources.ssh.options import SshOptions
    from console.sources.targets import make_source
    from console.ui import gc_pacing

    root = Path(tempfile.mkdtemp(prefix="gpu-incident-heap-"))
    sim = await _start_simulator(root, nodes, bench_env(), size)
    try:
        state = root / "sim"
        (root / "ssh_config").write_text("")
        ssh = SshOptions(known_hosts=str(state / "known_hosts"), identity=(str(state / "client_key"),),
                         ssh_config=str(root / "ssh_config"))
        targets = [t for t in (state / "targets.txt").read_text().split() if t]
        sources = [make_source(t, ssh=ssh) for t in targets]
        tl = open_incident(root / "incidents")
        session = Session(sources, timeline=tl, interval=max(1.0, nodes / 256))
        session.compact = True           # as the console runs it: one node on screen in full
        session.view(sources[0].name)
        # the follower's state is written only while one asks: ask, as a follower would
        if session.feed._want is not None:
            session.feed._want.parent.mkdir(parents=True, exist_ok=True)
            session.feed._want.touch()
        rss0 = psutil.Process().memory_info().rss
        if trace:
            tracemalloc.start(1)
        if paced:       # as the console's screen runs it (console/ui/gc_pacing.py): tuned thresholds
            gc_pacing.tune()
        session.start()
        t0 = time.monotonic()
        await asyncio.sleep(seconds)
        answered = sum(1 for m in session.monitors if m.latest is not None and m.latest.error is None)
        procs = sum(len(m.latest.processes) for m in session.monitors if m.latest is not None)
        doc: dict = {"nodes": nodes, "procs": size[0], "threads": size[1], "seconds": round(time.monotonic() - t0, 1),
                     "answered": answered, "processes_latest": procs,
                     "rss_mib_before_start": round(rss0 / (1 << 20), 1)}
        snap = tracemalloc.take_snapshot() if trace else None
        doc["rss_mib"] = round(psutil.Process().memory_info().rss / (1 << 20), 1)
        if snap is not None:
            tracemalloc.stop()
            doc["tracemalloc_total_mib"] = round(sum(s.size for s in snap.statistics("filename")) / (1 << 20), 1)
            doc["tracemalloc"] = by_module(snap)
        doc["structures"] = breakdown(session)
        doc["structures_mib"] = round(sum(v["mib"] for v in doc["structures"].values()), 1)
        doc["cyclic_garbage_objects"] = gc.collect()
        doc["rss_mib_after_collect"] = round(psutil.Process().memory_info().rss / (1 << 20), 1)
        try:        # glibc: give back the free memory at the top of each arena and in free pages
            import ctypes
            ctypes.CDLL("libc.so.6").malloc_trim(0)
            doc["rss_mib_after_malloc_trim"] = round(psutil.Process().memory_info().rss / (1 << 20), 1)
        except (OSError, AttributeError):
            pass
        doc["pymalloc"] = pymalloc_mib()
        await session.stop()
        tl.close()
        if paced:
            gc_pacing.stop()
        return doc
    finally:
        await _stop(sim)
        shutil.rmtree(root, ignore_errors=True)


_PYMALLOC = (("arenas", "# arenas allocated current"), ("in_blocks", "# bytes in allocated blocks"),
             ("free_in_pools", "# bytes in available blocks"), ("unused_pools", "unused pools *"))


def pymalloc_mib() -> dict[str, float]:
    """What CPython's small-object allocator holds (its own debug statistics, written to the C
    stderr): MiB in arenas, in live blocks, free in used pools, in unused pools. Free memory it
    holds is memory the heap's structures do not show and the RSS does."""
    import tempfile
    out: dict[str, float] = {}
    with tempfile.TemporaryFile() as tmp:
        sys.stderr.flush()
        saved = os.dup(2)
        try:
            os.dup2(tmp.fileno(), 2)
            sys._debugmallocstats()
        finally:
            os.dup2(saved, 2)
            os.close(saved)
        tmp.seek(0)
        text = tmp.read().decode("ascii", "replace")
    for line in text.splitlines():
        for key, start in _PYMALLOC:
            if start in line:
                value = line.split("=")[-1].strip().replace(",", "")
                if value.isdecimal():
                    mib = int(value) / (1 << 20)
                    out[key] = round(mib if key != "arenas" else int(value), 2)
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m console.bench.heap")
    p.add_argument("--nodes", type=int, default=32)
    p.add_argument("--seconds", type=float, default=40.0)
    p.add_argument("--procs", type=int, default=2000)
    p.add_argument("--threads", type=int, default=10000)
    p.add_argument("--tracemalloc", action="store_true")
    p.add_argument("--paced-gc", action="store_true",
                   help="the collector tuned, as under the console's screen (ui/gc_pacing.py)")
    p.add_argument("--glibc-defaults", action="store_true",
                   help="the C allocator as glibc sets it (the console fixes its thresholds: malloc_tuning.py)")
    a = p.parse_args(argv)
    from console import malloc_tuning
    tuned = [] if a.glibc_defaults else malloc_tuning.tune()
    doc = asyncio.run(run(a.nodes, a.seconds, (a.procs, a.threads), a.tracemalloc, a.paced_gc))
    doc["malloc_tuned"] = tuned
    print(json.dumps(doc, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
