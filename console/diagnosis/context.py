"""What diagnosis knows besides the snapshot: time, recent history, the actions taken.

``Situation`` is built once per ``diagnose`` call and answers the timing questions the
ladder's advice turns on: when did we last kill these PIDs, how long have they sat in
D state, is memory coming back.  Pure: nothing here reads a clock or a node (the only state
is a memo of PID maps per snapshot, which never changes an answer).
"""
from __future__ import annotations

import collections
import weakref
from dataclasses import dataclass, field
from typing import Callable, Iterable, Sequence

from ..ladder import (TEARDOWN_WINDOW_S, blocker_daemon, device_gpus, driver_gpus, holder_pids, label,
                      proc_protected)
from ..model import ActionRecord, NodeSnapshot, Proc
from . import text

SHRINK_MIB = 256            # a drop this large between polls means the driver is still freeing
TREND_SPAN_S = 15.0         # compare memory with a poll at most this old
DEVICE_HOLDER_GONE = ("Z", "X")


_PID_MAPS: "collections.OrderedDict[int, tuple[weakref.ref, dict[int, Proc]]]" = collections.OrderedDict()
_PID_MAPS_KEEP = 1024     # snapshots whose PID maps are remembered between calls (history is re-read each poll)


def _pid_map(snap: NodeSnapshot) -> dict[int, Proc]:
    """{pid: Proc} of a snapshot, remembered while the snapshot lives (the engine re-diagnoses
    with the same history every poll; rebuilding these maps was most of diagnose's time)."""
    key = id(snap)
    hit = _PID_MAPS.get(key)
    if hit is not None and hit[0]() is snap:
        _PID_MAPS.move_to_end(key)
        return hit[1]
    pmap = {p.pid: p for p in snap.processes}
    _PID_MAPS[key] = (weakref.ref(snap), pmap)
    while len(_PID_MAPS) > _PID_MAPS_KEEP:
        _PID_MAPS.popitem(last=False)
    return pmap


