"""A node's recent polls, kept as small as what diagnosis reads from them.

From earlier polls diagnosis reads only: their name, time and error (probe-hung, and which
polls count); each GPU's memory used/reserved with the driver's accounting on it (ghost
memory, "is memory coming back"); the kernel log (was an Xid line there before a reset?);
and, per process, for how many consecutive polls it has been the same process in the same
condition (``Situation.since``: a zombie, in D, holding device files, under the same
parent).  ``History`` keeps exactly that:

- every poll as a digest ``NodeSnapshot``: no processes, no findings, no utilisation, the
  driver's processes summed per GPU (what ghost memory adds up); parts unchanged since the
  poll before are shared with it;
- ``tracks``: per process of the latest poll that read the processes, the poll each of its streaks began
  at (``Track``), advanced in one pass over each new poll.

The same streaks are worked out from full snapshots when diagnosis is handed a plain list
(``track_of``), so both give the same answers.  Also here: ``memo``, values derived from a
snapshot remembered for as long as the snapshot lives.  Pure: no clock, no I/O.
"""
from __future__ import annotations

import bisect
import itertools
import operator

import collections
import copy
import dataclasses
import weakref
from typing import Callable, Iterable, Iterator, Mapping, NamedTuple, Sequence, TypeVar, overload

from console.model import DriverProc, Gpu, NodeSnapshot, Proc

HISTORY_POLLS = 300        # polls kept per node (5 min at 1 s; diagnosis reads up to this far back)

# the conditions Situation.since follows (what a process has been, poll after poll)
ZOMBIE = "zombie"          # state Z
IN_D = "in-d"              # a thread in D (or the leader in D)
DEVICES = "devices"        # holds device files open
PARENT = "parent"          # the same parent PID as now
STREAKS = (ZOMBIE, IN_D, DEVICES, PARENT)

T = TypeVar("T")

# ---------------------------------------------------------------- per-snapshot memo

_MEMO: dict[int, tuple["weakref.ref[NodeSnapshot]", dict]] = {}


def _forget(key: int, ref: "weakref.ref[NodeSnapshot]") -> None:
    hit = _MEMO.get(key)
    if hit is not None and hit[0] is ref:
        _MEMO.pop(key, None)        # (the engine diagnoses in a worker thread: never raise here)


def memo(snap: NodeSnapshot, what: str, build: Callable[[NodeSnapshot], T]) -> T:
    """``build(snap)``, computed once per snapshot object and forgotten when the snapshot goes.

    Snapshots are immutable, so a derived value (its PID map, its ghost accounting) never
    goes stale; the engine re-reads the same history every poll.
    """
    key = id(snap)
    hit = _MEMO.get(key)
    if hit is None or hit[0]() is not snap:
        hit = (weakref.ref(snap, lambda ref, key=key: _forget(key, ref)), {})
        _MEMO[key] = hit
    values = hit[1]
    try:
        return values[what]
    except KeyError:
        value = values[what] = build(snap)
        return value


def pid_map(snap: NodeSnapshot) -> dict[int, Proc]:
    """{pid: Proc} of a snapshot (the last one wins if a PID repeats)."""
    return memo(snap, "pid_map", lambda s: {p.pid: p for p in s.processes})


# ---------------------------------------------------------------- streaks

class Track(NamedTuple):
    """Where one process's streaks began (``taken_at`` of the first poll of each), as of the
    latest poll; None: the condition does not hold in that poll."""
    start_ticks: int | None
    create_time: float | None
    zombie: float | None
    in_d: float | None
    devices: float | None
    ppid: int | None
    parent: float | None            # since when ``ppid`` has been the parent
    former_ppid: int | None = None  # the parent before that, when the change was seen (reparented)
    cpu_ticks: int | None = None    # its CPU time at the latest poll (how fast it rises: is it computing?)
    cpu_at: float | None = None     # ... and that poll's time
    pending: float | None = None    # since when a SIGKILL has been pending (sent, not taken)


