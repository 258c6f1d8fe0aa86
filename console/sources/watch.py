"""The watched set: the processes every probe reads in full, and what the next probe asks.

What can change the verdict on a GPU node is a small part of its process table: the processes
the driver charges, the holders of the device files, their ancestors (who would reap them,
who respawns them) and descendants (workers that inherit the memory), zombies, and every
process with a thread in D (``watched``). Every probe reads their stat record; the GPU's own
(the driver's, the holders, Z and D) every probe also have their fds walked and, with more than
one thread, their threads read (where a D-state that matters lives: a holder's thread stuck in
the driver). A process outside the set is read when it is new, and at every whole probe.

Pure: a snapshot (or the parser's process table: ``kept``) in, PIDs out.
"""
from __future__ import annotations

from typing import Any, Callable, Iterable, Mapping

from console.model import NodeSnapshot
from console.probe_scope import MAX_SCOPE_PIDS, Scope

#: leader states that put a process in the watched set by themselves
_STATES = ("Z", "D")
#: kernel threads: kthreadd (PID 2) and its children never hold a device file
_KTHREADD = 2


def watched(snap: NodeSnapshot) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
    """(watched PIDs, PIDs whose threads to read, PIDs whose fds to walk), the most important
    first, at most MAX_SCOPE_PIDS each: the driver's and the holders, zombies and D (the GPU's
    own: their threads and fds too), then their families (their stat)."""
    procs = {p.pid: p for p in snap.processes}
    first, family = _sets(((p.pid, p.ppid, p.state) for p in snap.processes), snap_driver(snap),
                          lambda pid: procs[pid].device_files, lambda pid: procs[pid].d_threads)
    pids = [*first, *family][:MAX_SCOPE_PIDS]
    own = list(first)[:MAX_SCOPE_PIDS]
    threads = [pid for pid in own if (procs[pid].num_threads or 1) > 1 or procs[pid].state in _STATES
               or procs[pid].d_threads]
    return tuple(pids), tuple(threads), tuple(own)


def kept(stats: Mapping[int, Any], driver: Iterable[int], devices: Mapping[int, Any],
         dthreads: Mapping[int, Any]) -> frozenset[int]:
    """Every PID of the watched set, uncut, from the parser's process table (``stats``: PID ->
    stat record, a dict or packed_stats.PackedStats, whose ``rows`` make no record; ``devices``:
    PID -> its device files; ``dthreads``: PID -> its threads in D): the processes a node not on
    screen keeps in full (parse.py ``detail``)."""
    rows = stats.rows() if hasattr(stats, "rows") else ((st.pid, st.ppid, st.state) for st in stats.values())
    first, family = _sets(rows, set(driver), devices.get, dthreads.get)
    return frozenset(first) | frozenset(family)


def _sets(rows: Iterable[tuple[int, int, str]], driver: set[int], device_files: Callable[[int], Any],
          d_threads: Callable[[int], Any]) -> tuple[dict[int, None], dict[int, None]]:
    """(the GPU's own processes, their families), each in the order found: the driver's, the
    holders, zombies and D; then their ancestors (who reaps them, who respawns them) and the
    descendants of the driver's and the holders. ``rows``: (pid, ppid, state) of each process."""
    parent: dict[int, int] = {}
    own: list[int] = []
    for pid, ppid, state in rows:
        if pid not in parent:
            parent[pid] = ppid
            if state in _STATES or device_files(pid) or d_threads(pid):
                own.append(pid)
    first: dict[int, None] = {pid: None for pid in sorted(driver) if pid in parent}
    first.update(dict.fromkeys(own))
    roots = [pid for pid in first if device_files(pid) or pid in driver]
    family: dict[int, None] = {}
    for pid in first:                  # ancestors: the parent reaps, a supervisor respawns
        seen = 0
        ppid = parent[pid]
        while ppid in parent and ppid not in first and ppid not in family and seen < 64:
            family[ppid] = None
            ppid = parent[ppid]
            seen += 1
    if roots:                          # descendants of the GPU's processes
        children: dict[int, list[int]] = {}
        for pid, ppid in parent.items():
            if ppid != _KTHREADD and pid != _KTHREADD:
                children.setdefault(ppid, []).append(pid)
        todo = list(roots)
        while todo and len(first) + len(family) < 4 * MAX_SCOPE_PIDS:
            for child in children.get(todo.pop(), ()):
                if child not in first and child not in family:
                    family[child] = None
                    todo.append(child)
    return first, family


def snap_driver(snap: NodeSnapshot) -> set[int]:
    return {d.pid for d in snap.driver_processes if d.local is not False}


def scope_for(snap: NodeSnapshot | None, *, whole: bool, args: tuple[int, ...] = (),
              memo: dict | None = None) -> Scope:
    """The next probe's scope after ``snap`` (None, or a snapshot that read no process table: a
    shell's first probe, everything). ``memo``: the node's parse cache (its "shape" counts the changes
    the set depends on)."""
    if snap is None or (not snap.processes and snap.table_size is None):
        return Scope()
    # the same shape of the table (proc_read.py counts its changes) and the same driver list:
    # the same set, without a pass over the processes
    key = (memo.get("shape"), tuple(sorted(snap_driver(snap)))) if memo is not None and "shape" in memo else None
    hit = memo.get("watched") if memo is not None else None
    if key is not None and hit is not None and hit[0] == key:
        pids, threads, own = hit[1]
    else:
        pids, threads, own = watched(snap)
        if memo is not None and key is not None:
            memo["watched"] = (key, (pids, threads, own))
    return Scope(whole=whole, watched=pids, threads=threads, args=args, fds=own)