@dataclass
class Situation:
    snap: NodeSnapshot
    now: float
    history: tuple[NodeSnapshot, ...]       # older snapshots of the same node, oldest first
    actions: tuple[ActionRecord, ...]       # oldest first
    ghost_threshold_mib: int
    reset_wanted: set[int] = field(default_factory=set)   # GPUs some advice wants reset
    _listed: set[int] | None = None

    @classmethod
    def build(cls, snap: NodeSnapshot, history: Sequence[NodeSnapshot], actions: Sequence[ActionRecord],
              now: float | None, ghost_threshold_mib: int) -> "Situation":
        now = snap.taken_at if now is None else now
        hist = tuple(sorted((h for h in history if h is not snap and h.name == snap.name
                             and h.taken_at < snap.taken_at and h.error is None),
                            key=lambda h: h.taken_at))
        acts = tuple(sorted((a for a in actions if a.node in (None, snap.name) and a.ts <= now),
                            key=lambda a: a.ts))
        return cls(snap=snap, now=now, history=hist, actions=acts, ghost_threshold_mib=ghost_threshold_mib)

    # ------------------------------------------------------------ processes

    def pmap(self, snap: NodeSnapshot) -> dict[int, Proc]:
        return _pid_map(snap)

    def proc(self, pid: int) -> Proc | None:
        return self.pmap(self.snap).get(pid)

    def name(self, proc: Proc) -> str:
        """A readable name; a zombie has no argv left, so the driver's name for it is used."""
        if not proc.cmdline.strip() or proc.cmdline.rstrip().endswith("<defunct>"):
            for dp in self.snap.driver_processes_here():
                if dp.pid == proc.pid and dp.name:
                    return dp.name.rsplit("/", 1)[-1]
        return label(proc)

    def names(self, procs: Sequence[Proc]) -> str:
        return text.names(procs, self.name)

    def driver_pids(self) -> set[int]:
        if self._listed is None:
            self._listed = {dp.pid for dp in self.snap.driver_processes_here()}
        return self._listed

    def gpus_of(self, proc: Proc) -> set[int]:
        """GPUs a process is on: the driver's list, its /dev/nvidiaN files, its memory keys."""
        out = device_gpus(proc) | driver_gpus(self.snap, proc.pid)
        out |= {int(k) for k in proc.gpu_memory_mib if str(k).isdigit()}
        return out

    def mib_of(self, proc: Proc) -> int:
        if proc.gpu_memory_mib:
            return proc.gpu_memory_total_mib
        return sum(dp.used_memory_mib or 0 for dp in self.snap.driver_processes_here() if dp.pid == proc.pid)

    def holds_gpu(self, proc: Proc) -> bool:
        return proc.is_gpu_holder or proc.pid in self.driver_pids() or bool(proc.d_threads and self.gpus_of(proc))

    def touchable(self, proc: Proc) -> bool:
        """May the ladder signal it? (not PID 1, not a kernel thread, not us, not a blocker daemon)"""
        return not proc_protected(self.snap, proc) and blocker_daemon(proc) is None

    def live_holders(self, gpus: Iterable[int]) -> list[Proc]:
        """ladder.holder_pids (signallable holders of these GPUs, all when empty) as processes,
        leaving out zombies that no longer hold anything."""
        pmap = self.pmap(self.snap)
        out = []
        for pid in holder_pids(self.snap, gpus):
            p = pmap[pid]
            if p.state in DEVICE_HOLDER_GONE and not p.d_threads and not p.holds_devices:
                continue
            out.append(p)
        return out

    # ------------------------------------------------------------ time

    def age(self, ts: float) -> float:
        return max(0.0, self.now - ts)

    def last_action(self, rungs: Iterable[str], pids: Iterable[int] = (),
                    gpus: Iterable[int] = ()) -> ActionRecord | None:
        """Most recent action of these rungs aimed at any of these PIDs/GPUs (or node-wide)."""
        rungs, pids, gpus = set(rungs), set(pids), set(gpus)
        for a in reversed(self.actions):
            if a.rung not in rungs:
                continue
            if (not a.pids and not a.gpus) or (not pids and not gpus) \
                    or pids & set(a.pids) or gpus & set(a.gpus):
                return a
        return None

    def since(self, pid: int, holds: Callable[[Proc], bool]) -> float:
        """Since when (earliest consecutive poll) process ``pid`` has satisfied ``holds``.

        Looks back no further than twice the teardown window; the same process means the
        same start time, so a reused PID does not extend the streak.
        """
        cur = self.proc(pid)
        first = self.snap.taken_at
        if cur is None:
            return first
        for h in reversed(self.history):
            if self.snap.taken_at - h.taken_at > 2 * TEARDOWN_WINDOW_S:
                break
            old = self.pmap(h).get(pid)
            if old is None or old.start_ticks != cur.start_ticks or old.create_time != cur.create_time \
                    or not holds(old):
                break
            first = h.taken_at
        return first

    def used_mib(self, snap: NodeSnapshot, gpus: Iterable[int]) -> int | None:
        want = set(gpus)
        vals = [g.memory_used_mib for g in snap.gpus if not want or g.index in want]
        if not vals or any(v is None for v in vals):
            return None
        return sum(v for v in vals if v is not None)

    def shrinking(self, gpus: Iterable[int] = ()) -> bool:
        """Is memory on these GPUs coming back (dropped by SHRINK_MIB against a recent poll)?"""
        gpus = tuple(gpus)
        cur = self.used_mib(self.snap, gpus)
        if cur is None or not self.history:
            return False
        recent = [h for h in self.history if self.snap.taken_at - h.taken_at <= TREND_SPAN_S]
        for h in (recent[:1] + list(self.history[-1:])) if recent else ():
            old = self.used_mib(h, gpus)
            if old is not None and old - cur >= SHRINK_MIB:
                return True
        return False