def _conditions(p: Proc) -> tuple[bool, bool, bool]:
    return p.state == "Z", bool(p.d_threads) or p.state == "D", bool(p.device_files)


def processes_read(snap: NodeSnapshot) -> bool:
    """The poll read the node's process table (even when the driver did not answer): its
    processes count for streaks."""
    return snap.error is None or bool(snap.processes)


def same_process(a: Proc | Track, b: Proc | Track) -> bool:
    """The same start time: a PID reused by another process starts a new streak."""
    return not (a.start_ticks != b.start_ticks or a.create_time != b.create_time)


_PID = operator.attrgetter("pid")
#: what advance saw of a node last: its processes (the parser's very tuple) and their PIDs
Seen = tuple[tuple[Proc, ...], list[int]]


def _plain(q: Proc, parent: float) -> Track:
    """The track of a process with no streak open but its parent's (``parent``: since when),
    from the Proc the last poll had of it: all else a track holds is that Proc's."""
    return Track(q.start_ticks, q.create_time, None, None, None, q.ppid, parent, None, q.cpu_ticks, None, None)


def advance(notable: dict[int, Track], since: dict[int, float], snap: NodeSnapshot,
            seen: Seen | None = None) -> tuple[dict[int, Track], dict[int, float], Seen]:
    """The tracks after one more poll that read the processes, and what to pass as ``seen``
    next time. Kept compact: a process with a streak open other than its parent's (a zombie, in
    D, holding device files, a SIGKILL pending, reparented) has its ``Track`` in ``notable``;
    every other one only since when it has had its parent, in ``since`` (a float the poll's
    other processes share), the rest of its track being its Proc in ``seen`` (``_plain``):
    ~130 bytes less a process, at 2,000 processes a node (docs/performance.md, "Memory").
    ``seen``: what the last call saw of the node: the very same tuple means nothing moved; the
    same PIDs mean only the processes that are not the very same objects are looked at (found
    in C, map), the others keep their tracks (only time passed)."""
    t = snap.taken_at
    procs = snap.processes
    if seen is not None and seen[0] is procs:
        return notable, since, seen
    pids = list(map(_PID, procs))
    todo: Sequence[Proc] = procs
    prevs: Sequence[Proc] | None = None
    out: dict[int, Track] = {}
    out_since: dict[int, float] = {}
    if seen is not None and seen[1] == pids:
        at = list(itertools.compress(range(len(procs)), map(operator.is_not, procs, seen[0])))
        if len(at) < len(procs) // 2:
            out, out_since = dict(notable), dict(since)
            todo, prevs = [procs[i] for i in at], [seen[0][i] for i in at]
        else:
            prevs = seen[0]
    by_pid = dict(zip(seen[1], seen[0])) if prevs is None and seen is not None and since else {}
    for i, p in enumerate(todo):
        pid = p.pid
        z, d, v = _conditions(p)
        old = notable.get(pid)
        if old is None:
            parent = since.get(pid)
            q = (prevs[i] if prevs is not None else by_pid.get(pid)) if parent is not None else None
            old = _plain(q, parent) if q is not None else None
        if old is None or not same_process(old, p):
            if z or d or v or p.sigkill_pending:
                out[pid] = Track(p.start_ticks, p.create_time, t if z else None, t if d else None,
                                 t if v else None, p.ppid, t, None, p.cpu_ticks, t, t if p.sigkill_pending else None)
                out_since.pop(pid, None)
            else:
                out_since[pid] = t
                out.pop(pid, None)
            continue
        zs = (t if old.zombie is None else old.zombie) if z else None
        ds = (t if old.in_d is None else old.in_d) if d else None
        vs = (t if old.devices is None else old.devices) if v else None
        ps = old.parent if old.ppid == p.ppid else t
        former = old.former_ppid if old.ppid == p.ppid else old.ppid
        pend = (t if old.pending is None else old.pending) if p.sigkill_pending else None
        if zs is None and ds is None and vs is None and pend is None and former is None:
            out_since[pid] = ps
            out.pop(pid, None)
            continue
        out_since.pop(pid, None)
        if zs is old.zombie and ds is old.in_d and vs is old.devices and ps is old.parent \
                and old.cpu_ticks == p.cpu_ticks and pend is old.pending and old.cpu_at is not None:
            out[pid] = old                    # nothing changed: share the tuple
        else:
            out[pid] = Track(old.start_ticks, old.create_time, zs, ds, vs, p.ppid, ps, former,
                             p.cpu_ticks, t, pend)
    return out, out_since, (procs, pids)


def track_of(cur: Proc, newest_first: Iterable[NodeSnapshot]) -> Track:
    """The streaks of process ``cur`` over full snapshots, newest first, in one pass (the
    caller passes only the polls it may look back on)."""
    zombie = in_d = devices = parent = former = None
    cpu_ticks = cpu_at = pending = None
    open_ = [True, True, True, True]
    pending_open = True
    ppid = None
    first = True
    for h in newest_first:
        old = pid_map(h).get(cur.pid)
        if old is None or not same_process(old, cur):
            break
        if first:
            ppid, first = old.ppid, False
            cpu_ticks, cpu_at = old.cpu_ticks, h.taken_at
        if pending_open:
            if old.sigkill_pending:
                pending = h.taken_at
            else:
                pending_open = False
        z, d, v = _conditions(old)
        t = h.taken_at
        if open_[0]:
            if z:
                zombie = t
            else:
                open_[0] = False
        if open_[1]:
            if d:
                in_d = t
            else:
                open_[1] = False
        if open_[2]:
            if v:
                devices = t
            else:
                open_[2] = False
        if open_[3]:
            if old.ppid == ppid:
                parent = t
            else:
                former = old.ppid
                open_[3] = False
        if not any(open_) and not pending_open:
            break
    return Track(cur.start_ticks, cur.create_time, zombie, in_d, devices, ppid, parent, former,
                 cpu_ticks, cpu_at, pending)


def streak_start(track: Track | None, cur: Proc, what: str, ppid: int | None = None) -> float | None:
    """When the streak of ``what`` (one of STREAKS) that runs up to the latest poll began,
    or None when there is none (not the same process, or the condition does not hold)."""
    if track is None or not same_process(track, cur):
        return None
    if what == ZOMBIE:
        return track.zombie
    if what == IN_D:
        return track.in_d
    if what == DEVICES:
        return track.devices
    if what == PARENT:
        return track.parent if track.parent is not None and track.ppid == ppid else None
    raise ValueError(f"unknown streak {what!r}; one of {', '.join(STREAKS)}")


# ---------------------------------------------------------------- digests

def _driver_digest(dps: Sequence[DriverProc]) -> tuple[DriverProc, ...]:
    """The driver's processes as ghost accounting adds them up (per GPU, a share None as soon as
    one process has no figure) and as a CUDA IPC hand-off is told from them (diagnosis/ipc.py:
    which PID had how much where): one entry per (GPU, PID), its name kept; nothing else of it."""
    sums: dict[tuple[int | None, str, int], tuple[int | None, str]] = {}
    for dp in dps:
        key = (dp.gpu_index, dp.gpu_uuid, dp.pid)
        have, _name = sums.get(key, (0, dp.name))
        sums[key] = (None if have is None or dp.used_memory_mib is None else have + dp.used_memory_mib, dp.name)
    return tuple(DriverProc(pid=pid, gpu_index=gi, gpu_uuid=gu, used_memory_mib=mib, name=name)
                 for (gi, gu, pid), (mib, name) in sums.items())


def _shared(value: T, before: T | None) -> T:
    return before if before is not None and before == value else value


def _gpu_digest(g: Gpu) -> Gpu:
    """The GPU with its utilisation as "0 or not" (0 or None): itself where it reads so already, else
    a copy with that one field set (a Gpu's fields are plain values: ``dataclasses.replace`` would
    run ``__init__`` over all thirty of them, 8 GPUs a poll of every node)."""
    util = 0 if g.utilization_pct == 0 else None
    if g.utilization_pct == util:
        return g
    out = copy.copy(g)
    object.__setattr__(out, "utilization_pct", util)
    return out


def digest(snap: NodeSnapshot, before: NodeSnapshot | None = None, *, same_gpus: bool = False) -> NodeSnapshot:
    """What history keeps of a poll (see the module's doc); ``before``: the previous digest,
    whose unchanged parts are reused rather than kept twice (``same_gpus``: the poll's GPUs are
    those the previous digest was made from)."""
    if same_gpus and before is not None:
        gpus = before.gpus
    else:
        # utilisation kept only as "0 or not" (an idle GPU's streak: diagnosis/processes.py), so
        # a busy GPU's digest is still shared from poll to poll
        gpus = tuple(map(_gpu_digest, snap.gpus))
    if before is not None and not same_gpus:
        by_index = {g.index: g for g in before.gpus}
        gpus = tuple(_shared(g, by_index.get(g.index)) for g in gpus)
    drivers = _driver_digest(snap.driver_processes)
    return dataclasses.replace(
        snap, processes=(), findings=(), gpus=_shared(gpus, before.gpus if before else None),
        driver_processes=_shared(drivers, before.driver_processes if before else None),
        kernel_log=_shared(snap.kernel_log, before.kernel_log if before else None),
        warnings=_shared(snap.warnings, before.warnings if before else None),
        lost_gpus=_shared(snap.lost_gpus, before.lost_gpus if before else None),
        own_pids=_shared(snap.own_pids, before.own_pids if before else None),
        pci_gpus=_shared(snap.pci_gpus, before.pci_gpus if before else None))


class _ReadAt(Mapping[int, Track]):
    """The tracks as of the poll that read the processes at ``at``, each one's CPU time read then.

    Every tracked process was in that poll with the CPU ticks its track holds (advance rebuilt the
    track of a process whose record changed; a process the parser handed over as the very same
    object has the same ticks). Its track may come from an earlier poll all the same (advance does
    not touch the unchanged): ``cpu_at`` is set to ``at`` as a track is looked up, so a CPU rate is
    over the time since the last poll, as track_of and a plain list of polls give it. A process
    with no streak open but its parent's has its track made as it is looked up (advance, _plain)."""
    __slots__ = ("_notable", "_since", "_procs", "_pids", "_index", "_at")

    def __init__(self, notable: dict[int, Track], since: dict[int, float], seen: Seen | None,
                 index: dict[int, int] | None, at: float) -> None:
        self._notable, self._since, self._at = notable, since, at
        self._procs, self._pids = seen if seen is not None else ((), [])
        self._index = index

    def _proc(self, pid: int) -> Proc:
        if self._index is not None:
            return self._procs[self._index[pid]]
        return self._procs[bisect.bisect_left(self._pids, pid)]

    def __getitem__(self, pid: int) -> Track:
        track = self._notable.get(pid)
        if track is None:
            parent = self._since[pid]             # KeyError: not tracked
            track = _plain(self._proc(pid), parent)
        if track.cpu_ticks is None or track.cpu_at == self._at:
            return track
        return track._replace(cpu_at=self._at)

    def __contains__(self, pid: object) -> bool:
        return pid in self._notable or pid in self._since

    def __iter__(self) -> Iterator[int]:
        return itertools.chain(self._notable, self._since)

    def __len__(self) -> int:
        return len(self._notable) + len(self._since)


class History(Sequence[NodeSnapshot]):
    """The last ``maxlen`` polls of a node, oldest first, as digests, with the process streaks
    as of its latest poll that read the processes.  Hand it to ``diagnose`` as it is: a copy
    (``tuple(history)``) has no processes, so every streak would start now.

    Polls must come in time order; one stamped no later than the last (the wall clock was
    set back) starts the history afresh.
    """

    def __init__(self, maxlen: int = HISTORY_POLLS) -> None:
        self.maxlen = maxlen
        self._polls: collections.deque[NodeSnapshot] = collections.deque(maxlen=maxlen)
        # per node name (one, unless polls of several nodes are mixed): (tracks, taken_at of
        # the poll that read the processes they are of)
        self._tracks: dict[str, tuple[dict[int, Track], dict[int, float], float]] = {}
        # (name, taken_at) of the kept polls that read the processes although the node had an
        # error (the driver did not answer): their digests have no processes left to tell
        self._read_despite_error: set[tuple[str, float]] = set()
        self._gpus_from: tuple = ()          # the GPUs of the poll the last digest was made from
        self._seen: dict[str, Seen] = {}     # per node: what its tracks were made from (advance)
        #: per node whose processes are not in PID order: PID -> position in what was seen
        self._index: dict[str, dict[int, int]] = {}

    def append(self, snap: NodeSnapshot) -> None:
        if self._polls and not snap.taken_at > self._polls[-1].taken_at:
            self.clear()
        if processes_read(snap):
            before = self._tracks.get(snap.name)
            last = self._seen.get(snap.name) if before else None
            notable, since, seen = advance(before[0] if before else {}, before[1] if before else {}, snap, last)
            if last is None or seen[1] is not last[1] and seen[1] != last[1]:
                # the PIDs changed: in PID order (the parser's), found by bisection; else an index
                pids = seen[1]
                if all(map(operator.lt, pids, itertools.islice(pids, 1, None))):
                    self._index.pop(snap.name, None)
                else:
                    self._index[snap.name] = {pid: i for i, pid in enumerate(pids)}
            self._seen[snap.name] = seen
            self._tracks[snap.name] = (notable, since, snap.taken_at)
            if snap.error is not None:
                self._read_despite_error.add((snap.name, snap.taken_at))
        if len(self._polls) == self.maxlen and self._read_despite_error:
            oldest = self._polls[0]
            self._read_despite_error.discard((oldest.name, oldest.taken_at))
        before = self._polls[-1] if self._polls else None
        # the parser handed over the very GPU objects of the poll before: their digest holds
        same = (before is not None and len(snap.gpus) == len(self._gpus_from)
                and all(a is b for a, b in zip(snap.gpus, self._gpus_from)))
        self._polls.append(digest(snap, before, same_gpus=same))
        self._gpus_from = snap.gpus

    def read_processes(self, poll: NodeSnapshot) -> bool:
        """Did this kept poll (a digest) read the node's processes? (processes_read of the poll
        it was made from)"""
        return poll.error is None or (poll.name, poll.taken_at) in self._read_despite_error

    def clear(self) -> None:
        self._gpus_from = ()
        self._seen.clear()
        self._index.clear()
        self._polls.clear()
        self._tracks.clear()
        self._read_despite_error.clear()

    def tracks_for(self, snap: NodeSnapshot) -> Mapping[int, Track] | None:
        """The streaks of the processes in the polls before ``snap`` (None when this history
        does not describe them: ``snap`` is not later than its last poll that read the processes)."""
        hit = self._tracks.get(snap.name)
        if hit is None or not hit[2] < snap.taken_at:
            return None
        return _ReadAt(hit[0], hit[1], self._seen.get(snap.name), self._index.get(snap.name), hit[2])

    def __len__(self) -> int:
        return len(self._polls)

    def __iter__(self) -> Iterator[NodeSnapshot]:
        return iter(self._polls)

    def __reversed__(self) -> Iterator[NodeSnapshot]:
        return reversed(self._polls)

    @overload
    def __getitem__(self, index: int) -> NodeSnapshot: ...

    @overload
    def __getitem__(self, index: slice) -> list[NodeSnapshot]: ...

    def __getitem__(self, index):
        if isinstance(index, slice):
            return list(self._polls)[index]
        return self._polls[index]

    def __repr__(self) -> str:
        tracked = sum(len(t) + len(s) for t, s, _ in self._tracks.values())
        return f"History({len(self)} polls, {tracked} processes tracked)"
